// Volume's control-plane operations (figures, warm-up, evict, hints) over fakes: no FUSE.
#include "cache-agent/volume/volume.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache-agent/cache/block_cache_factory.h"
#include "tests/cache-agent/cache/cache_test_util.h"
#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeBlockCache;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;

struct VolumeRig {
  // `small_files` more files of under one block each in s/ (distinct bytes each), and
  // one file of `big_blocks` blocks, l/big. The hub holds listings of `slow_dir` until
  // remote->HoldReadDir("").
  explicit VolumeRig(PrefetchMode mode = PrefetchMode::kOff, int small_files = 0,
                     uint64_t big_blocks = 0, const std::string& slow_dir = "")
      : cache(kBlock) {
    auto r = std::make_unique<FakeRemoteFs>();
    remote = r.get();
    remote->HoldReadDir(slow_dir);
    remote->PutFile("a/x", std::string(3 * kBlock, 'x'));
    remote->PutFile("a/y", std::string(2 * kBlock, 'y'));
    remote->PutFile("b/z", std::string(kBlock, 'z'));
    for (int i = 0; i < small_files; ++i) remote->PutFile(SmallPath(i), SmallData(i));
    if (big_blocks > 0) remote->PutFile("l/big", SmallData(7, big_blocks * kBlock - 5));
    Volume::Config c;
    c.volume_id = "vol";
    c.context.hub.server = "hub";
    c.context.cache.prefetch = mode;
    c.read_ahead_max_bytes = 8 * kBlock;
    c.block_size = kBlock;
    auto v = Volume::Open(c, std::move(r), &cache, std::make_shared<CacheListenerFanout>(),
                          &registry, clock);
    EXPECT_TRUE(v) << v.error().ToString();
    if (v) volume = std::move(*v);
  }
  ~VolumeRig() {
    remote->HoldReads(false);
    remote->HoldReadDir("");
    volume.reset();
  }
  static std::string SmallPath(int i) {
    return "s/d" + std::to_string(i % 4) + "/f" + std::to_string(i);
  }
  static std::string SmallData(int i, size_t size = 0) {
    if (size == 0) size = 500 + 29 * static_cast<size_t>(i % 100);  // under one block
    std::string d(size, '\0');
    for (size_t k = 0; k < size; ++k) d[k] = static_cast<char>('a' + (k * 7 + i) % 26);
    return d;
  }
  // The file's bytes through the volume's VolumeFs, as the kernel would read them.
  std::string Contents(const std::string& path) {
    auto& fs = volume->fs();
    uint64_t ino = kRootIno;
    size_t start = 0;
    while (start <= path.size()) {
      size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      auto e = fs.Lookup(ino, path.substr(start, slash - start));
      if (!e) return "<no " + path + ">";
      ino = e->ino;
      start = slash + 1;
    }
    auto f = fs.Open(ino, O_RDONLY);
    if (!f) return "<cannot open " + path + ">";
    std::string out(1 << 20, '\0');
    auto n = fs.Read(f->handle, 0, out.size(), out.data());
    EXPECT_TRUE(fs.Release(f->handle));
    if (!n) return "<cannot read " + path + ">";
    out.resize(*n);
    return out;
  }
  // Waits (bounded) until the hub has at least `n` reads outstanding; returns how many.
  int AwaitReadsInFlight(int n) {
    for (int i = 0; i < 10000 && remote->reads_in_flight() < n; ++i)
      std::this_thread::sleep_for(1ms);
    return remote->reads_in_flight();
  }

  // Reads the whole file through the volume's VolumeFs, as the kernel would.
  void ReadFile(const std::string& path, uint64_t size) {
    auto& fs = volume->fs();
    uint64_t ino = kRootIno;
    size_t start = 0;
    while (start <= path.size()) {
      size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      auto e = fs.Lookup(ino, path.substr(start, slash - start));
      ASSERT_TRUE(e) << path;
      ino = e->ino;
      start = slash + 1;
    }
    auto f = fs.Open(ino, O_RDONLY);
    ASSERT_TRUE(f);
    std::vector<char> buf(size);
    auto n = fs.Read(f->handle, 0, size, buf.data());
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, size);
    EXPECT_TRUE(fs.Release(f->handle));
  }

  FakeBlockCache cache;
  FakeRemoteFs* remote = nullptr;  // owned by the volume
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<Volume> volume;
};

