// PrefetchDriver wired into VolumeFs over the fake hub and cache: the volume's prefetch mode
// picks the experts, the metadata walk feeds the working set, `.spoke-hints` feeds the hint
// expert. No mount, no network; the tests tick the scheduler themselves.
#include "cache-agent/fs/prefetch_driver.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "cache-agent/fs/volume_fs.h"
#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeBlockCache;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;
constexpr uint32_t kTtlSeconds = 30;

std::string Name(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "train/f%03d", i);
  return buf;
}

struct Rig {
  // `files` files of two blocks each under train/, walked before the driver starts.
  // With `held_dir`, that directory also holds 4 files and its listing waits until the test
  // releases it (remote.HoldReadDir("")): the walk is still under way when the rig is ready.
  Rig(PrefetchMode mode, int files, uint64_t space_budget_blocks, bool read_only = true,
      const std::string& held_dir = "", Consistency consistency = Consistency::kImmutable)
      : cache(kBlock) {
    for (int i = 0; i < files; ++i) remote.PutFile(Name(i), std::string(2 * kBlock, 'a' + i % 26));
    for (int i = 0; !held_dir.empty() && i < 4; ++i) {
      remote.PutFile(held_dir + "/g" + std::to_string(i), std::string(2 * kBlock, 'z'));
    }
    remote.HoldReadDir(held_dir);
    MetadataCache::Config mc;
    mc.consistency = consistency;
    mc.ttl_seconds = kTtlSeconds;
    meta = std::make_unique<MetadataCache>(remote, mc, clock);
    EXPECT_TRUE(meta->Init());
    meta->StartWalk();
    if (held_dir.empty()) {
      EXPECT_TRUE(meta->WaitWalk(10s));
    }
    BlockFetcher::Config fc;
    fc.block_size = kBlock;
    fc.prefetch_bytes_max = 64 * kBlock;
    fetcher = std::make_unique<BlockFetcher>(remote, &cache, VolumeKey("vol"), fc, registry,
                                             metrics::Labels{{"volume", "vol"}});
    PrefetchDriver::Config pc;
    pc.volume_id = "vol";
    pc.mode = mode;
    pc.read_ahead_max_bytes = 8 * kBlock;
    pc.space_budget_bytes = space_budget_blocks * kBlock;
    pc.max_inflight_bytes = 32 * kBlock;
    pc.tick_interval = 0ms;  // the test ticks
    driver = std::make_unique<PrefetchDriver>(pc, *fetcher, clock, meta.get(), &registry);
    VolumeFs::Config vc;
    vc.volume_id = "vol";
    vc.read_only = read_only;
    fs = std::make_unique<VolumeFs>(vc, remote, *meta, *fetcher, driver.get(), clock);
  }
  ~Rig() {
    fs.reset();
    driver.reset();
    fetcher.reset();
    remote.WaitIdle();
  }

  bool Cached(const std::string& path) {
    auto r = meta->Resolve(path);
    if (!r) return false;
    FileRef f{path, r->attr.file_id, r->attr.ContentVersion(), r->attr.size};
    return fetcher->Cached(f, 0) && fetcher->Cached(f, 1);
  }
  // Ticks until the fetcher has no prefetch left in flight and the cache stopped growing.
  void Settle(int ticks = 5) {
    for (int i = 0; i < ticks; ++i) {
      driver->Tick();
      auto deadline = std::chrono::steady_clock::now() + 5s;
      while (fetcher->PrefetchBytesInFlight() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      remote.WaitIdle();
      std::this_thread::sleep_for(5ms);  // store threads
    }
  }
  std::string ReadAll(const std::string& path) {
    auto ino = meta->Resolve(path);
    EXPECT_TRUE(ino) << path;
    if (!ino) return "";
    auto f = fs->Open(ino->ino, O_RDONLY);
    EXPECT_TRUE(f);
    if (!f) return "";
    std::string out(ino->attr.size, '\0');
    auto n = fs->Read(f->handle, 0, out.size(), out.data());
    EXPECT_TRUE(n);
    EXPECT_TRUE(fs->Release(f->handle));
    return out;
  }

  FakeRemoteFs remote;
  FakeBlockCache cache;
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<MetadataCache> meta;
  std::unique_ptr<BlockFetcher> fetcher;
  std::unique_ptr<PrefetchDriver> driver;
  std::unique_ptr<VolumeFs> fs;
};

// The working set is fed directory by directory as the walk lists them: a directory slow to
// list does not keep the prefetcher from the ones already listed.
TEST(PrefetchDriver, TheWorkingSetStartsBeforeTheWalkEnds) {
  Rig rig(PrefetchMode::kAuto, 12, /*space_budget_blocks=*/256, true, "slow");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!rig.Cached(Name(11)) && std::chrono::steady_clock::now() < deadline) rig.Settle(1);
  EXPECT_FALSE(rig.meta->walk_done());
  EXPECT_FALSE(rig.driver->tree_fed());
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(rig.Cached(Name(i))) << Name(i);

