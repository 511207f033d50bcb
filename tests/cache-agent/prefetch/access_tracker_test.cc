#include "cache-agent/prefetch/access_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

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
    replay.Predict(8 << 20, 1 << 20, &out);
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

}  // namespace
}  // namespace spoke::agent