TEST(Volume, WarmupFetchesEveryBlockUnderThePrefixOnce) {
  VolumeRig rig;
  ASSERT_TRUE(rig.volume);
  std::atomic<bool> cancelled{false};
  WarmupFigures last;
  ASSERT_TRUE(rig.volume->Warmup(
      "a", [&](const WarmupFigures& f) { last = f; }, cancelled));
  EXPECT_EQ(last.files_total, 2u);
  EXPECT_EQ(last.files_done, 2u);
  EXPECT_EQ(last.bytes_total, 5u * kBlock);
  EXPECT_EQ(last.bytes_done, 5u * kBlock);
  EXPECT_EQ(last.bytes_from_hub, 5u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 5u);
  // The whole volume now: only b/z comes from the hub.
  ASSERT_TRUE(rig.volume->Warmup(
      "", [&](const WarmupFigures& f) { last = f; }, cancelled));
  EXPECT_EQ(last.files_total, 3u);
  EXPECT_EQ(last.bytes_from_hub, 1u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 6u);
}

// Warm-ups report to the volume's series: what they cached (counters whose rate is their
// speed), the bytes the running ones have still to go, how many run, and how each ended.
TEST(Volume, WarmupProgressReachesTheVolumesSeries) {
  VolumeRig rig;
  ASSERT_TRUE(rig.volume);
  const metrics::Labels labels{{"volume", VolumeMetricsLabel("vol")}};
  auto& running = rig.registry.GetGauge("spoke_warmup_running", "", labels);
  auto& remaining = rig.registry.GetGauge("spoke_warmup_remaining_bytes", "", labels);
  auto& bytes = rig.registry.GetCounter("spoke_warmup_bytes_total", "", labels);
  auto& files = rig.registry.GetCounter("spoke_warmup_files_total", "", labels);
  auto ended = [&](const char* result) {
    metrics::Labels l = labels;
    l["result"] = result;
    return rig.registry.GetCounter("spoke_warmups_total", "", l).Value();
  };
  std::atomic<bool> cancelled{false};
  int64_t running_during = 0, remaining_at_first = -1;
  ASSERT_TRUE(rig.volume->Warmup(
      "a",
      [&](const WarmupFigures& f) {
        running_during = running.Value();
        if (remaining_at_first < 0) remaining_at_first = remaining.Value();
        EXPECT_EQ(remaining.Value(), static_cast<int64_t>(f.bytes_total - f.bytes_done));
      },
      cancelled));
  EXPECT_EQ(running_during, 1);
  EXPECT_GE(remaining_at_first, 0);
  EXPECT_EQ(running.Value(), 0);
  EXPECT_EQ(remaining.Value(), 0);
  EXPECT_EQ(bytes.Value(), 5u * kBlock);
  EXPECT_EQ(files.Value(), 2u);
  EXPECT_EQ(ended("ok"), 1u);
  // Already cached blocks count as warmed; a missing path fails; a cancel is counted as such.
  ASSERT_TRUE(rig.volume->Warmup("", nullptr, cancelled));
  EXPECT_EQ(bytes.Value(), 5u * kBlock + 6u * kBlock);
  EXPECT_EQ(ended("ok"), 2u);
  EXPECT_FALSE(rig.volume->Warmup("nope", nullptr, cancelled));
  EXPECT_EQ(ended("failed"), 1u);
  cancelled = true;
  EXPECT_FALSE(rig.volume->Warmup("", nullptr, cancelled));
  EXPECT_EQ(ended("cancelled"), 1u);
  EXPECT_EQ(running.Value(), 0);
  EXPECT_EQ(remaining.Value(), 0);
}