  rig.remote.HoldReadDir("");
  ASSERT_TRUE(rig.meta->WaitWalk(10s));
  rig.Settle();
  EXPECT_TRUE(rig.driver->tree_fed());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rig.Cached("slow/g" + std::to_string(i))) << i;
}

TEST(PrefetchDriver, AutoCachesTheWalkedWorkingSetWithoutReads) {
  Rig rig(PrefetchMode::kAuto, 12, /*space_budget_blocks=*/256);
  EXPECT_FALSE(rig.driver->empty());
  rig.Settle();
  EXPECT_TRUE(rig.driver->tree_fed());
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(rig.Cached(Name(i))) << Name(i);
  EXPECT_EQ(rig.remote.read_bytes.load(), 12u * 2 * kBlock);
  // Reading them now costs the hub nothing, and the working-set expert is credited.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rig.ReadAll(Name(i)), std::string(2 * kBlock, 'a' + i));
  EXPECT_EQ(rig.remote.read_bytes.load(), 12u * 2 * kBlock);
  PrefetchStats s = rig.driver->Stats();
  EXPECT_EQ(s.prefetched_bytes_used, 12u * 2 * kBlock);
  auto ws = std::find_if(s.experts.begin(), s.experts.end(),
                         [](const ExpertStats& e) { return e.name == "working-set"; });
  ASSERT_NE(ws, s.experts.end());
  EXPECT_EQ(ws->used_blocks, 24u);
  EXPECT_GE(s.experts.size(), 5u);  // sequential + hints, replay, directory, working set
  rig.driver->UpdateMetrics();
  EXPECT_NE(rig.registry.Render().find("spoke_prefetch_bytes_used_total{volume=\"vol\"}"),
            std::string::npos);
}

TEST(PrefetchDriver, OffFetchesNothingAhead) {
  Rig rig(PrefetchMode::kOff, 12, 256);
  EXPECT_TRUE(rig.driver->empty());
  rig.Settle();
  EXPECT_EQ(rig.remote.read_bytes.load(), 0u);
  EXPECT_EQ(rig.ReadAll(Name(0)), std::string(2 * kBlock, 'a'));
  rig.Settle();
  EXPECT_EQ(rig.remote.read_bytes.load(), 2u * kBlock);  // only what was read
  EXPECT_EQ(rig.fetcher->prefetch_issued_blocks(), 0u);
  for (int i = 1; i < 12; ++i) EXPECT_FALSE(rig.Cached(Name(i))) << Name(i);
  // Hints are refused, not silently dropped.
  std::vector<std::string> paths{Name(5)};
  EXPECT_EQ(rig.driver->AddHintPaths(paths).rejected, 1u);
}

TEST(PrefetchDriver, ReadaheadOnlyReadsAheadInTheOpenFile) {
  Rig rig(PrefetchMode::kReadAhead, 12, 256);
  rig.Settle();
  EXPECT_EQ(rig.remote.read_bytes.load(), 0u);  // no working set without reads
  auto ino = rig.meta->Resolve(Name(3));
  ASSERT_TRUE(ino);
  auto f = rig.fs->Open(ino->ino, O_RDONLY);
  ASSERT_TRUE(f);
  std::vector<char> buf(100);
  ASSERT_TRUE(rig.fs->Read(f->handle, 0, buf.size(), buf.data()));
  rig.Settle(2);
  EXPECT_TRUE(rig.Cached(Name(3)));  // block 1 fetched ahead of the reader
  EXPECT_TRUE(rig.fs->Release(f->handle));
  for (int i = 0; i < 12; ++i) {
    if (i != 3) {
      EXPECT_FALSE(rig.Cached(Name(i))) << Name(i);
    }
  }
}

