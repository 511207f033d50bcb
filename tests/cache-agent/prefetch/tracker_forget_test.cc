// Experts after the tracker forgets files: the positions they keep in the tracker's orders
// and listings follow the removal, and a forgotten file's slot reused by a new file is not
// taken for the old one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
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

// --- ForgetMany: one pass for many files, the same end state as Forget one at a time ---

// A random volume history, replayed identically on several trackers (and their experts):
// a walk over a few directories in a scrambled order (unsorted listings), files only ever
// opened, shuffled epochs with re-opens, reads, and some handles left open (streams).
class History {
 public:
  explicit History(uint32_t seed) : rng_(seed) {
    const int dirs = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < 120; ++i) {
      paths_.push_back("d" + std::to_string(rng_() % dirs) + "/f" + std::to_string(rng_() % 400));
    }
    for (int i = 0; i < 30; ++i) extra_.push_back("o/x" + std::to_string(i));
  }
  const std::vector<std::string>& walked() const { return paths_; }
  // Every path the history may name.
  std::vector<std::string> All() const {
    std::vector<std::string> all = paths_;
    all.insert(all.end(), extra_.begin(), extra_.end());
    all.push_back("new/n");
    return all;
  }
  struct Op {
    enum Kind { kOpen, kRead, kClose } kind;
    std::string path;
    uint64_t handle;
    uint64_t offset;
  };
  // `n` events; file ids follow the path so that replays agree.
  std::vector<Op> Events(int n) {
    std::vector<Op> ops;
    std::vector<std::string> pool = paths_;
    pool.insert(pool.end(), extra_.begin(), extra_.end());
    pool.push_back("new/n");
    std::vector<uint64_t> open;
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng_() % 10;
      if (r < 6 || open.empty()) {
        // Mostly an epoch-like sweep (a shuffled pass over the pool), sometimes a re-open.
        if (sweep_.empty()) {
          sweep_ = pool;
          std::shuffle(sweep_.begin(), sweep_.end(), rng_);
        }
        std::string path = sweep_.back();
        if (rng_() % 8 != 0) sweep_.pop_back();
        ops.push_back(Op{Op::kOpen, path, ++handle_, 0});
        open.push_back(handle_);
      } else if (r < 8) {
        ops.push_back(Op{Op::kRead, "", open[rng_() % open.size()], (rng_() % 4) * kBlock});
      } else {
        const size_t k = rng_() % open.size();
        ops.push_back(Op{Op::kClose, "", open[k], 0});
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    return ops;
  }
  // A random subset of what the tracker knows (some named twice, some unknown).
  std::vector<std::string> Doomed(double share) {
    std::vector<std::string> all = All();
    std::vector<std::string> out;
    for (const std::string& p : all) {
      if (std::uniform_real_distribution<double>(0, 1)(rng_) < share) out.push_back(p);
    }
    std::shuffle(out.begin(), out.end(), rng_);
    if (!out.empty()) out.push_back(out.front());
    return out;
  }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  std::vector<std::string> paths_;
  std::vector<std::string> extra_;
  std::vector<std::string> sweep_;
  uint64_t handle_ = 0;
};

uint64_t IdOf(const std::string& path) { return std::hash<std::string>{}(path) | 1; }

void Apply(AccessTracker& t, const std::vector<History::Op>& ops,
           std::vector<TrackerExpert*> experts = {}) {
  for (const History::Op& op : ops) {
    switch (op.kind) {
      case History::Op::kOpen: {
        OpenEvent e;
        e.handle = op.handle;
        e.path = op.path;
        e.file_id = IdOf(op.path);
        e.version = 1;
        e.size = 3 * kBlock;
        t.OnOpen(e);
        for (TrackerExpert* x : experts) x->OnOpen(e);
        break;
      }
      case History::Op::kRead: {
        ReadEvent e;
        e.handle = op.handle;
        e.offset = op.offset;
        e.length = kBlock;
        t.OnRead(e);
        for (TrackerExpert* x : experts) x->OnRead(e);
        break;
      }
      case History::Op::kClose:
        t.OnClose(CloseEvent{op.handle, {}});
        for (TrackerExpert* x : experts) x->OnClose(CloseEvent{op.handle, {}});
        break;
    }
  }
}