TEST(Volume, WarmupNamesABadOrMissingPathAndStopsWhenCancelled) {
  VolumeRig rig;
  ASSERT_TRUE(rig.volume);
  std::atomic<bool> cancelled{false};
  auto missing = rig.volume->Warmup("nope", nullptr, cancelled);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  auto escape = rig.volume->Warmup("../x", nullptr, cancelled);
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().code(), Code::kInvalidArgument);
  cancelled = true;
  auto stopped = rig.volume->Warmup("", nullptr, cancelled);
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().code(), Code::kCancelled);
  EXPECT_EQ(rig.cache.blocks(), 0u);
}

// Warm-up keeps many files on the hub at once (bounded by the fetcher's depth and the
// memory budget, not by a number of threads), and every byte lands in the cache.
TEST(Volume, WarmupKeepsManySmallFilesOnTheHubAtOnce) {
  constexpr int kFiles = 150;
  VolumeRig rig(PrefetchMode::kOff, kFiles);
  ASSERT_TRUE(rig.volume);
  rig.remote->HoldReads(true);
  std::atomic<bool> cancelled{false};
  WarmupFigures last;
  Status st = Ok();
  std::thread warm([&] {
    st = rig.volume->Warmup(
        "s", [&](const WarmupFigures& f) { last = f; }, cancelled);
  });
  // Every small file is one block: all of them are asked for before any comes back.
  EXPECT_EQ(rig.AwaitReadsInFlight(kFiles), kFiles);
  rig.remote->HoldReads(false);
  warm.join();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_GE(rig.remote->max_reads_in_flight(), kFiles);
  EXPECT_EQ(last.files_total, uint64_t{kFiles});
  EXPECT_EQ(last.files_done, uint64_t{kFiles});
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  EXPECT_EQ(last.bytes_from_hub, last.bytes_total);
  EXPECT_EQ(rig.cache.blocks(), static_cast<size_t>(kFiles));
  const int reads = rig.remote->reads.load();
  for (int i = 0; i < kFiles; ++i) {
    EXPECT_EQ(rig.Contents(VolumeRig::SmallPath(i)), VolumeRig::SmallData(i)) << i;
  }
  EXPECT_EQ(rig.remote->reads.load(), reads);  // all from the cache
}

// A cold mount's walk is still listing when the warm-up starts: the directories listed
// are warmed meanwhile, not after the whole walk.
TEST(Volume, WarmupStartsOnTheDirectoriesTheWalkListedSoFar) {
  VolumeRig rig(PrefetchMode::kOff, 0, 0, /*slow_dir=*/"b");
  ASSERT_TRUE(rig.volume);
  std::atomic<bool> cancelled{false};
  Status st = Ok();
  std::atomic<bool> returned{false};
  std::thread warm([&] {
    st = rig.volume->Warmup("", nullptr, cancelled);
    returned = true;
  });
  // a/x (3 blocks) and a/y (2) are cached while b/ is still being listed.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (rig.cache.blocks() < 5 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(rig.cache.blocks(), 5u);
  EXPECT_FALSE(rig.volume->metadata().walk_done());
  EXPECT_FALSE(returned.load());  // b/ is not known yet: the warm-up waits for it
  rig.remote->HoldReadDir("");
  warm.join();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(rig.cache.blocks(), 6u);  // and b/z
  EXPECT_EQ(rig.Contents("b/z"), std::string(kBlock, 'z'));
}

// A large file's 64-block ranges are just more tickets: no drain between them.
TEST(Volume, WarmupOfALargeFileKeepsMoreThanOneRangeOnTheHub) {
  constexpr uint64_t kBlocks = 200;  // under the fetcher's background slots (256 - 32)
  VolumeRig rig(PrefetchMode::kOff, 0, kBlocks);
  ASSERT_TRUE(rig.volume);
  rig.remote->HoldReads(true);
  std::atomic<bool> cancelled{false};
  Status st = Ok();
  std::thread warm([&] { st = rig.volume->Warmup("l", nullptr, cancelled); });
  EXPECT_EQ(rig.AwaitReadsInFlight(int{kBlocks}), int{kBlocks});
  rig.remote->HoldReads(false);
  warm.join();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(rig.cache.blocks(), kBlocks);
  EXPECT_EQ(rig.Contents("l/big"), VolumeRig::SmallData(7, kBlocks * kBlock - 5));
}

