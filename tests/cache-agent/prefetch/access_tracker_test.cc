#include "cache-agent/prefetch/access_tracker.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache-agent/prefetch/epoch_replay_predictor.h"

namespace spoke::agent {
namespace {

class NothingPresent final : public BlockPresence {
 public:
  bool Present(const TrackedFile&, uint64_t) const override { return false; }
};

constexpr int kFiles = 200;

OpenEvent Open(uint64_t handle, int i) {
  OpenEvent e;
  e.handle = handle;
  e.path = "d/f" + std::to_string(1000 + i);
  e.file_id = 1 + i;
  e.version = 1;
  e.size = 100 << 10;
  return e;
}

TEST(AccessTracker, FixedOrderEpochsStartAtTheFirstReopen) {
  AccessTracker t(AccessTracker::Config{});
  uint64_t h = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int i = 0; i < kFiles; ++i) {
      t.OnOpen(Open(++h, i));
      EXPECT_EQ(t.epoch(), static_cast<uint64_t>(epoch)) << "file " << i;
    }
  }
  EXPECT_EQ(t.previous_order().size(), static_cast<size_t>(kFiles));
}

TEST(AccessTracker, ShuffledEpochsWithoutTreeAreDetectedAndCarryReopens) {
  AccessTracker t(AccessTracker::Config{});
  std::mt19937_64 rng(7);
  std::vector<int> order(kFiles);
  std::iota(order.begin(), order.end(), 0);
  uint64_t h = 0;
  for (int epoch = 0; epoch < 4; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) t.OnOpen(Open(++h, i));
  }
  EXPECT_EQ(t.epoch(), 3u);
  // The current epoch holds (nearly) all files: boundaries were found within a few opens.
  EXPECT_GE(t.current_order().size(), static_cast<size_t>(kFiles) - 8);
  EXPECT_GE(t.previous_order().size(), static_cast<size_t>(kFiles) - 8);
}

TEST(AccessTracker, ExhaustedTreeEndsTheEpochAtOnce) {
  AccessTracker t(AccessTracker::Config{});
  for (int i = 0; i < 10; ++i) t.AddTreeFile("d/f" + std::to_string(1000 + i), 1 + i, 1, 1);
  uint64_t h = 0;
  for (int i = 0; i < 10; ++i) t.OnOpen(Open(++h, i));
  t.OnOpen(Open(++h, 9));  // the last file again, right away: the tree was exhausted
  EXPECT_EQ(t.epoch(), 1u);
}

TEST(AccessTracker, ShortReopensDoNotEndTheEpoch) {
  AccessTracker t(AccessTracker::Config{});
  uint64_t h = 0;
  for (int i = 0; i < 50; ++i) {
    t.OnOpen(Open(++h, i));
    t.OnOpen(Open(++h, i));  // a loader that opens each file twice
  }
  EXPECT_EQ(t.epoch(), 0u);
}

// Fixed-order replay: from the 2nd epoch on, >= 95 % of what EpochReplayPredictor proposes
// is opened within the next 64 opens.
TEST(EpochReplayPredictor, FixedOrderPrecisionFromTheSecondEpoch) {
  AccessTracker::Config tc;
  tc.block_size = 1 << 20;
  AccessTracker t(tc);
  NothingPresent none;
  EpochReplayPredictor replay(t, none);
  std::mt19937_64 rng(3);
  std::vector<int> order(kFiles);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  // Four workers interleave the fixed order with some jitter.
  std::vector<int> opens;
  for (int epoch = 0; epoch < 4; ++epoch) {
    std::vector<int> e = order;
    for (size_t i = 0; i + 3 < e.size(); i += 4)
      std::shuffle(e.begin() + i, e.begin() + i + 4, rng);
    opens.insert(opens.end(), e.begin(), e.end());
  }
  uint64_t proposed = 0, right = 0;
  for (size_t k = 0; k < opens.size(); ++k) {
    const OpenEvent e = Open(k + 1, opens[k]);
    t.OnOpen(e);
    replay.OnOpen(e);
    if (k < static_cast<size_t>(kFiles)) continue;  // epoch 1: no history
    std::vector<PrefetchRequest> out;
    replay.Predict(8 * (100 << 10), 1 << 20, &out);  // eight files' bytes
    for (const auto& r : out) {
      ++proposed;
      const int file = static_cast<int>(r.file_id) - 1;
      const auto end = opens.begin() + std::min(opens.size(), k + 1 + 64);
      right += std::find(opens.begin() + k + 1, end, file) != end;
    }
  }
  ASSERT_GT(proposed, static_cast<uint64_t>(kFiles));
  EXPECT_GE(static_cast<double>(right) / proposed, 0.95) << right << "/" << proposed;
}