// 100 files, a space budget of 8 blocks: the working set alone only reaches the first four
// files of the walk. Hints written to .spoke-hints bring the last files in first (the
// hinted paths are scheduled as soon as they are written, ahead of the working set).
TEST(PrefetchDriver, HintFileWritesCacheTheHintedFilesBeforeTheyAreRead) {
  Rig rig(PrefetchMode::kAuto, 100, /*space_budget_blocks=*/8, /*read_only=*/true);
  auto hint = rig.fs->Lookup(kRootIno, std::string(kHintFileName));
  ASSERT_TRUE(hint) << hint.error().ToString();
  EXPECT_EQ(hint->ino, kHintIno);
  EXPECT_TRUE(hint->attr.is_reg());
  auto h = rig.fs->Open(kHintIno, O_WRONLY | O_TRUNC);  // read-only volume: still writable
  ASSERT_TRUE(h) << h.error().ToString();
  std::string text = Name(97) + "\n" + Name(98) + "\n" + Name(99) + "\n" + Name(96).substr(0, 8);
  ASSERT_EQ(*rig.fs->Write(h->handle, 0, text.data(), text.size()), text.size());
  std::string tail = Name(96).substr(8);  // a line split across writes, no final newline
  ASSERT_EQ(*rig.fs->Write(h->handle, text.size(), tail.data(), tail.size()), tail.size());
  EXPECT_EQ(rig.driver->Stats().hints_accepted, 3u);
  char c;
  EXPECT_EQ(*rig.fs->Read(h->handle, 0, 1, &c), 0u);
  ASSERT_TRUE(rig.fs->Release(h->handle));  // flushes the last line
  EXPECT_EQ(rig.driver->Stats().hints_accepted, 4u);

  rig.Settle();
  for (int i : {97, 98, 99}) EXPECT_TRUE(rig.Cached(Name(i))) << Name(i);
  EXPECT_FALSE(rig.Cached(Name(50)));  // beyond the working set's budget
  uint64_t misses = rig.fetcher->misses();
  for (int i : {97, 98, 99}) {
    EXPECT_EQ(rig.ReadAll(Name(i)), std::string(2 * kBlock, 'a' + i % 26));
  }
  EXPECT_EQ(rig.fetcher->misses(), misses);  // all three were cached before the read
  rig.remote.WaitIdle();  // (the reads free budget: more prefetches may be running)

  // The control file never reaches the hub and is not listed.
  EXPECT_FALSE(rig.remote.Exists(std::string(kHintFileName)));
  EXPECT_EQ(rig.remote.writes.load(), 0);
  auto root = rig.fs->ReadDir(kRootIno);
  ASSERT_TRUE(root);
  for (const auto& e : *root) EXPECT_NE(e.name, kHintFileName);
  EXPECT_EQ(root->size(), 1u);  // train
}