// One file's hub error is reported (naming the file) and the others are still warmed.
TEST(Volume, WarmupReportsAFileErrorAndFinishesTheOthers) {
  constexpr int kFiles = 40;
  VolumeRig rig(PrefetchMode::kOff, kFiles);
  ASSERT_TRUE(rig.volume);
  rig.remote->FailReadsOf(VolumeRig::SmallPath(3));
  std::atomic<bool> cancelled{false};
  WarmupFigures last;
  auto st = rig.volume->Warmup(
      "s", [&](const WarmupFigures& f) { last = f; }, cancelled);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code(), Code::kIo);
  EXPECT_NE(st.error().ToString().find(VolumeRig::SmallPath(3)), std::string::npos)
      << st.error().ToString();
  EXPECT_EQ(last.files_done, uint64_t{kFiles});
  EXPECT_EQ(last.bytes_done, last.bytes_total - VolumeRig::SmallData(3).size());
  EXPECT_EQ(rig.cache.blocks(), static_cast<size_t>(kFiles - 1));
  rig.remote->FailReadsOf("");
  for (int i = 0; i < kFiles; ++i) {
    EXPECT_EQ(rig.Contents(VolumeRig::SmallPath(i)), VolumeRig::SmallData(i)) << i;
  }
}

// A warm-up with a rate fetches no faster than it: on the rig's ManualClock (the limiter's
// waits advance it), the bytes read from the hub by any time are within the bucket plus the
// rate since the start, and the whole file takes the time its size asks for.
TEST(Volume, WarmupWithARateFetchesNoFasterThanIt) {
  constexpr uint64_t kBlocks = 40;
  VolumeRig rig(PrefetchMode::kOff, 0, kBlocks);
  ASSERT_TRUE(rig.volume);
  constexpr uint64_t kRate = 4 * kBlock;  // 4 blocks a second; the bucket holds one second
  const SteadyTime start = rig.clock.Now();
  uint64_t over = 0, sleeps = 0;
  WarmupOptions options;
  options.rate_bytes_per_second = kRate;
  options.clock = &rig.clock;
  options.sleep_until = [&](SteadyTime until) {
    rig.clock.Set(until);
    sleeps++;
    const double secs = std::chrono::duration<double>(rig.clock.Now() - start).count();
    const double allowed = static_cast<double>(kRate + kBlock) + secs * kRate;
    if (static_cast<double>(rig.remote->reads.load()) * kBlock > allowed) over++;
  };
  std::atomic<bool> cancelled{false};
  WarmupFigures last;
  auto st = rig.volume->Warmup(
      "l", options, [&](const WarmupFigures& f) { last = f; }, cancelled);
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(rig.cache.blocks(), kBlocks);
  EXPECT_EQ(last.bytes_done, kBlocks * kBlock - 5);
  EXPECT_EQ(over, 0u) << "hub reads ran ahead of the rate";
  EXPECT_GT(sleeps, 0u);
  // 40 blocks at 4 a second, less the bucket's 4 and one block of slack: at least 8.75 s.
  EXPECT_GE(rig.clock.Now() - start, 8750ms);
  EXPECT_EQ(rig.Contents("l/big"), VolumeRig::SmallData(7, kBlocks * kBlock - 5));
}