// The walk feeds every file of the volume: on a 1 M-file tree the tracker's copy sat beside the
// metadata cache's (issue 14's goal: <= 300 B per cached inode, both together). Paths shaped
// like bench/scale's (a 20-byte path, 1000 files per directory). Before the compact form
// (path and directory strings per file, a map by path, a second epoch mark): 308 B here.
TEST(AccessTracker, HeapPerWalkedFileIsBounded) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer's allocator does not report heap use (mallinfo2)";
#endif
  constexpr int kWalked = 100000;
  std::vector<std::string> paths;
  paths.reserve(kWalked);
  for (int i = 0; i < kWalked; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "tree/d%05d/f%07d", i / 1000, i);
    paths.emplace_back(path);
  }
  // Large arrays are mmapped chunks, which uordblks leaves out.
  const auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  malloc_trim(0);
  const size_t before = heap();
  {
    AccessTracker t(AccessTracker::Config{});
    for (int i = 0; i < kWalked; ++i) t.AddTreeFile(paths[i], 10 + i, 1, 4096);
    const size_t per_file = (heap() - before) / kWalked;
    std::printf("[ memory   ] %zu heap bytes per walked file\n", per_file);
    EXPECT_LE(per_file, 110u);
    // Everything stays reachable by path, and directories keep their files by name.
    EXPECT_EQ(t.Find("tree/d00042/f0042017"), FileIndex{42017});
    EXPECT_EQ(t.Directory("tree/d00042").size(), 1000u);
  }
}

