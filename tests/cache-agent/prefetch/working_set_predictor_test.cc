// EpochWorkingSetPredictor ranks what it proposes by how much of the epoch is left: a
// shuffled loader reaches an unread file anywhere in the rest of the epoch.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace spoke::agent