// Readers never wait for a warm-up's rate limit: while the warm-up waits for its bucket, a
// reader reads the whole file the warm-up has not fetched yet.
TEST(Volume, AReaderIsNotHeldByAWarmupsRateLimit) {
  constexpr uint64_t kBlocks = 40;
  VolumeRig rig(PrefetchMode::kOff, 0, kBlocks);
  ASSERT_TRUE(rig.volume);
  std::mutex mu;
  std::condition_variable cv;
  bool waiting = false, reader_done = false, timed_out = false;
  WarmupOptions options;
  options.rate_bytes_per_second = kBlock;  // one block a second: 40 s of virtual time
  options.clock = &rig.clock;
  options.sleep_until = [&](SteadyTime until) {
    std::unique_lock<std::mutex> lock(mu);
    waiting = true;
    cv.notify_all();
    // The first wait lasts until the reader is done (bounded: a held reader fails the test).
    if (!cv.wait_for(lock, 20s, [&] { return reader_done; })) timed_out = true;
    rig.clock.Set(until);
  };
  std::atomic<bool> cancelled{false};
  Status st = Ok();
  std::thread warm([&] { st = rig.volume->Warmup("l", options, nullptr, cancelled); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return waiting; })) << "the warm-up never waited";
  }
  const int reads_before = rig.remote->reads.load();
  EXPECT_EQ(rig.Contents("l/big"), VolumeRig::SmallData(7, kBlocks * kBlock - 5));
  EXPECT_GT(rig.remote->reads.load(), reads_before) << "the reader fetched what was not cached";
  {
    std::lock_guard<std::mutex> lock(mu);
    reader_done = true;
  }
  cv.notify_all();
  warm.join();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_FALSE(timed_out) << "the reader waited for the warm-up's bucket";
  EXPECT_EQ(rig.cache.blocks(), kBlocks);
}

// A volume over a real block cache (slot files in a temp dir): the verify pass reads blocks
// back through the cache's own checksum check.
struct RealCacheRig {
  static constexpr uint32_t kCacheBlock = 64 << 10;
  explicit RealCacheRig(const std::string& base) : dir(base) {
    BlockCache::Config cc;
    cc.dir = dir.path();
    cc.capacity_bytes = 8 * kCacheBlock;
    cc.block_size = kCacheBlock;
    cc.io_depth = 16;
    auto opened = OpenBlockCache(cc, MakeLruPolicy(), nullptr);
    EXPECT_TRUE(opened) << opened.error().ToString();
    if (!opened) return;
    cache = std::move(*opened);
    auto r = std::make_unique<FakeRemoteFs>();
    remote = r.get();
    remote->PutFile("d/f", Content(3 * kCacheBlock - 100, 1));
    remote->PutFile("d/g", Content(kCacheBlock, 2));
    Volume::Config c;
    c.volume_id = "vol";
    c.context.hub.server = "hub";
    c.block_size = kCacheBlock;
    auto v = Volume::Open(c, std::move(r), cache.get(), std::make_shared<CacheListenerFanout>(),
                          &registry, clock);
    EXPECT_TRUE(v) << v.error().ToString();
    if (v) volume = std::move(*v);
  }
  ~RealCacheRig() { volume.reset(); }
  static std::string Content(size_t size, int seed) {
    std::string d(size, '\0');
    for (size_t i = 0; i < size; ++i) d[i] = static_cast<char>(i * 7 + i / 251 + seed);
    return d;
  }
  // Flips one data byte of block `index` of `path` on disk.
  void Corrupt(const std::string& path, uint64_t index) {
    auto a = remote->Stat(path);
    ASSERT_TRUE(a);
    auto slot =
        testing::FindSlot(dir.path(), kCacheBlock, 8,
                          BlockKey{VolumeKey("vol"), a->file_id, a->ContentVersion(), index});
    ASSERT_TRUE(slot);
    const uint64_t off = *slot * (kHeaderBytes + kCacheBlock) + kHeaderBytes + 1234;
    auto byte = testing::ReadRaw(dir.path(), off, 1);
    byte[0] ^= 0x40;
    testing::WriteRaw(dir.path(), off, byte);
  }
  WarmupFigures Warm(bool verify, Status* st = nullptr) {
    WarmupOptions o;
    o.verify = verify;
    std::atomic<bool> cancelled{false};
    WarmupFigures last;
    Status s = volume->Warmup(
        "d", o, [&](const WarmupFigures& f) { last = f; }, cancelled);
    EXPECT_TRUE(s) << s.error().ToString();
    if (st != nullptr) *st = s;
    return last;
  }

  testing::TempDir dir;
  std::unique_ptr<BlockCache> cache;
  FakeRemoteFs* remote = nullptr;  // owned by the volume
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<Volume> volume;
};