// A scratch volume: unique files are created, opened and removed, 100k of them, in cycles
// of 100 among walked files read epoch after epoch. Forgotten files leave the tracker: its
// slots, name arena and heap stay flat, and the walked files keep their epochs.
TEST(AccessTracker, ForgottenFilesLeaveTheTrackerFlat) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer's allocator does not report heap use (mallinfo2)";
#endif
  const auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  AccessTracker t(AccessTracker::Config{});
  for (int i = 0; i < kFiles; ++i) t.AddTreeFile(Open(0, i).path, 1 + i, 1, 100 << 10);
  uint64_t h = 0;
  int walked = 0;  // next walked file to read: the epoch goes on between scratch cycles
  constexpr int kCycle = 100;
  constexpr int kScratch = 100000;
  size_t slots_after_warmup = 0, heap_after_warmup = 0, names_after_warmup = 0;
  for (int c = 0; c < kScratch / kCycle; ++c) {
    for (int k = 0; k < kCycle; ++k) {
      const int i = c * kCycle + k;
      OpenEvent e;
      e.handle = ++h;
      e.path = "scratch/job-" + std::to_string(i) + ".tmp";
      e.file_id = 1000000 + i;
      e.version = 1;
      e.size = 4096;
      t.OnOpen(e);
      t.OnRead(ReadEvent{e.handle, e.path, e.file_id, 1, 4096, 0, 4096, false, {}});
      t.OnClose(CloseEvent{e.handle, {}});
      t.OnOpen(Open(++h, walked));
      t.OnClose(CloseEvent{h, {}});
      walked = (walked + 1) % kFiles;
    }
    for (int k = 0; k < kCycle; ++k) {
      EXPECT_TRUE(t.Forget("scratch/job-" + std::to_string(c * kCycle + k) + ".tmp"));
    }
    ASSERT_EQ(t.live_file_count(), static_cast<size_t>(kFiles));
    if (c == 9) {
      slots_after_warmup = t.file_count();
      names_after_warmup = t.name_bytes();
      heap_after_warmup = heap();
    }
  }
  EXPECT_EQ(t.file_count(), slots_after_warmup);
  EXPECT_LE(t.file_count(), static_cast<size_t>(kFiles + kCycle));
  EXPECT_LE(t.name_bytes(), 2 * names_after_warmup);
  const size_t grown = heap() > heap_after_warmup ? heap() - heap_after_warmup : 0;
  std::printf("[ memory   ] heap grew %zu bytes over %d forgotten files\n", grown, kScratch);
  EXPECT_LE(grown, 64u << 10);
  // Forgotten paths are gone, walked ones are found, and the walked files still make epochs
  // (100k + reads of 200 files: 500 epochs).
  EXPECT_FALSE(t.Find("scratch/job-5.tmp"));
  EXPECT_FALSE(t.Forget("scratch/job-5.tmp"));
  EXPECT_TRUE(t.Find(Open(0, 7).path));
  EXPECT_EQ(t.Directory("scratch").size(), 0u);
  EXPECT_EQ(t.Directory("d").size(), static_cast<size_t>(kFiles));
  EXPECT_EQ(t.tree_order().size(), static_cast<size_t>(kFiles));
  EXPECT_GE(t.epoch(), 490u);
  EXPECT_LE(t.current_order().size(), static_cast<size_t>(kFiles));
  EXPECT_LE(t.previous_order().size(), static_cast<size_t>(kFiles));
}

// Paths are kept exactly (the expert's requests carry them), including a root file, a file
// opened before the walk names it, and a re-add that only updates attributes.
TEST(AccessTracker, KeepsPathsDirectoriesAndPositions) {
  AccessTracker t(AccessTracker::Config{});
  OpenEvent e;
  e.handle = 1;
  e.path = "a/b/z";
  e.file_id = 7;
  e.version = 1;
  e.size = 10;
  t.OnOpen(e);
  const FileIndex top = t.AddTreeFile("top", 1, 1, 5);
  const FileIndex y = t.AddTreeFile("a/b/y", 2, 1, 5);
  const FileIndex z = t.AddTreeFile("a/b/z", 7, 2, 20);
  EXPECT_EQ(z, FileIndex{0});
  EXPECT_EQ(t.file_count(), 3u);
  EXPECT_EQ(t.Path(top), "top");
  EXPECT_EQ(t.Path(z), "a/b/z");
  EXPECT_EQ(t.file(z).version, 2u);
  EXPECT_EQ(t.file(z).size, 20u);
  EXPECT_EQ(t.tree_order(), (std::vector<FileIndex>{top, y, z}));
  EXPECT_EQ(t.Directory("a/b"), (std::vector<FileIndex>{y, z}));
  EXPECT_EQ(t.Directory(""), (std::vector<FileIndex>{top}));
  EXPECT_TRUE(t.Directory("a").empty());
  EXPECT_EQ(t.PositionInDirectory(y), 0u);
  EXPECT_EQ(t.PositionInDirectory(z), 1u);
  EXPECT_EQ(t.DirectoryOf(y), t.DirectoryOf(z));
  EXPECT_NE(t.DirectoryOf(y), t.DirectoryOf(top));
  EXPECT_FALSE(t.Find("a/b"));
  EXPECT_FALSE(t.Find("a/b/"));
  EXPECT_FALSE(t.Find("b/z"));
  EXPECT_FALSE(t.Find("z"));
  EXPECT_EQ(t.Find("top"), top);
}

}  // namespace
}  // namespace spoke::agent
