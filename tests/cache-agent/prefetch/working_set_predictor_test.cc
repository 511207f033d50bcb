// EpochWorkingSetPredictor ranks what it proposes by how much of the epoch is left: a
// shuffled loader reaches an unread file anywhere in the rest of the epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cache-agent/prefetch/access_tracker.h"
#include "cache-agent/prefetch/epoch_working_set_predictor.h"

namespace spoke::agent {
namespace {

constexpr uint32_t kBlock = 1 << 20;

class NothingCached : public BlockPresence {
 public:
  bool Present(const TrackedFile&, uint64_t) const override { return false; }
};

TEST(EpochWorkingSetPredictor, TreeArrivingAfterTheFirstPredictionIsRankedByTheEpoch) {
  AccessTracker::Config config;
  config.block_size = kBlock;
  AccessTracker tracker(config);
  NothingCached presence;
  EpochWorkingSetPredictor expert(tracker, presence);

  // The first prediction comes before the metadata walk has fed the tree.
  std::vector<PrefetchRequest> out;
  expert.Predict(64ull * kBlock, kBlock, &out);
  EXPECT_TRUE(out.empty());

  for (int i = 0; i < 1000; ++i) {
    tracker.AddTreeFile("train/" + std::to_string(i), 100 + i, 1, 200 * 1024);
  }
  expert.Predict(64ull * kBlock, kBlock, &out);
  ASSERT_FALSE(out.empty());
  // 1000 one-block files remain: an unread one is expected halfway through them, not next.
  for (const PrefetchRequest& r : out) EXPECT_GE(r.predicted_use, 400.0) << r.path;
}

// The budget is bytes of the files' own blocks: files of 100 KB fill 1 MiB ten at a time. In
// whole blocks a pass proposed one such file per MiB, and a cold fill of small files through
// the mount alone carried a third of what the warm-up did (bench/cold-fill, auto-fill).
TEST(EpochWorkingSetPredictor, TheBudgetCountsEachBlocksOwnBytes) {
  AccessTracker::Config config;
  config.block_size = kBlock;
  AccessTracker tracker(config);
  NothingCached presence;
  EpochWorkingSetPredictor expert(tracker, presence);
  constexpr uint64_t kSmall = 100 << 10;
  for (int i = 0; i < 100; ++i) tracker.AddTreeFile("s/" + std::to_string(i), 1 + i, 1, kSmall);
  tracker.AddTreeFile("big", 1000, 1, 4ull * kBlock);

  std::vector<PrefetchRequest> out;
  expert.Predict(kBlock, kBlock, &out);
  uint64_t bytes = 0;
  for (const PrefetchRequest& r : out)
    bytes += r.block_count * std::min<uint64_t>(kBlock, r.file_size);
  EXPECT_EQ(out.size(), 11u);  // ten fit, the eleventh passes the budget
  EXPECT_EQ(bytes, 11 * kSmall);

  // Whole blocks count whole: 2 MiB of a large file's blocks is two of them.
  AccessTracker big_only(config);
  EpochWorkingSetPredictor big_expert(big_only, presence);
  big_only.AddTreeFile("big", 1000, 1, 4ull * kBlock);
  out.clear();
  big_expert.Predict(2 * kBlock, kBlock, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].block_count, 2u);
}

}  // namespace
}  // namespace spoke::agent