TEST(Volume, VerifyFindsACorruptCachedBlockAndFetchesItAgain) {
  for (const std::string& base : testing::TestBases()) {
    SCOPED_TRACE(base);
    RealCacheRig rig(base);
    ASSERT_TRUE(rig.volume);
    auto first = rig.Warm(false);
    EXPECT_EQ(first.bytes_from_hub, 4u * RealCacheRig::kCacheBlock - 100);
    EXPECT_EQ(first.blocks_verified, 0u) << "no verify pass asked for";
    rig.Corrupt("d/f", 1);
    const int reads = rig.remote->reads.load();

    auto v = rig.Warm(true);
    EXPECT_EQ(v.blocks_verified, 3u);  // d/f's blocks 0 and 2, d/g's block
    EXPECT_EQ(v.blocks_repaired, 1u);
    EXPECT_EQ(v.files_changed, 0u);
    EXPECT_EQ(rig.remote->reads.load(), reads + 1) << "only the bad block from the hub";
    EXPECT_EQ(rig.cache->Stats().checksum_failures, 1u);
    EXPECT_EQ(rig.cache->Stats().blocks, 4u);

    auto again = rig.Warm(true);
    EXPECT_EQ(again.blocks_verified, 4u) << "the fetched block is good";
    EXPECT_EQ(again.blocks_repaired, 0u);
    EXPECT_EQ(rig.remote->reads.load(), reads + 1);
  }
}

TEST(Volume, VerifyFetchesAFileThatChangedOnTheHub) {
  RealCacheRig rig("/tmp");
  ASSERT_TRUE(rig.volume);
  rig.Warm(false);
  // d/g changes on the hub (new size and time: a new version); the volume's metadata still
  // has the old one (immutable consistency), so a plain warm-up finds it warm.
  rig.remote->PutFile("d/g", RealCacheRig::Content(2 * RealCacheRig::kCacheBlock, 9));
  auto plain = rig.Warm(false);
  EXPECT_EQ(plain.bytes_from_hub, 0u);
  auto v = rig.Warm(true);
  EXPECT_EQ(v.files_changed, 1u);
  EXPECT_EQ(v.blocks_verified, 3u);  // d/f's
  EXPECT_EQ(v.blocks_repaired, 2u);  // d/g's new version, both blocks
  auto again = rig.Warm(true);
  EXPECT_EQ(again.files_changed, 0u);
  EXPECT_EQ(again.blocks_verified, 5u);
  EXPECT_EQ(again.blocks_repaired, 0u);
}

TEST(Volume, VerifyFetchesAFileReplacedOnTheHub) {
  RealCacheRig rig("/tmp");
  ASSERT_TRUE(rig.volume);
  rig.Warm(false);
  // d/g is replaced by another file (a new file id) of three blocks under the same name.
  rig.remote->PutFile("d/g", RealCacheRig::Content(3 * RealCacheRig::kCacheBlock, 5));
  rig.remote->SetIdentity("d/g", 0, 4242);
  auto v = rig.Warm(true);
  EXPECT_EQ(v.files_changed, 1u);
  EXPECT_EQ(v.blocks_verified, 3u);  // d/f's
  EXPECT_EQ(v.blocks_repaired, 3u);  // the new d/g
  EXPECT_EQ(rig.cache->Stats().blocks, 6u) << "the old d/g's block dropped";
  auto again = rig.Warm(true);
  EXPECT_EQ(again.files_changed, 0u);
  EXPECT_EQ(again.blocks_verified, 6u);
  EXPECT_EQ(again.blocks_repaired, 0u);
}

// A cancel stops the warm-up without waiting for the hub reads it has out.
TEST(Volume, WarmupStopsAtACancelWhileReadsAreOut) {
  VolumeRig rig(PrefetchMode::kOff, 50);
  ASSERT_TRUE(rig.volume);
  rig.remote->HoldReads(true);
  std::atomic<bool> cancelled{false};
  std::atomic<bool> returned{false};
  Status st = Ok();
  std::thread warm([&] {
    st = rig.volume->Warmup("", nullptr, cancelled);
    returned = true;
  });
  EXPECT_GE(rig.AwaitReadsInFlight(1), 1);
  cancelled = true;
  for (int i = 0; i < 10000 && !returned.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(returned.load());  // the reads are still held
  rig.remote->HoldReads(false);
  warm.join();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code(), Code::kCancelled);
}

