// The read path end to end: nfs-ganesha hub -> 30 ms each way WAN proxy -> LibnfsRemote ->
// BlockCache (the real one, in a temp dir) -> VolumeFs -> a real FUSE mount read with
// plain POSIX calls.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/eviction_policy.h"
#include "cache-agent/cache/nothrash_policy.h"
#include "cache-agent/exe/fuse_volume_mounter.h"
#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/run_as.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using spoke::testing::ReadWholeFile;
using spoke::testing::RunAsUser;

constexpr int kDirs = 20;
constexpr int kFilesPerDir = 100;  // 2000 small files
constexpr size_t kLargeSize = 64ull << 20;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&s[i], &x, 8);
  }
  for (size_t i = n & ~size_t{7}; i < n; ++i) s[i] = static_cast<char>(seed + i);
  return s;
}

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Reads a whole file with read(2) in 1 MiB calls; errno on failure.
Result<std::string> ReadThrough(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + path));
  std::string out;
  std::vector<char> buf(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return std::unexpected(Error::FromErrno(e, "read " + path));
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// An LRU block cache of `capacity` bytes in `dir`, or a test failure.
std::unique_ptr<BlockCache> OpenLruCache(const std::string& dir, uint64_t capacity,
                                         metrics::Registry* registry) {
  BlockCache::Config cc;
  cc.dir = dir;
  cc.capacity_bytes = capacity;
  auto cache = OpenBlockCache(cc, MakeLruPolicy(), registry);
  EXPECT_TRUE(cache) << cache.error().ToString();
  return cache ? std::move(*cache) : nullptr;
}

// The proxy frozen (the hub stops answering, connections stay open) until the end of scope.
class FrozenHub {
 public:
  explicit FrozenHub(testing::WanProxy* proxy) : proxy_(proxy) { proxy_->Freeze(true); }
  ~FrozenHub() { proxy_->Freeze(false); }
  FrozenHub(const FrozenHub&) = delete;
  FrozenHub& operator=(const FrozenHub&) = delete;

 private:
  testing::WanProxy* proxy_;
};

bool Mounted(const std::string& target) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + target + " ") != std::string::npos) return true;
  }
  return false;
}

class FuseMount : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    hub_ = testing::TestHub::Start().release();
    ASSERT_NE(hub_, nullptr);
    proxy_ = testing::WanProxy::Start(*hub_, 30).release();
    ASSERT_NE(proxy_, nullptr);
    std::string root = hub_->export_dir() + "/data";
    for (int d = 0; d < kDirs; ++d) {
      for (int f = 0; f < kFilesPerDir; ++f) {
        uint32_t seed = static_cast<uint32_t>(d * kFilesPerDir + f);
        size_t size = 10 * 1024 + (seed * 7919) % (100 * 1024);  // 10-110 KB
        std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f) + ".jpg";
        WriteFile(root + "/" + rel, Pattern(size, seed));
        small_files_.push_back(rel);
      }
    }
    for (int i = 0; i < 3; ++i) {
      std::string rel = "shards/shard-" + std::to_string(i) + ".tar";
      WriteFile(root + "/" + rel, Pattern(kLargeSize - i * 12345, 100000 + i));
      large_files_.push_back(rel);
    }
    WriteFile(root + "/cold/uncached.bin", Pattern(3 * (1 << 20) + 17, 4242));
    fs::create_directories(hub_->export_dir() + "/scratch");
    // The volume's directory as the controller makes it: writable by the volume's identity.
    fs::permissions(hub_->export_dir() + "/scratch", fs::perms::all);
  }
  static void TearDownTestSuite() {
    delete proxy_;
    delete hub_;
  }

  void SetUp() override {
    cache_dir_ = std::make_unique<testing::TempDir>("spoke-fuse-cache");
    // Slots are whole blocks: 2000 small files + 3 x 64 blocks need ~2200 of them.
    cache_ = OpenLruCache(cache_dir_->path(), 3ull << 30, &registry_);
    ASSERT_NE(cache_, nullptr);
    FuseVolumeMounter::Config mc;
    mc.hub.request_timeout_seconds = 3;
    mounter_ = std::make_unique<FuseVolumeMounter>(mc, cache_.get(), &registry_);
  }
  void TearDown() override {
    mounter_.reset();
    cache_.reset();
  }

  VolumeContext Context(VolumeMode mode, const std::string& path) {
    VolumeContext c;
    c.hub = proxy_->address();
    c.mode = mode;
    c.path = path;
    c.cache.consistency = Consistency::kImmutable;
    c.cache.prefetch = PrefetchMode::kAuto;
    c.hub_timeout_seconds = 3;
    return c;
  }

  // The scratch directory as a strict volume (the scratch default).
  VolumeContext StrictScratch() {
    VolumeContext c = Context(VolumeMode::kScratch, "scratch");
    c.cache.consistency = Consistency::kStrict;
    return c;
  }

  std::unique_ptr<MountedVolume> MountAt(const std::string& id, const VolumeContext& ctx,
                                         const std::string& target) {
    auto v = mounter_->Mount(id, ctx, target, false);
    EXPECT_TRUE(v) << v.error().ToString();
    return v ? std::move(*v) : nullptr;
  }

  // Reads every file through the mount with 16 threads; counts mismatches.
  int ReadAllAndCompare(const std::string& mnt) {
    std::vector<std::string> all = small_files_;
    all.insert(all.end(), large_files_.begin(), large_files_.end());
    std::atomic<size_t> next{0};
    std::atomic<int> bad{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 16; ++t) {
      readers.emplace_back([&] {
        for (size_t i = next++; i < all.size(); i = next++) {
          auto got = ReadThrough(mnt + "/" + all[i]);
          std::string want = ReadWholeFile(hub_->export_dir() + "/data/" + all[i]);
          if (!got || *got != want) {
            if (bad++ < 5) {
              ADD_FAILURE() << all[i] << ": " << (got ? "content differs" : got.error().ToString());
            }
          }
        }
      });
    }
    for (auto& t : readers) t.join();
    return bad.load();
  }

  std::string CacheMetrics() {
    std::string out, line;
    std::istringstream in(registry_.Render());
    while (std::getline(in, line)) {
      if (line.starts_with("spoke_cache") || line.starts_with("spoke_hub_read")) out += line + "\n";
    }
    return out;
  }

  static testing::TestHub* hub_;
  static testing::WanProxy* proxy_;
  static std::vector<std::string> small_files_;
  static std::vector<std::string> large_files_;
  metrics::Registry registry_;
  std::unique_ptr<testing::TempDir> cache_dir_;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<FuseVolumeMounter> mounter_;
};

testing::TestHub* FuseMount::hub_ = nullptr;
testing::WanProxy* FuseMount::proxy_ = nullptr;
std::vector<std::string> FuseMount::small_files_;
std::vector<std::string> FuseMount::large_files_;

// The kernel starts a FUSE mount with a 128 KiB read-ahead window; the mounter widens it to
// the configured size once INIT is answered (INIT itself can only lower it).
TEST_F(FuseMount, TheKernelReadAheadWindowIsWidenedToTheConfiguredSize) {
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-ra", Context(VolumeMode::kDataset, "data"), mnt.path());
  ASSERT_NE(vol, nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(mnt.path().c_str(), &st), 0);
  std::string bdi = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                    std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
  EXPECT_EQ(ReadWholeFile(bdi),
            std::to_string(FuseVolumeMounter::Config().kernel_read_ahead_bytes >> 10) + "\n");
  ASSERT_TRUE(vol->Unmount());
}