// Everything the tracker shows, as text (FileIndex values included: slots must agree too).
std::string Dump(const AccessTracker& t, const History& h, uint64_t handles) {
  std::string out;
  const auto list = [&](const char* what, const std::vector<FileIndex>& v) {
    out += what;
    for (FileIndex f : v) out += " " + std::to_string(f) + ":" + t.Path(f);
    out += "\n";
  };
  out += "slots " + std::to_string(t.file_count()) + " live " +
         std::to_string(t.live_file_count()) + " epoch " + std::to_string(t.epoch()) + " opens " +
         std::to_string(t.opens()) + " blocks " + std::to_string(t.blocks_read()) + " last " +
         (t.last_opened() ? std::to_string(*t.last_opened()) : "-") + "\n";
  list("tree", t.tree_order());
  list("current", t.current_order());
  list("previous", t.previous_order());
  std::vector<std::string> dirs;
  for (const std::string& p : h.All()) {
    dirs.push_back(p.substr(0, p.find('/')));
    const auto f = t.Find(p);
    out += p + " -> ";
    if (!f) {
      out += "none\n";
      continue;
    }
    const TrackedFile& tf = t.file(*f);
    out += std::to_string(*f) + " id " + std::to_string(tf.file_id) + " in_tree " +
           std::to_string(tf.in_tree) + " pos " + std::to_string(t.PositionInDirectory(*f)) +
           " this " + std::to_string(t.ReadThisEpoch(*f)) + " last " +
           std::to_string(t.ReadLastEpoch(*f)) + " path " + t.Path(*f) + "\n";
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  for (const std::string& d : dirs) list(("dir " + d).c_str(), t.Directory(d));
  for (uint64_t handle = 1; handle <= handles; ++handle) {
    if (const ReadStream* s = t.stream(handle)) {
      out += "stream " + std::to_string(handle) + " file " + std::to_string(s->file) + " next " +
             std::to_string(s->next_offset) + " run " + std::to_string(s->sequential_run) + "\n";
    }
  }
  return out;
}

TEST(TrackerForgetMany, SameStateAsForgettingOneAtATime) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    History h(seed);
    const auto before = h.Events(static_cast<int>(100 + h.rng()() % 600));
    const double share = (1 + h.rng()() % 9) / 10.0;
    const auto doomed = h.Doomed(share);
    const auto after = h.Events(300);
    AccessTracker one(Rig::Config());
    AccessTracker many(Rig::Config());
    for (AccessTracker* t : {&one, &many}) {
      // The walk arrives in pieces, between opens (as the driver feeds it).
      size_t w = 0;
      for (size_t i = 0; i < before.size(); ++i) {
        if (i % 20 == 0 && w < h.walked().size()) {
          for (size_t k = 0; k < 30 && w < h.walked().size(); ++k, ++w) {
            t->AddTreeFile(h.walked()[w], IdOf(h.walked()[w]), 1, 2 * kBlock);
          }
        }
        Apply(*t, {before[i]});
      }
      for (; w < h.walked().size(); ++w) {
        t->AddTreeFile(h.walked()[w], IdOf(h.walked()[w]), 1, 2 * kBlock);
      }
    }
    const uint64_t handles = 2000;
    // Dump sorts the listings (PositionInDirectory): half the seeds forget from unsorted ones.
    if (seed % 2 == 0) {
      ASSERT_EQ(Dump(one, h, handles), Dump(many, h, handles));
    }
    std::vector<FileIndex> batch;
    for (const std::string& p : doomed) {
      one.Forget(p);
      if (const auto f = many.Find(p)) batch.push_back(*f);
    }
    many.ForgetMany(batch);
    EXPECT_LT(many.live_file_count(), many.file_count());
    ASSERT_EQ(Dump(one, h, handles), Dump(many, h, handles));
    // And they stay alike: the epoch rules (reference counts, re-open positions) and the
    // reuse of the freed slots.
    Apply(one, after);
    Apply(many, after);
    EXPECT_EQ(Dump(one, h, handles), Dump(many, h, handles));
  }
}