TEST(Volume, EvictDropsThePrefixOrTheWholeVolume) {
  VolumeRig rig;
  ASSERT_TRUE(rig.volume);
  std::atomic<bool> cancelled{false};
  ASSERT_TRUE(rig.volume->Warmup("", nullptr, cancelled));
  ASSERT_EQ(rig.cache.blocks(), 6u);
  auto a = rig.volume->Evict("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, 5u);
  EXPECT_EQ(rig.cache.blocks(), 1u);
  auto all = rig.volume->Evict("");
  ASSERT_TRUE(all);
  EXPECT_EQ(*all, 1u);
  EXPECT_EQ(rig.cache.blocks(), 0u);
  EXPECT_FALSE(rig.volume->Evict("/abs"));
}

TEST(Volume, FiguresCountReadsAndTakeTheMissLatencyFromOnePlace) {
  VolumeRig rig(PrefetchMode::kAuto);
  ASSERT_TRUE(rig.volume);
  rig.remote->SetReadLatency(5ms);
  rig.ReadFile("a/x", 3 * kBlock);
  for (int i = 0; i < 1000 && rig.cache.blocks() < 3; ++i) std::this_thread::sleep_for(1ms);
  // Prefetches may still be landing in the cache: the figure lies between two readings.
  const uint64_t cached_before = rig.cache.VolumeBytes(VolumeKey("vol"));
  VolumeFigures f = rig.volume->Figures();
  const uint64_t cached_after = rig.cache.VolumeBytes(VolumeKey("vol"));
  EXPECT_EQ(f.cache_hits, 0u);
  EXPECT_GE(f.cache_misses, 1u);
  EXPECT_GE(f.hub_read_bytes, 3u * kBlock);
  EXPECT_GE(f.cache_bytes, cached_before);
  EXPECT_LE(f.cache_bytes, cached_after);
  EXPECT_TRUE(f.hub_reachable);
  EXPECT_EQ(f.hub_total_bytes, 1u << 30);
  EXPECT_FALSE(f.experts.empty());  // auto mode: the prefetcher's experts
  // The figure is the fetcher's histogram (one observation per read that waited), not a
  // second measurement overwriting it.
  auto& hist = rig.registry.GetHistogram("spoke_demand_miss_seconds", "",
                                         metrics::Labels{{"volume", VolumeMetricsLabel("vol")}});
  ASSERT_GE(hist.Count(), 1u);
  EXPECT_NEAR(f.demand_miss_latency_ms_avg, hist.Sum() * 1e3 / static_cast<double>(hist.Count()),
              0.01);
  EXPECT_GT(f.demand_miss_latency_ms_avg, 0);
  rig.remote->SetDown(true);
  VolumeFigures down = rig.volume->Figures();
  EXPECT_FALSE(down.hub_reachable);
}

TEST(Volume, HintsAcceptKnownFilesOnlyInAutoMode) {
  VolumeRig rig(PrefetchMode::kAuto);
  ASSERT_TRUE(rig.volume);
  HintFigures h = rig.volume->Hint({"a/x", "nope", "a", "../etc"});
  EXPECT_EQ(h.accepted, 1u);
  EXPECT_EQ(h.rejected, 3u);

  VolumeRig off(PrefetchMode::kOff);
  ASSERT_TRUE(off.volume);
  HintFigures o = off.volume->Hint({"a/x"});
  EXPECT_EQ(o.accepted, 0u);
  EXPECT_EQ(o.rejected, 1u);
}

TEST(Volume, OpenNamesTheRootFailure) {
  auto r = std::make_unique<FakeRemoteFs>();
  r->SetDown(true);
  FakeBlockCache cache(kBlock);
  ManualClock clock;
  Volume::Config c;
  c.volume_id = "vol";
  c.block_size = kBlock;
  c.read_ahead_max_bytes = kBlock;
  auto v = Volume::Open(c, std::move(r), &cache, nullptr, nullptr, clock);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("volume vol"), std::string::npos) << v.error().ToString();
}

}  // namespace
}  // namespace spoke::agent