TEST_F(FuseMount, DatasetReadsAreExactCachedAndSurviveAHubOutage) {
  testing::TempDir mnt1("spoke-mnt"), mnt2("spoke-mnt");
  auto ctx = Context(VolumeMode::kDataset, "data");

  // Pass 1: cold, through the WAN.
  auto vol = MountAt("vol-data", ctx, mnt1.path());
  ASSERT_NE(vol, nullptr);
  ASSERT_TRUE(Mounted(mnt1.path()));
  EXPECT_EQ(ReadAllAndCompare(mnt1.path()), 0);

  // Random windows of the large files, from 16 threads.
  {
    std::atomic<int> bad{0};
    std::vector<std::string> sources;
    for (const auto& rel : large_files_)
      sources.push_back(ReadWholeFile(hub_->export_dir() + "/data/" + rel));
    std::vector<std::thread> readers;
    for (int t = 0; t < 16; ++t) {
      readers.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < 20; ++i) {
          size_t which = rng() % large_files_.size();
          const auto& rel = large_files_[which];
          const std::string& want = sources[which];
          uint64_t off = rng() % want.size();
          size_t len = 1 + rng() % (3 << 20);
          std::vector<char> buf(len);
          int fd = ::open((mnt1.path() + "/" + rel).c_str(), O_RDONLY);
          ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
          ::close(fd);
          size_t expect = std::min<uint64_t>(len, want.size() - off);
          if (n != static_cast<ssize_t>(expect) ||
              std::memcmp(buf.data(), want.data() + off, expect) != 0) {
            bad++;
          }
        }
      });
    }
    for (auto& t : readers) t.join();
    EXPECT_EQ(bad.load(), 0);
  }
  auto f1 = vol->Figures();
  EXPECT_GT(f1.hub_read_bytes, 0u);
  // The volume's series carry its hashed label, not its id.
  EXPECT_EQ(CacheMetrics().find("put_failures_total{volume=\"" + VolumeMetricsLabel("vol-data") +
                                "\"} 0") == std::string::npos,
            false)
      << CacheMetrics();
  EXPECT_GT(f1.cache_bytes, 0u);
  EXPECT_TRUE(f1.hub_reachable) << f1.last_hub_error;
  EXPECT_GT(f1.hub_total_bytes, 0u);
  ASSERT_TRUE(vol->Unmount());
  EXPECT_FALSE(Mounted(mnt1.path()));
  ASSERT_TRUE(vol->Unmount());  // idempotent
  vol.reset();

  // Pass 2: a fresh mount (cold kernel page cache) over the same block cache reads nothing
  // from the hub.
  vol = MountAt("vol-data", ctx, mnt2.path());
  ASSERT_NE(vol, nullptr);
  EXPECT_EQ(ReadAllAndCompare(mnt2.path()), 0);
  auto f2 = vol->Figures();
  EXPECT_EQ(f2.hub_read_bytes, 0u) << CacheMetrics();
  EXPECT_EQ(f2.cache_misses, 0u);
  EXPECT_GT(f2.cache_hits, 0u);
  EXPECT_GT(f2.cache_read_bytes, 0u);

  // Hub outage: cached files still read; an uncached one fails with EIO within the bound.
  // (Auto prefetch has cached the whole walked tree by now: drop cold/ first. The working
  // set's cursor has passed it, so it is not fetched again this epoch.)
  ASSERT_TRUE(vol->Evict("cold"));
  hub_->Stop();
  struct RestartOnExit {
    testing::TestHub* hub;
    bool restarted = false;
    ~RestartOnExit() {
      if (!restarted) hub->Restart();
    }
  } guard{hub_};
  {
    auto cached = ReadThrough(mnt2.path() + "/" + small_files_[7]);
    ASSERT_TRUE(cached) << cached.error().ToString();
    EXPECT_EQ(*cached, ReadWholeFile(hub_->export_dir() + "/data/" + small_files_[7]));
    auto start = std::chrono::steady_clock::now();
    int fd = ::open((mnt2.path() + "/cold/uncached.bin").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << "open must not need the hub (metadata was walked)";
    std::vector<char> buf(1 << 20);
    ssize_t n = ::read(fd, buf.data(), buf.size());
    int err = errno;
    ::close(fd);
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(n, -1);
    EXPECT_EQ(err, EIO);
    EXPECT_LT(took, 30s) << "an unreachable hub must not hang readers";
    EXPECT_FALSE(vol->Figures().hub_reachable);
  }
  guard.restarted = true;
  ASSERT_TRUE(hub_->Restart());
  Result<std::string> back = std::unexpected(Error(Code::kInternal, "not tried"));
  for (auto until = std::chrono::steady_clock::now() + 60s;
       std::chrono::steady_clock::now() < until;) {
    back = ReadThrough(mnt2.path() + "/cold/uncached.bin");
    if (back) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, ReadWholeFile(hub_->export_dir() + "/data/cold/uncached.bin"));

  // Warm-up and evict through the MountedVolume API.
  std::atomic<bool> cancelled{false};
  WarmupFigures last;
  ASSERT_TRUE(vol->Warmup(
      "cold", WarmupOptions{}, [&](const WarmupFigures& w) { last = w; }, cancelled));
  EXPECT_EQ(last.files_total, 1u);
  EXPECT_EQ(last.files_done, 1u);
  auto evicted = vol->Evict("cold");
  ASSERT_TRUE(evicted);
  EXPECT_EQ(*evicted, 4u);
  const uint64_t cold_size = 3 * (1 << 20) + 17;
  auto hinted = [&](uint64_t base) {  // cold/uncached.bin is back in the cache
    for (auto until = std::chrono::steady_clock::now() + 20s;
         std::chrono::steady_clock::now() < until;) {
      if (vol->Figures().cache_bytes >= base + cold_size) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  uint64_t base = vol->Figures().cache_bytes;
  auto hint = vol->Hint({"cold/uncached.bin", "no/such", "../escape"});
  EXPECT_EQ(hint.accepted, 1u);
  EXPECT_EQ(hint.rejected, 2u);
  EXPECT_TRUE(hinted(base)) << "agent API hint did not fetch the file ahead";

  // The control file: writable on this read-only dataset volume, hidden from readdir, never
  // on the hub; the hinted file is fetched before anyone reads it.
  ASSERT_EQ(*vol->Evict("cold"), 4u);
  uint64_t hub_before = vol->Figures().hub_read_bytes;
  base = vol->Figures().cache_bytes;
  {
    int hfd = ::open((mnt2.path() + "/.spoke-hints").c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(hfd, 0) << std::strerror(errno);
    std::string line = "cold/uncached.bin\n";
    EXPECT_EQ(::write(hfd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    EXPECT_EQ(::close(hfd), 0);
  }
  EXPECT_TRUE(hinted(base)) << ".spoke-hints did not fetch the file ahead";
  EXPECT_GE(vol->Figures().hub_read_bytes - hub_before, cold_size);
  for (const auto& e : fs::directory_iterator(mnt2.path())) {
    EXPECT_NE(e.path().filename(), ".spoke-hints");
  }
  EXPECT_FALSE(fs::exists(hub_->export_dir() + "/data/.spoke-hints"));
  uint64_t misses = vol->Figures().cache_misses;
  auto cold = ReadThrough(mnt2.path() + "/cold/uncached.bin");
  ASSERT_TRUE(cold) << cold.error().ToString();
  EXPECT_EQ(vol->Figures().cache_misses, misses);  // served from the cache

  // Read-only: writes fail with EROFS.
  int wfd = ::open((mnt2.path() + "/new.txt").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_EQ(wfd, -1);
  EXPECT_EQ(errno, EROFS);
  // Unlink and rename answer through the same error path, counted per operation.
  EXPECT_EQ(::unlink((mnt2.path() + "/cold/uncached.bin").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::rename((mnt2.path() + "/cold/uncached.bin").c_str(),
                     (mnt2.path() + "/cold/moved.bin").c_str()),
            -1);
  EXPECT_EQ(errno, EROFS);
  std::string text = registry_.Render();
  EXPECT_NE(text.find("spoke_fuse_op_errors_total{errno=\"EROFS\",op=\"unlink\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("spoke_fuse_op_errors_total{errno=\"EROFS\",op=\"rename\"} 1"),
            std::string::npos)
      << text;

  ASSERT_TRUE(vol->Unmount());
  EXPECT_FALSE(Mounted(mnt2.path()));
}

// writeMode sync: each write is on the hub when write() returns.
TEST_F(FuseMount, ScratchWritesAreOnTheHubWhenWriteAndCloseReturn) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = Context(VolumeMode::kScratch, "scratch");
  ctx.write_mode = WriteMode::kSync;
  auto vol = MountAt("vol-scratch", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  std::string hub_dir = hub_->export_dir() + "/scratch";
  ASSERT_EQ(::mkdir((mnt.path() + "/out").c_str(), 0755), 0) << strerror(errno);
  EXPECT_TRUE(fs::is_directory(hub_dir + "/out"));
  // The hub saw hubUid/hubGid (default nobody), not root: the volume does not allow root.
  struct stat st;
  ASSERT_EQ(::stat((hub_dir + "/out").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);

  std::string data = Pattern(3 * (1 << 20) + 4321, 77);
  int fd = ::open((mnt.path() + "/out/ckpt.bin").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), 1 << 20), 1 << 20);
  EXPECT_EQ(ReadWholeFile(hub_dir + "/out/ckpt.bin"), data.substr(0, 1 << 20)) << "after write()";
  ASSERT_EQ(::write(fd, data.data() + (1 << 20), data.size() - (1 << 20)),
            static_cast<ssize_t>(data.size() - (1 << 20)));
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(ReadWholeFile(hub_dir + "/out/ckpt.bin") == data);
  auto back = ReadThrough(mnt.path() + "/out/ckpt.bin");
  ASSERT_TRUE(back);
  EXPECT_TRUE(*back == data);

  // Overwrite with shorter content (`echo abc > f`, a smaller checkpoint over a bigger one):
  // the kernel sends open(O_TRUNC) with no SETATTR; no old byte may survive, here or on the hub.
  fd = ::open((mnt.path() + "/out/ckpt.bin").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(fs::file_size(hub_dir + "/out/ckpt.bin"), 0u) << "truncated when open returned";
  ASSERT_EQ(::write(fd, "abc\n", 4), 4);
  ASSERT_EQ(::close(fd), 0);
  // Sizes first, then bytes: a failure must not print megabytes of old content.
  EXPECT_EQ(fs::file_size(hub_dir + "/out/ckpt.bin"), 4u);
  EXPECT_TRUE(ReadWholeFile(hub_dir + "/out/ckpt.bin") == "abc\n");
  back = ReadThrough(mnt.path() + "/out/ckpt.bin");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->size(), 4u);
  EXPECT_TRUE(*back == "abc\n");
  struct stat short_st;
  ASSERT_EQ(::stat((mnt.path() + "/out/ckpt.bin").c_str(), &short_st), 0);
  EXPECT_EQ(short_st.st_size, 4);

  ASSERT_EQ(
      ::rename((mnt.path() + "/out/ckpt.bin").c_str(), (mnt.path() + "/out/final.bin").c_str()), 0);
  EXPECT_FALSE(fs::exists(hub_dir + "/out/ckpt.bin"));
  EXPECT_TRUE(fs::exists(hub_dir + "/out/final.bin"));
  ASSERT_EQ(::truncate((mnt.path() + "/out/final.bin").c_str(), 10), 0);
  EXPECT_EQ(fs::file_size(hub_dir + "/out/final.bin"), 10u);
  ASSERT_EQ(::unlink((mnt.path() + "/out/final.bin").c_str()), 0);
  EXPECT_FALSE(fs::exists(hub_dir + "/out/final.bin"));
  ASSERT_EQ(::rmdir((mnt.path() + "/out").c_str()), 0);
  EXPECT_FALSE(fs::exists(hub_dir + "/out"));
  ASSERT_TRUE(vol->Unmount());
  EXPECT_FALSE(Mounted(mnt.path()));
}

TEST_F(FuseMount, ScratchFilesBelongToTheirCreatorAndExclusiveCreateLocks) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = StrictScratch();
  auto vol = MountAt("vol-owner", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  std::string hub_dir = hub_->export_dir() + "/scratch";
  std::string file = mnt.path() + "/owned.lock";
  int rc = RunAsUser(1000, [&] {
    int fd = ::open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return 1;
    if (::write(fd, "pid\n", 4) != 4 || ::close(fd) != 0) return 2;
    // The second exclusive create of the same name must fail: the hub has it.
    int again = ::open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (again >= 0 || errno != EEXIST) return 3;
    // O_APPEND lands at the end, as the creator.
    int fa = ::open(file.c_str(), O_WRONLY | O_APPEND);
    if (fa < 0 || ::write(fa, "more\n", 5) != 5 || ::close(fa) != 0) return 4;
    return 0;
  });
  ASSERT_EQ(rc, 0) << "step that failed in the uid-1000 child";
  struct stat st;
  ASSERT_EQ(::stat((hub_dir + "/owned.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u) << "created on the hub as the caller";
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(ReadWholeFile(hub_dir + "/owned.lock"), "pid\nmore\n");
  // A name created on the hub behind the mount's back (another node): O_EXCL still fails.
  WriteFile(hub_dir + "/other-node.lock", "x");
  int fd = ::open((mnt.path() + "/other-node.lock").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EEXIST);
  if (fd >= 0) ::close(fd);
  ASSERT_EQ(::unlink(file.c_str()), 0);
  ASSERT_EQ(::unlink((mnt.path() + "/other-node.lock").c_str()), 0);
  ASSERT_TRUE(vol->Unmount());
}

// What a non-root training pod does on a strict scratch volume (default hub identity: the
// caller): fsync its own file (the COMMIT goes as the writer, not the agent), and map a file
// shared (numpy.memmap, safetensors, LMDB) although strict opens bypass the page cache:
// the agent negotiates FUSE_DIRECT_IO_ALLOW_MMAP, and msync puts the mapped writes on the hub.
TEST_F(FuseMount, ANonRootOwnerFsyncsAndMapsSharedOnAStrictScratchVolume) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = StrictScratch();
  auto vol = MountAt("vol-mmap", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string file = mnt.path() + "/mapped.bin";
  constexpr size_t kSize = 3 * 4096;
  int rc = RunAsUser(1000, [&] {
    int fd = ::open(file.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) return 1;
    std::string zeros(kSize, 'a');
    if (::write(fd, zeros.data(), kSize) != static_cast<ssize_t>(kSize)) return 2;
    if (::fsync(fd) != 0) return 3;
    void* m = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return errno == ENODEV ? 4 : 5;
    std::memcpy(static_cast<char*>(m) + 4096, "shared", 6);
    if (::msync(m, kSize, MS_SYNC) != 0) return 6;
    if (::munmap(m, kSize) != 0 || ::close(fd) != 0) return 7;
    return 0;
  });
  ASSERT_EQ(rc, 0) << "step that failed in the uid-1000 child (3: fsync, 4: mmap ENODEV)";
  std::string want(kSize, 'a');
  want.replace(4096, 6, "shared");
  EXPECT_EQ(ReadWholeFile(hub_->export_dir() + "/scratch/mapped.bin"), want)
      << "msync reached the hub";
  // A shared read-only mapping reads the hub's bytes.
  int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(std::string(static_cast<const char*>(m), kSize), want);
  ::munmap(m, kSize);
  ::close(fd);
  ASSERT_EQ(::unlink(file.c_str()), 0);
  ASSERT_TRUE(vol->Unmount());
}

// Lookups, listings, attributes and reads go to the hub as the caller (default hub identity),
// not as the volume's hubUid: a non-root pod reads back its private directory and file. What
// one caller fetched is shared, yet another caller is refused by the kernel's check, and a
// member of the file's group reads it through a supplementary group.
TEST_F(FuseMount, ANonRootCallerListsStatsAndReadsItsPrivateFiles) {
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-private", StrictScratch(), mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string d = mnt.path() + "/private", f = d + "/f";
  int rc = RunAsUser(1000, [&] {
    if (::mkdir(d.c_str(), 0700) != 0) return 1;
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || ::write(fd, "x\n", 2) != 2 || ::close(fd) != 0) return 2;
    if (::chmod(f.c_str(), 0600) != 0) return 3;
    DIR* dir = ::opendir(d.c_str());  // ls d
    if (dir == nullptr) return 4;
    bool listed = false;
    while (dirent* e = ::readdir(dir)) listed = listed || std::string(e->d_name) == "f";
    ::closedir(dir);
    if (!listed) return 5;
    struct stat st;
    if (::stat(f.c_str(), &st) != 0 || st.st_size != 2) return 6;  // stat d/f
    return ReadWholeFile(f) == "x\n" ? 0 : 7;                      // cat d/f
  });
  ASSERT_EQ(rc, 0) << "step that failed in the uid-1000 child (4: ls, 6: stat, 7: cat)";
  rc = RunAsUser(1001, [&] {
    if (::opendir(d.c_str()) != nullptr || errno != EACCES) return 1;
    struct stat st;
    return ::stat(f.c_str(), &st) != 0 && errno == EACCES ? 0 : 2;
  });
  EXPECT_EQ(rc, 0) << "another uid is refused what the owner's requests fetched";
  // A group's directory and file, read by a member through a supplementary group.
  const std::string g = mnt.path() + "/team", gf = g + "/notes";
  rc = RunAsUser(1000,
                 [&] {
                   if (::mkdir(g.c_str(), 0750) != 0 || ::chown(g.c_str(), -1, 2000) != 0) return 1;
                   int fd = ::open(gf.c_str(), O_CREAT | O_WRONLY, 0640);
                   if (fd < 0 || ::write(fd, "team", 4) != 4 || ::close(fd) != 0) return 2;
                   return ::chown(gf.c_str(), -1, 2000) == 0 ? 0 : 3;
                 },
                 {2000});
  ASSERT_EQ(rc, 0);
  rc = RunAsUser(1002, [&] { return ReadWholeFile(gf) == "team" ? 0 : 1; }, {2000});
  EXPECT_EQ(rc, 0) << "a member of the file's group reads it";
  ASSERT_TRUE(vol->Unmount());
}

// readlink goes to the hub as the caller too: a symlink in a 0700 directory reads for its
// owner (the hub refuses the agent's identity the search of that directory).
TEST_F(FuseMount, ANonRootCallerReadsItsSymlinkInAPrivateDirectory) {
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-private-link", StrictScratch(), mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string d = mnt.path() + "/private-links", l = d + "/latest";
  int rc = RunAsUser(1000, [&] {
    if (::mkdir(d.c_str(), 0700) != 0) return 1;
    if (::symlink("ckpt-0042.pt", l.c_str()) != 0) return 2;
    char buf[64];
    ssize_t n = ::readlink(l.c_str(), buf, sizeof buf);
    if (n < 0) return 3;
    return std::string(buf, static_cast<size_t>(n)) == "ckpt-0042.pt" ? 0 : 4;
  });
  EXPECT_EQ(rc, 0) << "step that failed in the uid-1000 child (3: readlink)";
  ASSERT_TRUE(vol->Unmount());
}

// A pod's fsGroup (CSI VOLUME_MOUNT_GROUP) on a scratch volume provisioned as hubUid: the
// mount gives the root the group on the hub, setgid and group-writable as kubelet would, and
// what a uid-1000 pod with the group creates in it belongs to the group on the hub.
TEST_F(FuseMount, APodsFsGroupOwnsTheScratchRootAndWhatThePodCreates) {
  const std::string hub_dir = hub_->export_dir() + "/grouped";
  fs::create_directories(hub_dir);
  ASSERT_EQ(::chown(hub_dir.c_str(), 65534, 65534), 0);  // as the controller provisions it
  ASSERT_EQ(::chmod(hub_dir.c_str(), 02777), 0);
  const std::string record = hub_dir + "/.spoke-volume.json";  // the controller's, as hubUid
  std::ofstream(record) << "{}";
  ASSERT_EQ(::chown(record.c_str(), 65534, 65534), 0);
  testing::TempDir mnt("spoke-mnt");
  VolumeContext ctx = Context(VolumeMode::kScratch, "grouped");
  ctx.cache.consistency = Consistency::kStrict;
  ctx.mount_group = 2000;
  auto vol = MountAt("vol-grouped", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  struct stat st;
  ASSERT_EQ(::stat(hub_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 2000u);
  EXPECT_EQ(st.st_mode & 07777, 02777u);
  ASSERT_EQ(::stat(mnt.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 2000u) << "the mount shows the root's new group";
  int rc = RunAsUser(1000,
                     [&] {
                       int fd = ::open((mnt.path() + "/ckpt.pt").c_str(), O_CREAT | O_WRONLY, 0640);
                       if (fd < 0) return 1;
                       if (::write(fd, "w", 1) != 1 || ::close(fd) != 0) return 2;
                       return ::mkdir((mnt.path() + "/logs").c_str(), 0750) == 0 ? 0 : 3;
                     },
                     {2000});
  ASSERT_EQ(rc, 0);
  for (const char* name : {"/ckpt.pt", "/logs"}) {
    ASSERT_EQ(::stat((hub_dir + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 1000u) << name;
    EXPECT_EQ(st.st_gid, 2000u) << name;
  }
  ASSERT_EQ(::stat(record.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 2000u) << "provisioning's record follows the root";
  ASSERT_TRUE(vol->Unmount());
}

TEST_F(FuseMount, ScratchLinksNodesAttributesAndRenamesReachTheHub) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = StrictScratch();
  ctx.identity.allow_root = true;  // chown to another owner needs root on the hub
  auto vol = MountAt("vol-posix", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  std::string m = mnt.path() + "/px", h = hub_->export_dir() + "/scratch/px";
  ASSERT_EQ(::mkdir(m.c_str(), 0777), 0) << strerror(errno);
  WriteFile(h + "/f", "file");
  ASSERT_EQ(::symlink("f", (m + "/s").c_str()), 0) << strerror(errno);
  char buf[64] = {};
  ASSERT_EQ(::readlink((m + "/s").c_str(), buf, sizeof buf), 1);
  EXPECT_EQ(std::string(buf), "f");
  EXPECT_TRUE(fs::is_symlink(h + "/s"));
  EXPECT_EQ(ReadWholeFile(m + "/s"), "file");  // followed through the mount
  ASSERT_EQ(::link((m + "/f").c_str(), (m + "/hard").c_str()), 0) << strerror(errno);
  struct stat a, b;
  ASSERT_EQ(::stat((h + "/f").c_str(), &a), 0);
  ASSERT_EQ(::stat((h + "/hard").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  ASSERT_EQ(::mkfifo((m + "/fifo").c_str(), 0640), 0) << strerror(errno);
  ASSERT_EQ(::lstat((h + "/fifo").c_str(), &a), 0);
  EXPECT_TRUE(S_ISFIFO(a.st_mode));
  ASSERT_EQ(::chmod((m + "/f").c_str(), 0604), 0);
  ASSERT_EQ(::chown((m + "/f").c_str(), 1234, 4321), 0) << strerror(errno);
  timespec times[2] = {{1000000, 0}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (m + "/f").c_str(), times, 0), 0);
  ASSERT_EQ(::stat((h + "/f").c_str(), &a), 0);
  EXPECT_EQ(a.st_mode & 07777, 0604u);
  EXPECT_EQ(a.st_uid, 1234u);
  EXPECT_EQ(a.st_gid, 4321u);
  EXPECT_EQ(a.st_atim.tv_sec, 1000000);
  EXPECT_GT(a.st_mtim.tv_sec, 1000000) << "UTIME_OMIT left mtime alone";
  timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (m + "/f").c_str(), now, 0), 0);
  ASSERT_EQ(::stat((h + "/f").c_str(), &a), 0);
  EXPECT_GT(a.st_atim.tv_sec, 1000000);
  // Rename over an existing file; rmdir of a non-empty directory.
  WriteFile(m + "/new", "new");
  ASSERT_EQ(::rename((m + "/new").c_str(), (m + "/hard").c_str()), 0) << strerror(errno);
  EXPECT_EQ(ReadWholeFile(h + "/hard"), "new");
  EXPECT_EQ(ReadWholeFile(m + "/hard"), "new");
  EXPECT_EQ(::rmdir(m.c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  struct statvfs sv;
  ASSERT_EQ(::statvfs(mnt.path().c_str(), &sv), 0);
  EXPECT_GT(sv.f_blocks, 0u);
  for (const char* n : {"/s", "/f", "/hard", "/fifo"}) {
    EXPECT_EQ(::unlink((m + n).c_str()), 0) << n << ": " << strerror(errno);
  }
  EXPECT_EQ(::rmdir(m.c_str()), 0) << strerror(errno);
  ASSERT_TRUE(vol->Unmount());
}

// The hub's file system gives a removed directory's inode number to the next one made (ext4
// does so at once). While something still holds the removed directory (an open fd here; a
// RELEASEDIR not yet answered under load), the kernel keeps it as a dead directory under its
// node id. The new directory must come with another node id, or the kernel takes it for the
// dead one and refuses every create in it with ENOENT.
TEST_F(FuseMount, ADirectoryMadeWithARemovedOnesHubNumberTakesCreates) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = StrictScratch();
  auto vol = MountAt("vol-reuse", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string m = mnt.path(), h = hub_->export_dir() + "/scratch";
  int reused = 0;
  // Until the hub reused a number twice: ext4 gives the freed one to the next inode made on
  // the machine, which under -j2 is sometimes another test's.
  for (int i = 0; i < 24 && reused < 2; ++i) {
    const std::string d1 = m + "/old" + std::to_string(i), d2 = m + "/new" + std::to_string(i);
    ASSERT_EQ(::mkdir(d1.c_str(), 0777), 0) << strerror(errno);
    struct stat before {};
    ASSERT_EQ(::stat((h + "/old" + std::to_string(i)).c_str(), &before), 0);
    int held = ::open(d1.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(held, 0) << strerror(errno);
    ASSERT_EQ(::rmdir(d1.c_str()), 0) << strerror(errno);
    ASSERT_EQ(::mkdir(d2.c_str(), 0777), 0) << strerror(errno);
    struct stat after {};
    ASSERT_EQ(::stat((h + "/new" + std::to_string(i)).c_str(), &after), 0);
    if (after.st_ino == before.st_ino) reused++;
    const std::string f = d2 + "/x";
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY, 0644);
    EXPECT_GE(fd, 0) << f << ": " << strerror(errno);
    if (fd >= 0) ::close(fd);
    EXPECT_EQ(::mkdir((d2 + "/sub").c_str(), 0777), 0) << strerror(errno);
    ::close(held);
  }
  // What the test is about: the hub did give the old numbers again.
  EXPECT_GT(reused, 0) << "the hub's file system never reused an inode number";
}

TEST_F(FuseMount, ScratchUnlinkedOpenFileStaysUsableUntilItsLastClose) {
  testing::TempDir mnt("spoke-mnt");
  auto ctx = StrictScratch();
  auto vol = MountAt("vol-unlinked", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  std::string m = mnt.path() + "/ul", h = hub_->export_dir() + "/scratch/ul";
  ASSERT_EQ(::mkdir(m.c_str(), 0777), 0) << strerror(errno);
  int fd = ::open((m + "/held").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, "before", 6), 6);
  int reader = ::open((m + "/held").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0) << strerror(errno);
  ASSERT_EQ(::unlink((m + "/held").c_str()), 0) << strerror(errno);

  // Gone from the namespace, through the mount and on the hub under its name...
  struct stat st;
  EXPECT_EQ(::stat((m + "/held").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_FALSE(fs::exists(h + "/held"));
  int listed = 0;
  for (const auto& e : fs::directory_iterator(m)) {
    ADD_FAILURE() << "listed after unlink: " << e.path();
    ++listed;
  }
  EXPECT_EQ(listed, 0);
  // ...but both holders keep using it, and it has no links left.
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  ASSERT_EQ(::pwrite(fd, "after!", 6, 6), 6) << strerror(errno);
  char buf[32] = {};
  ASSERT_EQ(::pread(reader, buf, sizeof buf, 0), 12) << strerror(errno);
  EXPECT_EQ(std::string(buf, 12), "beforeafter!");
  ASSERT_EQ(::ftruncate(fd, 3), 0) << strerror(errno);
  ASSERT_EQ(::fstat(reader, &st), 0);
  EXPECT_EQ(st.st_size, 3);
  // A new file may take the name meanwhile.
  WriteFile(m + "/held", "new");
  EXPECT_EQ(ReadWholeFile(m + "/held"), "new");

  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(h), fs::directory_iterator{}), 2)
      << "still on the hub while the reader holds it";
  ASSERT_EQ(::pread(reader, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "bef");
  ASSERT_EQ(::close(reader), 0);
  // The last close removes it from the hub (release is asynchronous to close: bounded wait).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::distance(fs::directory_iterator(h), fs::directory_iterator{}) != 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(h)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"held"});
  ASSERT_EQ(::unlink((m + "/held").c_str()), 0);
  ASSERT_EQ(::rmdir(m.c_str()), 0) << strerror(errno);
  ASSERT_TRUE(vol->Unmount());
}

// The checkpoint pattern of a training job, across two nodes: node A writes ckpt.tmp, fsyncs
// and renames it over ckpt.pt; node B (its own agent cache) must read ckpt.pt back
// byte-identical right after each save, larger and smaller than the one before.
TEST_F(FuseMount, ScratchCheckpointRenamedOverOnOneNodeIsReadExactlyOnAnother) {
  testing::TempDir mnt_a("spoke-mnt-a"), mnt_b("spoke-mnt-b");
  testing::TempDir cache_b_dir("spoke-fuse-cache-b");
  metrics::Registry registry_b;
  auto cache_b = OpenLruCache(cache_b_dir.path(), 256ull << 20, &registry_b);
  ASSERT_NE(cache_b, nullptr);
  FuseVolumeMounter::Config mc;
  mc.hub.request_timeout_seconds = 3;
  FuseVolumeMounter node_b(mc, cache_b.get(), &registry_b);

  auto ctx = StrictScratch();
  auto vol_a = MountAt("vol-ckpt", ctx, mnt_a.path());
  ASSERT_NE(vol_a, nullptr);
  auto vol_b = node_b.Mount("vol-ckpt", ctx, mnt_b.path(), false);
  ASSERT_TRUE(vol_b) << vol_b.error().ToString();
  std::string a = mnt_a.path() + "/ckpt", b = mnt_b.path() + "/ckpt";
  ASSERT_EQ(::mkdir(a.c_str(), 0777), 0) << strerror(errno);

  const size_t sizes[] = {3 * (1u << 20) + 123, 5 * (1u << 20) + 7, 1u << 20, 4096, 2 * (1u << 20)};
  uint32_t seed = 7000;
  for (size_t size : sizes) {
    SCOPED_TRACE("checkpoint of " + std::to_string(size) + " bytes");
    std::string data = Pattern(size, seed++);
    int fd = ::open((a + "/ckpt.tmp").c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    for (size_t off = 0; off < size;) {
      ssize_t n = ::write(fd, data.data() + off, std::min<size_t>(size - off, 1 << 20));
      ASSERT_GT(n, 0) << strerror(errno);
      off += static_cast<size_t>(n);
    }
    ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::rename((a + "/ckpt.tmp").c_str(), (a + "/ckpt.pt").c_str()), 0) << strerror(errno);
    // Strict: node B sees the new checkpoint at once, whole, and no ckpt.tmp.
    auto got = ReadThrough(b + "/ckpt.pt");
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(got->size(), size);
    EXPECT_TRUE(*got == data) << "node B read other bytes than node A saved";
    struct stat st;
    EXPECT_EQ(::stat((b + "/ckpt.tmp").c_str(), &st), -1);
    ASSERT_EQ(::stat((b + "/ckpt.pt").c_str(), &st), 0);
    EXPECT_EQ(static_cast<size_t>(st.st_size), size);
  }
  // A file another node creates is visible at once in strict mode, even right after this
  // node listed the directory and looked the name up in vain.
  struct stat st;
  EXPECT_EQ(::stat((b + "/late").c_str(), &st), -1);
  EXPECT_EQ(std::distance(fs::directory_iterator(b), fs::directory_iterator{}), 1);
  WriteFile(a + "/late", "here");
  EXPECT_EQ(::stat((b + "/late").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(ReadWholeFile(b + "/late"), "here");
  ASSERT_EQ(::unlink((a + "/late").c_str()), 0);
  ASSERT_EQ(::unlink((a + "/ckpt.pt").c_str()), 0);
  ASSERT_EQ(::rmdir(a.c_str()), 0) << strerror(errno);
  ASSERT_TRUE((*vol_b)->Unmount());
  ASSERT_TRUE(vol_a->Unmount());
}

// Another client (a second mount: nfs-ganesha serves listings from its own cache for a while
// after the export directory is changed behind its back) creates and removes files, round
// after round, while this mount lists and stats them. The kernel forgets their inodes
// (drop_caches makes it send FORGETs now), and so does the agent: its inode table stays
// bounded instead of keeping every file it ever met.
TEST_F(FuseMount, InodesOfFilesRemovedOnTheHubAreForgotten) {
  constexpr int kRounds = 20, kFiles = 50;
  testing::TempDir mnt("spoke-mnt"), other_mnt("spoke-mnt-other");
  auto ctx = Context(VolumeMode::kScratch, "scratch");
  // No WAN delay (hundreds of metadata round trips); every listing and lookup asks the hub.
  ctx.hub = hub_->address();
  ctx.cache.consistency = Consistency::kStrict;
  ctx.cache.prefetch = PrefetchMode::kOff;
  auto vol = MountAt("vol-churn", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  auto other = MountAt("vol-churn-other", ctx, other_mnt.path());
  ASSERT_NE(other, nullptr);
  const std::string m = mnt.path() + "/churn", o = other_mnt.path() + "/churn";
  ASSERT_EQ(::mkdir(o.c_str(), 0777), 0) << strerror(errno);
  auto drop_kernel_caches = [] {
    std::ofstream("/proc/sys/vm/drop_caches") << "2";  // dentries and inodes: FORGETs
  };
  struct stat st {};
  ASSERT_EQ(::stat(m.c_str(), &st), 0) << strerror(errno);
  const uint64_t baseline = vol->Figures().metadata_inodes;
  uint64_t peak = baseline;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::string> names;
    for (int i = 0; i < kFiles; ++i) {
      names.push_back("r" + std::to_string(round) + "-" + std::to_string(i));
      WriteFile(o + "/" + names.back(), "x");
    }
    int seen = 0;
    for (const auto& e : fs::directory_iterator(m)) {  // readdirplus: the kernel holds each
      ASSERT_EQ(::stat(e.path().c_str(), &st), 0) << e.path() << ": " << strerror(errno);
      ++seen;
    }
    EXPECT_EQ(seen, kFiles);
    for (const auto& n : names) ASSERT_EQ(::unlink((o + "/" + n).c_str()), 0) << strerror(errno);
    EXPECT_EQ(std::distance(fs::directory_iterator(m), fs::directory_iterator{}), 0);
    EXPECT_EQ(::stat((m + "/" + names[0]).c_str(), &st), -1);
    EXPECT_EQ(errno, ENOENT);
    peak = std::max(peak, vol->Figures().metadata_inodes);
    drop_kernel_caches();
  }
  // FORGETs reach the agent asynchronously: a bounded wait for the table to settle.
  uint64_t now = vol->Figures().metadata_inodes;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       now > baseline && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(100ms);
    drop_kernel_caches();
    now = vol->Figures().metadata_inodes;
  }
  std::printf("[ inodes   ] baseline %llu, peak %llu, after %d rounds of %d files: %llu\n",
              static_cast<unsigned long long>(baseline), static_cast<unsigned long long>(peak),
              kRounds, kFiles, static_cast<unsigned long long>(now));
  EXPECT_LE(now, baseline + kFiles) << "inodes of removed files are kept";
  EXPECT_LE(peak, baseline + 3 * kFiles);
  // A file moved away on the hub is forgotten here, and met again at its new place under the
  // number it had.
  ASSERT_EQ(::mkdir((o + "/elsewhere").c_str(), 0777), 0) << strerror(errno);
  WriteFile(o + "/moved", "1");
  ASSERT_EQ(::stat((m + "/moved").c_str(), &st), 0) << strerror(errno);
  const ino_t first = st.st_ino;
  const uint64_t with_it = vol->Figures().metadata_inodes;
  ASSERT_EQ(::rename((o + "/moved").c_str(), (o + "/elsewhere/moved").c_str()), 0);
  EXPECT_EQ(::stat((m + "/moved").c_str(), &st), -1);
  drop_kernel_caches();
  for (auto until = std::chrono::steady_clock::now() + 20s;
       vol->Figures().metadata_inodes >= with_it && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(100ms);
    drop_kernel_caches();
  }
  EXPECT_LT(vol->Figures().metadata_inodes, with_it);
  ASSERT_EQ(::stat((m + "/elsewhere/moved").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_ino, first);
  ASSERT_EQ(::unlink((o + "/elsewhere/moved").c_str()), 0);
  ASSERT_EQ(::rmdir((o + "/elsewhere").c_str()), 0);
  ASSERT_EQ(::rmdir(o.c_str()), 0) << strerror(errno);
  ASSERT_TRUE(other->Unmount());
  ASSERT_TRUE(vol->Unmount());
}

TEST_F(FuseMount, UnreachableHubFailsTheMountWithinTheTimeout) {
  testing::TempDir mnt("spoke-mnt");
  VolumeContext ctx;
  ctx.hub = HubAddress{"127.0.0.1", testing::FreePort(), testing::FreePort(), "/nowhere"};
  ctx.hub_timeout_seconds = 2;
  auto start = std::chrono::steady_clock::now();
  auto v = mounter_->Mount("vol-dead", ctx, mnt.path(), true);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kUnavailable) << v.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_FALSE(Mounted(mnt.path()));
}

// Reads waiting on a hub that stopped answering hold one FUSE worker each (until their
// deadline). More of them than libfuse's default worker cap (10) must not starve a read the
// cache can answer: it is served while every cold read is still waiting.
TEST_F(FuseMount, ColdReadsWaitingOnTheHubDoNotStarveCachedReads) {
  constexpr int kColdReaders = 24;  // > libfuse's default of 10 workers, < max_background
  auto ctx = Context(VolumeMode::kDataset, "data");
  ctx.cache.prefetch = PrefetchMode::kOff;  // only what is read gets cached
  const std::string cached = small_files_[0];
  std::string first;
  {  // Fill the block cache through one mount...
    testing::TempDir mnt("spoke-mnt");
    auto vol = MountAt("vol-starve", ctx, mnt.path());  // same volume: same cache keys
    ASSERT_NE(vol, nullptr);
    auto got = ReadThrough(mnt.path() + "/" + cached);
    ASSERT_TRUE(got) << got.error().ToString();
    first = *got;
  }
  // ...and read through another, whose page cache is empty: every read is a FUSE request.
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-starve", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  for (int i = 0; i <= kColdReaders; ++i) {  // names known before the hub stops answering
    struct stat st {};
    ASSERT_EQ(::stat((mnt.path() + "/" + small_files_[static_cast<size_t>(i)]).c_str(), &st), 0);
  }

  FrozenHub frozen(proxy_);
  std::atomic<int> cold_done{0};
  std::vector<std::thread> readers;
  for (int i = 1; i <= kColdReaders; ++i) {
    readers.emplace_back([&, i] {
      (void)ReadThrough(mnt.path() + "/" + small_files_[static_cast<size_t>(i)]);
      cold_done.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(500ms);  // let them reach the hub and wait there
  auto again = ReadThrough(mnt.path() + "/" + cached);
  int cold_finished_before = cold_done.load();
  for (auto& t : readers) t.join();
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(*again, first);
  EXPECT_EQ(cold_finished_before, 0)
      << "the cached read had to wait for a worker that a cold read released";
}

// A process that gets a signal while the mount waits on a hub that stopped answering is
// answered EINTR at once (FUSE INTERRUPT), for a read and for a lookup, instead of EIO at the
// hub's bound. Strict volume: reads are direct (sent with INTERRUPT, unlike kernel
// read-ahead) and every path lookup asks the agent.
void NoteSignal(int) {}

// Runs `call` on a thread with a SIGUSR1 handler that does not restart system calls, and
// signals the thread every 100 ms until the call returns. The errno it failed with (0: it
// succeeded).
int ErrnoWhileSignalled(const std::function<int()>& call) {
  struct sigaction sa {};
  sa.sa_handler = NoteSignal;  // no SA_RESTART: an interrupted wait returns EINTR
  struct sigaction old {};
  EXPECT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  std::atomic<bool> done{false};
  int err = 0;
  std::thread caller([&] {
    if (call() < 0) err = errno;
    done = true;
  });
  while (!done.load()) {
    std::this_thread::sleep_for(100ms);
    if (!done.load()) pthread_kill(caller.native_handle(), SIGUSR1);
  }
  caller.join();
  sigaction(SIGUSR1, &old, nullptr);
  return err;
}

TEST_F(FuseMount, ASignalledReaderOrLookupOnAFrozenHubGetsEintrAtOnce) {
  auto ctx = Context(VolumeMode::kDataset, "data");
  ctx.cache.consistency = Consistency::kStrict;
  ctx.cache.prefetch = PrefetchMode::kOff;
  ctx.hub_timeout_seconds = 30;  // the bound a reader would otherwise wait for
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-interrupt", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string cold = mnt.path() + "/cold/uncached.bin";
  int fd = ::open(cold.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);

  FrozenHub frozen(proxy_);
  std::vector<char> buf(4096);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ErrnoWhileSignalled([&] { return int(::pread(fd, buf.data(), buf.size(), 0)); }),
            EINTR);
  struct stat st {};
  EXPECT_EQ(ErrnoWhileSignalled(
                [&] { return ::stat((mnt.path() + "/" + small_files_[1]).c_str(), &st); }),
            EINTR);
  // Figures only (no assertion on time): both answered long before the 30 s hub bound.
  std::cout << "interrupted read and lookup answered after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " ms\n";
  proxy_->Freeze(false);
  // Nothing was failed for good: the same read and lookup succeed once the hub answers.
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()))
      << std::strerror(errno);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), Pattern(3 * (1 << 20) + 17, 4242).substr(0, 4096));
  EXPECT_EQ(::stat((mnt.path() + "/" + small_files_[1]).c_str(), &st), 0) << std::strerror(errno);
  ::close(fd);
}

// Unmounting while reads wait on a hub that stopped answering: the volume's objects live
// until its FUSE loop has ended (under ASan a use after free fails this test), the waiting
// readers get an error, not a hang, and the unmount returns.
TEST_F(FuseMount, UnmountWhileReadsWaitOnAFrozenHubEndsCleanly) {
  auto ctx = Context(VolumeMode::kDataset, "data");
  ctx.cache.prefetch = PrefetchMode::kOff;
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-unmount-busy", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  constexpr int kReaders = 4;
  std::vector<int> fds;
  for (int i = 0; i < kReaders; ++i) {
    int fd =
        ::open((mnt.path() + "/" + small_files_[static_cast<size_t>(10 + i)]).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    fds.push_back(fd);
  }
  FrozenHub frozen(proxy_);
  std::atomic<int> failed{0}, returned{0};
  std::vector<std::thread> readers;
  for (int fd : fds) {
    readers.emplace_back([&, fd] {
      char b[4096];
      if (::pread(fd, b, sizeof b, 0) < 0) failed++;
      returned++;
    });
  }
  std::this_thread::sleep_for(300ms);  // the reads reach the agent and wait on the hub
  EXPECT_EQ(returned.load(), 0);
  ASSERT_TRUE(vol->Unmount());
  vol.reset();  // the volume's objects go only after its loop ended
  for (auto& t : readers) t.join();
  EXPECT_EQ(failed.load(), kReaders);
  EXPECT_FALSE(Mounted(mnt.path()));
  for (int fd : fds) ::close(fd);
}

// A hub that goes silent past the RPC bound (4 s of the 8 s request bound): the connection
// is replaced, and a read that waited on it succeeds on the new one once the hub answers,
// within its request bound.
TEST_F(FuseMount, AReadOutlivesAConnectionSilentPastTheRpcBound) {
  auto ctx = Context(VolumeMode::kDataset, "data");
  ctx.cache.prefetch = PrefetchMode::kOff;
  ctx.hub_timeout_seconds = 8;
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-silent-hub", ctx, mnt.path());
  ASSERT_NE(vol, nullptr);
  const std::string name = small_files_[20];
  int fd = ::open((mnt.path() + "/" + name).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  FrozenHub frozen(proxy_);
  std::string got(1 << 20, '\0');
  std::atomic<ssize_t> n{-2};
  std::thread reader([&] { n = ::pread(fd, got.data(), got.size(), 0); });
  std::this_thread::sleep_for(5s);  // silent past the RPC bound: the connection is replaced
  EXPECT_EQ(n.load(), -2) << "the read returned while the hub was silent";
  proxy_->Freeze(false);
  reader.join();
  ASSERT_GT(n.load(), 0) << std::strerror(errno);
  got.resize(static_cast<size_t>(n.load()));
  EXPECT_TRUE(got == ReadWholeFile(hub_->export_dir() + "/data/" + name)) << "content differs";
  ::close(fd);
  ASSERT_TRUE(vol->Unmount());
}

TEST_F(FuseMount, BusyMountIsDetachedOnUnmount) {
  testing::TempDir mnt("spoke-mnt");
  auto vol = MountAt("vol-busy", Context(VolumeMode::kDataset, "data"), mnt.path());
  ASSERT_NE(vol, nullptr);
  int fd = ::open((mnt.path() + "/" + small_files_[0]).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(vol->Unmount());
  EXPECT_FALSE(Mounted(mnt.path()));
  ::close(fd);
  vol.reset();
}

// A WAN link slower than what the agent asks of it: 8 MB/s for every connection together
// (the proxy's --link-mbytes), 60 ms; the hub's bounds are 3 s a request, 1 s an RPC. Each
// test mounts a directory of 1 MiB files (one block each) as a dataset volume.
class FuseMountSlowLink : public ::testing::Test {
 protected:
  static constexpr int kFiles = 32;
  void SetUp() override {
    hub_ = testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
    proxy_ = testing::WanProxy::Start(*hub_, 30, "", "127.0.0.1", link_mbytes_);
    ASSERT_NE(proxy_, nullptr);
    for (int i = 0; i < kFiles; ++i) {
      WriteFile(hub_->export_dir() + "/slow/f" + std::to_string(i) + ".bin", Content(i));
    }
    cache_dir_ = std::make_unique<testing::TempDir>("spoke-fuse-cache");
    cache_ = OpenLruCache(cache_dir_->path(), 256ull << 20, &registry_);
    ASSERT_NE(cache_, nullptr);
    FuseVolumeMounter::Config mc;
    mc.hub.request_timeout_seconds = hub_timeout_seconds_;
    mc.link_initial_window = 1 << 20;  // the default 16 MiB would send the whole dataset at once
    mounter_ = std::make_unique<FuseVolumeMounter>(mc, cache_.get(), &registry_);
  }
  static std::string Content(int i) { return Pattern(1 << 20, 500 + i); }

  std::unique_ptr<MountedVolume> Mount(PrefetchMode prefetch) {
    VolumeContext ctx;
    ctx.hub = proxy_->address();
    ctx.mode = VolumeMode::kDataset;
    ctx.path = "slow";
    ctx.cache.consistency = Consistency::kImmutable;
    ctx.cache.prefetch = prefetch;
    ctx.hub_timeout_seconds = hub_timeout_seconds_;
    auto vol = mounter_->Mount("vol-slow-link", ctx, mnt_.path(), false);
    EXPECT_TRUE(vol) << vol.error().ToString();
    return vol ? std::move(*vol) : nullptr;
  }

  double link_mbytes_ = 8.0;     // the whole link, MB/s
  int hub_timeout_seconds_ = 3;  // a request's bound (its RPC bound: half, in whole seconds)
  std::unique_ptr<testing::TestHub> hub_;
  std::unique_ptr<testing::WanProxy> proxy_;
  metrics::Registry registry_;
  std::unique_ptr<testing::TempDir> cache_dir_;
  testing::TempDir mnt_{"spoke-mnt"};
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<FuseVolumeMounter> mounter_;
};

// The walk hands the whole dataset (32 MiB, 4 s of the link) to the prefetcher at the mount.
// Unpaced, the prefetches wait in the link's queue and a reader's block asked for behind them
// waits there too; while a call that outlived the RPC bound was sent again, that gave EIO
// (seen with link_queue_target 0). Paced, background reads leave a fraction of a second of
// queue: the window stays near the link's rate x (a round trip + 0.2 s), which unpaced it
// does not (the check below fails with link_queue_target 0).
TEST_F(FuseMountSlowLink, PrefetchesOnASlowLinkLeaveReadersWithinTheHubTimeout) {
  auto vol = Mount(PrefetchMode::kAuto);
  ASSERT_NE(vol, nullptr);
  // Last first: the back of the prefetches' queue.
  for (int i = kFiles - 1; i >= 0; --i) {
    std::string name = "f" + std::to_string(i) + ".bin";
    auto got = ReadThrough(mnt_.path() + "/" + name);
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_TRUE(*got == Content(i)) << name << ": content differs";
  }
  // The window followed the link: 8 MB/s x (a round trip with a 1 MiB reply + 0.2 s) is
  // about 3 MB; far under the 16 MiB an unpaced fetcher would keep there.
  std::string window;
  std::istringstream in(registry_.Render());
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("spoke_fetch_background_window_bytes")) window = line;
  }
  ASSERT_FALSE(window.empty()) << registry_.Render();
  EXPECT_LT(std::stod(window.substr(window.rfind(' ') + 1)), 8.0 * (1 << 20)) << window;
  ASSERT_TRUE(vol->Unmount());
}

// 24 readers at once, no prefetch: 24 MiB asked for together, 3 s of the link. Sent at once,
// the last replies queue in the link past the 1 s RPC bound; while a call that outlived the
// RPC bound was sent again, their bytes crossed twice and the reads failed: EIO (seen with
// link_queue_target 0 before connections were judged by their silence; unpaced, this test
// now passes too). Paced, what the window has no room for waits in the agent, under each
// reader's 6 s deadline, and every read succeeds.
TEST_F(FuseMountSlowLink, ABurstOfReadersWaitsInTheAgentNotInTheLink) {
  auto vol = Mount(PrefetchMode::kOff);
  ASSERT_NE(vol, nullptr);
  constexpr int kReaders = 24;
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&, i] {
      auto got = ReadThrough(mnt_.path() + "/f" + std::to_string(i) + ".bin");
      if (!got || *got != Content(i)) {
        bad++;
        ADD_FAILURE() << "f" << i << ": " << (got ? "content differs" : got.error().ToString());
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_TRUE(vol->Unmount());
}

// One block that takes longer to cross the link than the RPC bound: 1 MiB at 0.4 MB/s is
// 2.6 s, the bound 2 s (half the 4 s request bound). The connection keeps receiving, so the
// READ is not sent again: a second copy would queue behind the first reply and miss the
// request bound (EIO before: the READ timed out at 2 s, its retry crossed after 5 s).
class FuseMountCrawlingLink : public FuseMountSlowLink {
 protected:
  FuseMountCrawlingLink() {
    link_mbytes_ = 0.4;
    hub_timeout_seconds_ = 4;
  }
};

TEST_F(FuseMountCrawlingLink, ABlockSlowerThanTheRpcBoundIsNotSentTwice) {
  auto vol = Mount(PrefetchMode::kOff);
  ASSERT_NE(vol, nullptr);
  auto got = ReadThrough(mnt_.path() + "/f7.bin");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_TRUE(*got == Content(7)) << "content differs";
  ASSERT_TRUE(vol->Unmount());
}

// Small files (4-64 KB) read whole by parallel readers in a shuffled order, as a training
// job's data loader does, with the prefetcher on: every byte crosses the WAN once. Demand and
// prefetch meet on the same blocks all the time here; what the hub sends beyond the dataset
// is a block fetched twice, a call sent again or a read past a file's end.
class FuseMountHubBytes : public ::testing::Test {
 protected:
  static constexpr int kDirs = 12;
  static constexpr int kPerDir = 100;

  void SetUp() override {
    hub_ = testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
    proxy_ = testing::WanProxy::Start(*hub_, 30);
    ASSERT_NE(proxy_, nullptr);
    std::mt19937 rng(30);
    for (int d = 0; d < kDirs; ++d) {
      for (int f = 0; f < kPerDir; ++f) {
        const size_t size = 4096 + rng() % (60 * 1024 + 1);  // 4-64 KB
        std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f) + ".bin";
        WriteFile(hub_->export_dir() + "/set/" + rel, Pattern(size, rng()));
        files_.push_back(rel);
        dataset_bytes_ += size;
      }
    }
  }

  std::unique_ptr<MountedVolume> Mount(uint64_t cache_bytes, const std::string& mnt,
                                       std::unique_ptr<EvictionPolicy> policy = MakeLruPolicy()) {
    cache_dir_ = std::make_unique<testing::TempDir>("spoke-bytes-cache");
    BlockCache::Config cc;
    cc.dir = cache_dir_->path();
    cc.capacity_bytes = cache_bytes;
    auto cache = OpenBlockCache(cc, std::move(policy), &registry_);
    EXPECT_TRUE(cache) << cache.error().ToString();
    if (!cache) return nullptr;
    cache_ = std::move(*cache);
    FuseVolumeMounter::Config mc;
    mc.hub.request_timeout_seconds = 10;
    mounter_ = std::make_unique<FuseVolumeMounter>(mc, cache_.get(), &registry_);
    VolumeContext ctx;
    ctx.hub = proxy_->address();
    ctx.mode = VolumeMode::kDataset;
    ctx.path = "set";
    ctx.cache.consistency = Consistency::kImmutable;
    ctx.cache.prefetch = PrefetchMode::kAuto;
    ctx.hub_timeout_seconds = 10;
    auto v = mounter_->Mount("vol-bytes", ctx, mnt, false);
    EXPECT_TRUE(v) << v.error().ToString();
    return v ? std::move(*v) : nullptr;
  }

  // Every file read whole once by 8 readers in a shuffled order; the files that differ.
  int ReadEpoch(const std::string& mnt, uint32_t seed) {
    std::vector<std::string> order = files_;
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    std::atomic<size_t> next{0};
    std::atomic<int> bad{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 8; ++t) {
      readers.emplace_back([&] {
        for (size_t i = next++; i < order.size(); i = next++) {
          auto got = ReadThrough(mnt + "/" + order[i]);
          if (!got || *got != ReadWholeFile(hub_->export_dir() + "/set/" + order[i])) bad++;
        }
      });
    }
    for (auto& t : readers) t.join();
    return bad.load();
  }

  // Data bytes of every READ reply the hub sent (spoke_hub_read_reply_bytes_total: retries
  // and replies to calls given up included), once they stop growing: prefetches still in
  // flight land first.
  uint64_t SettledReplyBytes() {
    uint64_t last = ReplyBytes();
    for (int stable = 0, i = 0; stable < 10 && i < 300; ++i) {
      std::this_thread::sleep_for(100ms);
      const uint64_t now = ReplyBytes();
      stable = now == last ? stable + 1 : 0;
      last = now;
    }
    return last;
  }
  uint64_t ReplyBytes() {
    uint64_t sum = 0;
    std::string line;
    std::istringstream in(registry_.Render());
    while (std::getline(in, line)) {
      if (!line.starts_with("spoke_hub_read_reply_bytes_total")) continue;
      sum += std::stoull(line.substr(line.rfind(' ') + 1));
    }
    return sum;
  }

  std::string Describe(uint64_t reply_bytes, const VolumeFigures& f) const {
    std::ostringstream o;
    o << "hub replies " << reply_bytes << " B, fetched " << f.hub_read_bytes
      << " B, for a dataset of " << dataset_bytes_ << " B ("
      << static_cast<double>(reply_bytes) / static_cast<double>(dataset_bytes_) << "x); hits "
      << f.cache_hits << ", misses " << f.cache_misses << ", prefetched used "
      << f.prefetched_bytes_used << " B, wasted " << f.prefetched_bytes_wasted << " B; staged "
      << f.staged_blocks << " blocks, " << f.staged_hits << " read, " << f.staged_dropped
      << " dropped, " << f.staged_evicted << " evicted; cached " << f.cache_bytes << " B";
    return o.str();
  }

  std::unique_ptr<testing::TestHub> hub_;
  std::unique_ptr<testing::WanProxy> proxy_;
  std::vector<std::string> files_;
  uint64_t dataset_bytes_ = 0;
  metrics::Registry registry_;
  std::unique_ptr<testing::TempDir> cache_dir_;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<FuseVolumeMounter> mounter_;
};

TEST_F(FuseMountHubBytes, ACacheThatFitsReadsEachByteOfSmallFilesFromTheHubOnce) {
  testing::TempDir mnt("spoke-mnt");
  // Slots are whole blocks: one per small file, and room to spare.
  auto vol = Mount(2ull * files_.size() << 20, mnt.path());
  ASSERT_NE(vol, nullptr);
  EXPECT_EQ(ReadEpoch(mnt.path(), 1), 0);
  const uint64_t replies = SettledReplyBytes();
  const VolumeFigures f = vol->Figures();
  std::cout << Describe(replies, f) << std::endl;
  EXPECT_GE(f.hub_read_bytes, dataset_bytes_) << Describe(replies, f);
  EXPECT_LE(static_cast<double>(replies), 1.02 * static_cast<double>(dataset_bytes_))
      << Describe(replies, f);
  ASSERT_TRUE(vol->Unmount());
}

// The dataset twice the cache: each epoch after the first reads from the hub the part that
// does not fit, and little more (a block prefetched and evicted before its read crosses twice).
TEST_F(FuseMountHubBytes, ADatasetTwiceTheCacheReadsAboutThePartThatDoesNotFitEachEpoch) {
  testing::TempDir mnt("spoke-mnt");
  const uint64_t capacity = dataset_bytes_ / 2;
  auto vol =
      Mount(capacity, mnt.path(), std::make_unique<NoThrashPolicy>(NoThrashPolicy::Config{}));
  ASSERT_NE(vol, nullptr);
  EXPECT_EQ(ReadEpoch(mnt.path(), 1), 0);
  const uint64_t epoch1 = SettledReplyBytes();
  std::cout << "epoch 1: " << Describe(epoch1, vol->Figures()) << std::endl;
  EXPECT_LE(static_cast<double>(epoch1), 1.02 * static_cast<double>(dataset_bytes_))
      << Describe(epoch1, vol->Figures());
  const uint64_t cached = vol->Figures().cache_bytes;
  ASSERT_TRUE(vol->Unmount());  // a new mount: the kernel's page cache holds nothing
  vol.reset();
  VolumeContext ctx;
  ctx.hub = proxy_->address();
  ctx.mode = VolumeMode::kDataset;
  ctx.path = "set";
  ctx.cache.consistency = Consistency::kImmutable;
  ctx.cache.prefetch = PrefetchMode::kAuto;
  ctx.hub_timeout_seconds = 10;
  auto v2 = mounter_->Mount("vol-bytes", ctx, mnt.path(), false);
  ASSERT_TRUE(v2) << v2.error().ToString();
  EXPECT_EQ(ReadEpoch(mnt.path(), 2), 0);
  const uint64_t epoch2 = SettledReplyBytes() - epoch1;
  // What does not fit is what the cache could not keep: its slots bound small blocks before
  // its bytes do (docs/design.md, "Slot geometry").
  const uint64_t not_fitting = dataset_bytes_ - std::min(dataset_bytes_, cached);
  std::cout << "epoch 2: " << epoch2 << " B from the hub; " << not_fitting
            << " B do not fit the cache (it held " << cached << " B after epoch 1)" << std::endl;
  EXPECT_LE(static_cast<double>(epoch2), 1.05 * static_cast<double>(not_fitting));
  ASSERT_TRUE((*v2)->Unmount());
}

}  // namespace
}  // namespace spoke::agent