// A job flooding .spoke-hints (80 MiB of lines through the control file) cannot grow the
// agent: the volume's queued hints stay within their byte budget, the rest is rejected and
// counted, and hints naming no file are dropped and counted.
TEST(PrefetchDriver, HintFloodThroughTheControlFileStaysWithinBudget) {
  Rig rig(PrefetchMode::kAuto, 10, /*space_budget_blocks=*/8, /*read_only=*/true);
  auto h = rig.fs->Open(kHintIno, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(h) << h.error().ToString();
  const uint64_t budget = HintPredictor::Options{}.max_pending_bytes;
  std::string chunk;
  for (int i = 0; i < 16384; ++i) chunk += "flood/dir/of/no/file/" + std::to_string(i) + "\n";
  uint64_t offset = 0;
  while (offset < 80ull << 20) {
    auto n = rig.fs->Write(h->handle, offset, chunk.data(), chunk.size());
    ASSERT_TRUE(n) << n.error().ToString();
    offset += *n;
    ASSERT_LE(rig.driver->Stats().hints_pending_bytes, budget);
  }
  ASSERT_TRUE(rig.fs->Release(h->handle));
  const PrefetchStats st = rig.driver->Stats();
  EXPECT_LE(st.hints_pending_bytes, budget);
  EXPECT_GT(st.hints_rejected, 0u) << "the flood never reached the hint budget";
  EXPECT_GT(st.hints_unresolved, 0u);
  EXPECT_EQ(st.hints_accepted, st.hints_pending + st.hints_unresolved);
}

TEST(PrefetchDriver, HintFileCreateSetattrAndGuards) {
  Rig rig(PrefetchMode::kAuto, 2, 256, /*read_only=*/false);
  auto created = rig.fs->Create(kRootIno, std::string(kHintFileName), 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created) << created.error().ToString();
  EXPECT_EQ(created->first.ino, kHintIno);
  SetAttrRequest trunc;
  trunc.size = 0;
  EXPECT_TRUE(rig.fs->SetAttr(kHintIno, trunc));
  std::string line = Name(1) + "\n";
  EXPECT_TRUE(rig.fs->Write(created->second.handle, 0, line.data(), line.size()));
  EXPECT_TRUE(rig.fs->Fsync(created->second.handle));
  EXPECT_TRUE(rig.fs->Release(created->second.handle));
  EXPECT_EQ(rig.driver->Stats().hints_accepted, 1u);
  EXPECT_FALSE(rig.fs->Unlink(kRootIno, std::string(kHintFileName)));
  EXPECT_FALSE(rig.fs->Rename(kRootIno, std::string(kHintFileName), kRootIno, "x", 0));
  EXPECT_FALSE(rig.remote.Exists(std::string(kHintFileName)));
  EXPECT_EQ(rig.remote.writes.load(), 0);
  // Only at the root: a file of that name deeper down is an ordinary (hub) file.
  auto train = rig.meta->Resolve("train");
  ASSERT_TRUE(train);
  EXPECT_FALSE(rig.fs->Lookup(train->ino, std::string(kHintFileName)));
}

TEST(CacheListenerFanout, RoutesVerdictsByVolume) {
  struct Counting : CacheListener {
    int used = 0, wasted = 0;
    void OnPrefetchUsed(const BlockKey&, ExpertId) override { ++used; }
    void OnPrefetchWasted(const BlockKey&, ExpertId) override { ++wasted; }
  } a, b;
  CacheListenerFanout fan;
  fan.Add(1, &a);
  fan.Add(2, &b);
  fan.OnPrefetchUsed(BlockKey{1, 5, 1, 0}, 3);
  fan.OnPrefetchWasted(BlockKey{2, 5, 1, 0}, 3);
  fan.OnPrefetchWasted(BlockKey{3, 5, 1, 0}, 3);  // no such volume: dropped
  fan.Remove(1, &a);
  fan.OnPrefetchUsed(BlockKey{1, 5, 1, 0}, 3);
  EXPECT_EQ(a.used, 1);
  EXPECT_EQ(b.wasted, 1);
  EXPECT_EQ(b.used, 0);
}

// The metadata cache's entries are accounted in the agent's memory budget (an estimate per
// entry), also when prefetch is off, and given back when the volume goes.
TEST(PrefetchDriverMemory, MetadataEntriesAreAccountedInTheBudget) {
  FakeRemoteFs remote;
  for (int i = 0; i < 50; ++i) remote.PutFile(Name(i), "x");
  FakeBlockCache cache(kBlock);
  metrics::Registry registry;
  ManualClock clock;
  MemoryBudget::Config mc;
  mc.total_bytes = 64 << 20;
  MemoryBudget budget(mc);
  MetadataCache meta(remote, MetadataCache::Config{}, clock);
  ASSERT_TRUE(meta.Init());
  meta.StartWalk();
  ASSERT_TRUE(meta.WaitWalk(10s));
  BlockFetcher::Config fc;
  fc.block_size = kBlock;
  fc.memory = &budget;
  BlockFetcher fetcher(remote, &cache, VolumeKey("vol"), fc, registry, metrics::Labels{});
  for (PrefetchMode mode : {PrefetchMode::kOff, PrefetchMode::kAuto}) {
    PrefetchDriver::Config pc;
    pc.volume_id = "vol";
    pc.mode = mode;
    pc.read_ahead_max_bytes = 8 * kBlock;
    pc.tick_interval = 0ms;
    pc.memory = &budget;
    {
      PrefetchDriver driver(pc, fetcher, clock, &meta, &registry);
      driver.UpdateMetrics();
      EXPECT_GE(meta.entries(), 52u);  // root, train/, 50 files
      EXPECT_EQ(budget.used(MemoryBudget::Use::kMetadata),
                meta.entries() * PrefetchDriver::kMetadataEntryBytes)
          << ToString(mode);
    }
    EXPECT_EQ(budget.used(MemoryBudget::Use::kMetadata), 0u) << ToString(mode);
  }
}

// A scratch volume: a job creates, reads and removes files with unique names (temp files,
// checkpoints). Files removed through the mount leave the access tracker, so it stays flat.
TEST(PrefetchDriver, RemovedFilesLeaveTheTracker) {
  Rig rig(PrefetchMode::kAuto, 8, /*space_budget_blocks=*/256, /*read_only=*/false);
  rig.Settle(1);
  const uint64_t walked = rig.driver->Stats().tracked_files;
  EXPECT_EQ(walked, 8u);
  const auto cycle = [&](int i, bool rename) {
    const std::string name = "tmp" + std::to_string(i);
    auto created = rig.fs->Create(kRootIno, name, 0644, O_RDWR | O_CREAT);
    ASSERT_TRUE(created) << name;
    const std::string data(kBlock, 'x');
    ASSERT_TRUE(rig.fs->Write(created->second.handle, 0, data.data(), data.size()));
    ASSERT_TRUE(rig.fs->Release(created->second.handle));
    auto again = rig.fs->Open(created->first.ino, O_RDONLY);  // the prefetcher sees the open
    ASSERT_TRUE(again) << name;
    ASSERT_TRUE(rig.fs->Release(again->handle));
    if (rename) {
      // Written under a temporary name, then renamed over the last checkpoint.
      ASSERT_TRUE(rig.fs->Rename(kRootIno, name, kRootIno, "ckpt", 0, Credentials{}));
      auto ckpt = rig.fs->Lookup(kRootIno, "ckpt");
      ASSERT_TRUE(ckpt);
      auto read = rig.fs->Open(ckpt->ino, O_RDONLY);
      ASSERT_TRUE(read);
      ASSERT_TRUE(rig.fs->Release(read->handle));
    } else {
      ASSERT_TRUE(rig.fs->Unlink(kRootIno, name, Credentials{}));
    }
  };
  for (int i = 0; i < 300; ++i) cycle(i, i % 3 == 0);
  const PrefetchStats s = rig.driver->Stats();
  EXPECT_EQ(s.tracked_files, walked + 1);  // and ckpt
  EXPECT_LE(s.tracker_slots, walked + 4);
  // Walked files read after the churn are still known and still prefetched from.
  EXPECT_EQ(rig.ReadAll(Name(0)), std::string(2 * kBlock, 'a'));
}

// A ttl volume whose files other clients replace (rotating shards): files removed on the hub
// leave the access tracker once a relisting or a lookup finds them gone, at the next tick,
// so it follows the live files instead of growing with every file ever opened.
TEST(PrefetchDriver, FilesRemovedOnTheHubLeaveTheTracker) {
  Rig rig(PrefetchMode::kAuto, 12, /*space_budget_blocks=*/256, /*read_only=*/true, "",
          Consistency::kTtl);
  rig.Settle(1);
  EXPECT_EQ(rig.driver->Stats().tracked_files, 12u);
  // Files written by another client after the walk: only opened, never walked.
  rig.remote.PutFile("train/late0", std::string(kBlock, 'x'));
  rig.remote.PutFile("train/late1", std::string(kBlock, 'y'));
  rig.clock.Advance(std::chrono::seconds(kTtlSeconds + 1));
  EXPECT_EQ(rig.ReadAll("train/late0"), std::string(kBlock, 'x'));
  EXPECT_EQ(rig.ReadAll("train/late1"), std::string(kBlock, 'y'));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rig.ReadAll(Name(i)), std::string(2 * kBlock, 'a' + i));
  rig.Settle(1);
  EXPECT_EQ(rig.driver->Stats().tracked_files, 14u);

  // Another client removes six of them (walked and read, walked only, opened only).
  for (const std::string& p : {Name(0), Name(1), Name(5), Name(11), std::string("train/late0"),
                               std::string("train/late1")}) {
    ASSERT_TRUE(rig.remote.Unlink(p)) << p;
  }
  rig.clock.Advance(std::chrono::seconds(kTtlSeconds + 1));
  auto train = rig.fs->Lookup(kRootIno, "train");
  ASSERT_TRUE(train);
  EXPECT_FALSE(rig.fs->Lookup(train->ino, "f000"));  // a lookup finds it gone
  auto listing = rig.fs->ReadDir(train->ino);        // the relisting finds the rest
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->size(), 8u);
  EXPECT_EQ(rig.driver->Stats().tracked_files, 14u);  // until the driver's tick
  rig.driver->Tick();
  const PrefetchStats s = rig.driver->Stats();
  EXPECT_EQ(s.tracked_files, 8u);
  // The files still there are still known and read.
  EXPECT_EQ(rig.ReadAll(Name(2)), std::string(2 * kBlock, 'c'));
  rig.Settle(1);
  EXPECT_EQ(rig.driver->Stats().tracked_files, 8u);
  // A new file in a freed slot: the tracker's slots stay at the peak.
  rig.remote.PutFile("train/late2", std::string(kBlock, 'z'));
  rig.clock.Advance(std::chrono::seconds(kTtlSeconds + 1));
  EXPECT_EQ(rig.ReadAll("train/late2"), std::string(kBlock, 'z'));
  EXPECT_EQ(rig.driver->Stats().tracked_files, 9u);
  EXPECT_EQ(rig.driver->Stats().tracker_slots, s.tracker_slots);
}

}  // namespace
}  // namespace spoke::agent
