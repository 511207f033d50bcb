// Experts after the tracker forgets files: the positions they keep in the tracker's orders
// and listings follow the removal, and a forgotten file's slot reused by a new file is not
// taken for the old one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cache-agent/prefetch/access_tracker.h"
#include "cache-agent/prefetch/directory_order_predictor.h"
#include "cache-agent/prefetch/epoch_replay_predictor.h"
#include "cache-agent/prefetch/epoch_working_set_predictor.h"

namespace spoke::agent {
namespace {

constexpr uint32_t kBlock = 1 << 20;
constexpr int kFiles = 200;

class NothingPresent final : public BlockPresence {
 public:
  bool Present(const TrackedFile&, uint64_t) const override { return false; }
};

std::string Path(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "d/f%04d", i);
  return buf;
}

struct Rig {
  Rig() : t(Config()) {}
  static AccessTracker::Config Config() {
    AccessTracker::Config c;
    c.block_size = kBlock;
    return c;
  }
  void Walk() {
    for (int i = 0; i < kFiles; ++i) t.AddTreeFile(Path(i), 1 + i, 1, kBlock);
  }
  void Open(const std::string& path, TrackerExpert& x) {
    OpenEvent e;
    e.handle = ++handle;
    e.path = path;
    e.file_id = 1000 + handle;
    e.version = 1;
    e.size = kBlock;
    t.OnOpen(e);
    x.OnOpen(e);
    t.OnClose(CloseEvent{e.handle, {}});
  }
  // As PrefetchScheduler::ForgetFile: the experts hear first, then the tracker forgets.
  void Forget(const std::string& path, TrackerExpert& x) {
    const auto f = t.Find(path);
    ASSERT_TRUE(f) << path;
    x.OnForget(*f);
    t.Forget(*f);
  }
  std::vector<std::string> Predict(TrackerExpert& x) {
    std::vector<PrefetchRequest> out;
    x.Predict(8ull * kBlock, kBlock, &out);
    std::vector<std::string> paths;
    for (const PrefetchRequest& r : out) paths.push_back(r.path);
    return paths;
  }

  AccessTracker t;
  NothingPresent presence;
  uint64_t handle = 0;
};

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(TrackerForget, ReplayFollowsTheOrderAcrossForgottenAndReusedSlots) {
  Rig rig;
  EpochReplayPredictor x(rig.t, rig.presence);
  for (int i = 0; i < kFiles; ++i) rig.Open(Path(i), x);
  for (int i = 0; i < 100; ++i) rig.Open(Path(i), x);  // epoch 1 replays epoch 0
  ASSERT_EQ(rig.t.epoch(), 1u);
  ASSERT_EQ(rig.Predict(x).front(), Path(100));
  // A file behind the cursor and one ahead of it leave the volume.
  rig.Forget(Path(50), x);
  rig.Forget(Path(102), x);
  auto p = rig.Predict(x);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), Path(100));
  EXPECT_FALSE(Has(p, Path(102)));
  // A new file takes a forgotten slot: it was not in the last epoch, the run goes on.
  rig.Open("scratch/new", x);
  EXPECT_EQ(rig.t.file_count(), static_cast<size_t>(kFiles));
  p = rig.Predict(x);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), Path(100));
  for (int i = 100; i < 110; ++i) {
    if (i != 102) rig.Open(Path(i), x);
  }
  p = rig.Predict(x);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), Path(110));
  EXPECT_FALSE(Has(p, "scratch/new"));
}

TEST(TrackerForget, DirectoryOrderSkipsForgottenFiles) {
  Rig rig;
  rig.Walk();
  DirectoryOrderPredictor x(rig.t, rig.presence);
  for (int i = 0; i < 10; ++i) rig.Open(Path(i), x);
  ASSERT_EQ(rig.Predict(x).front(), Path(10));
  rig.Forget(Path(5), x);
  rig.Forget(Path(12), x);
  rig.Forget(Path(9), x);  // the cursor's own file
  auto p = rig.Predict(x);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), Path(10));
  EXPECT_FALSE(Has(p, Path(12)));
  // The run continues: more files ahead once 10 and 11 are opened in order.
  rig.Open(Path(10), x);
  rig.Open(Path(11), x);
  p = rig.Predict(x);
  ASSERT_GE(p.size(), 2u);
  EXPECT_EQ(p[0], Path(13));
  EXPECT_EQ(p[1], Path(14));
  // A reused slot lands in its own directory's listing, not in d/.
  rig.Open("e/new", x);
  EXPECT_EQ(rig.t.Directory("d").size(), static_cast<size_t>(kFiles - 3));
  EXPECT_EQ(rig.t.Directory("e").size(), 1u);
}

TEST(TrackerForget, WorkingSetCursorFollowsForgottenFiles) {
  Rig rig;
  rig.Walk();
  EpochWorkingSetPredictor x(rig.t, rig.presence);
  for (int i = 0; i < 50; ++i) rig.Open(Path(i), x);
  ASSERT_EQ(rig.Predict(x).front(), Path(50));
  rig.Forget(Path(10), x);
  rig.Forget(Path(60), x);
  auto p = rig.Predict(x);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), Path(50));
  EXPECT_FALSE(Has(p, Path(60)));
  // A new file reusing a slot is not in the walked tree: not a working-set candidate.
  rig.Open("scratch/new", x);
  EXPECT_EQ(rig.t.tree_order().size(), static_cast<size_t>(kFiles - 2));
  // The first epoch ends when the rest of the (smaller) tree has been read.
  for (int i = 50; i < kFiles; ++i) {
    if (i != 60) rig.Open(Path(i), x);
  }
  rig.Open(Path(0), x);
  EXPECT_EQ(rig.t.epoch(), 1u);
}

}  // namespace
}  // namespace spoke::agent
