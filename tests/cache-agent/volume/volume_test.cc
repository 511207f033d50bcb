// Volume's control-plane operations (figures, warm-up, evict, hints) over fakes: no FUSE.
#include "cache-agent/volume/volume.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeBlockCache;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;

struct VolumeRig {
  // `small_files` more files of under one block each in s/ (distinct bytes each), and
  // one file of `big_blocks` blocks, l/big.
  explicit VolumeRig(PrefetchMode mode = PrefetchMode::kOff, int small_files = 0,
                     uint64_t big_blocks = 0)
      : cache(kBlock) {
    auto r = std::make_unique<FakeRemoteFs>();
    remote = r.get();
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