// The experts' batch hook (TrackerExpert::OnForgetMany) leaves each expert predicting what
// it predicts after OnForget + Forget one file at a time.
TEST(TrackerForgetMany, ExpertsPredictAsAfterForgettingOneAtATime) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    History h(seed);
    // Epochs over the walked tree in walk order (replay and directory experts follow it),
    // then a partial one, so that the cursors sit mid-order.
    std::vector<History::Op> before;
    uint64_t handle = 0;
    const int epochs = 1 + static_cast<int>(h.rng()() % 3);
    const size_t partial = h.rng()() % h.walked().size();
    for (int e = 0; e <= epochs; ++e) {
      const size_t n = e == epochs ? partial : h.walked().size();
      for (size_t i = 0; i < n; ++i) {
        before.push_back({History::Op::kOpen, h.walked()[i], ++handle, 0});
        before.push_back({History::Op::kClose, "", handle, 0});
      }
    }
    const auto doomed = h.Doomed((1 + h.rng()() % 9) / 10.0);
    struct Side {
      AccessTracker t{Rig::Config()};
      NothingPresent presence;
      EpochReplayPredictor replay{t, presence};
      DirectoryOrderPredictor directory{t, presence};
      EpochWorkingSetPredictor working_set{t, presence};
      std::vector<TrackerExpert*> experts() { return {&replay, &directory, &working_set}; }
      std::vector<std::string> Predict(TrackerExpert& x) {
        std::vector<PrefetchRequest> out;
        x.Predict(64ull * kBlock, kBlock, &out);
        std::vector<std::string> paths;
        for (const PrefetchRequest& r : out) {
          paths.push_back(r.path + "@" + std::to_string(r.first_block) + "+" +
                          std::to_string(r.block_count) + "~" + std::to_string(r.predicted_use));
        }
        return paths;
      }
    };
    Side one, many;
    for (Side* s : {&one, &many}) {
      for (const std::string& p : h.walked()) s->t.AddTreeFile(p, IdOf(p), 1, 2 * kBlock);
      // A first prediction fixes each expert's epoch state before the forgetting.
      for (TrackerExpert* x : s->experts()) s->Predict(*x);
      Apply(s->t, before, s->experts());
      for (TrackerExpert* x : s->experts()) s->Predict(*x);
    }
    for (const std::string& p : doomed) {
      const auto f = one.t.Find(p);
      if (!f) continue;
      for (TrackerExpert* x : one.experts()) x->OnForget(*f);
      one.t.Forget(*f);
    }
    std::vector<FileIndex> batch;
    std::vector<bool> dying(many.t.file_count());
    for (const std::string& p : doomed) {
      const auto f = many.t.Find(p);
      if (!f || dying[*f]) continue;
      dying[*f] = true;
      batch.push_back(*f);
    }
    for (TrackerExpert* x : many.experts()) x->OnForgetMany(batch, dying);
    many.t.ForgetMany(batch);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(one.Predict(*one.experts()[k]), many.Predict(*many.experts()[k]))
          << many.experts()[k]->name();
    }
    // The next opens (continuing the order) move the cursors alike.
    std::vector<History::Op> next;
    for (size_t i = partial; i < std::min(partial + 5, h.walked().size()); ++i) {
      next.push_back({History::Op::kOpen, h.walked()[i], ++handle, 0});
    }
    Apply(one.t, next, one.experts());
    Apply(many.t, next, many.experts());
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(one.Predict(*one.experts()[k]), many.Predict(*many.experts()[k]))
          << many.experts()[k]->name();
    }
  }
}

}  // namespace
}  // namespace spoke::agent
