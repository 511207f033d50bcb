#include "cache-agent/prefetch/prefetch_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>

namespace spoke::agent {
namespace {

constexpr uint32_t kBs = 1 << 20;
constexpr uint64_t kFileBlocks = 100000;

// A fetcher that completes requests only when told, and checks the budget it was given.
class FakeSink final : public PrefetchSink {
 public:
  bool Submit(const PrefetchRequest& r) override {
    for (uint64_t i = 0; i < r.block_count; ++i) {
      const BlockKey k{1, r.file_id, r.version, r.first_block + i};
      inflight.push_back(k);
      fetching.insert(k);
      by_expert[r.expert] += 1;
    }
    inflight_bytes += r.block_count * kBs;
    max_inflight = std::max(max_inflight, inflight_bytes);
    return true;
  }
  uint64_t InFlightBytes() const override { return inflight_bytes; }
  bool Has(const BlockKey& k) const override { return fetching.contains(k); }
  bool WouldAdmit(const BlockKey& k, const AdmissionHint& hint) const override {
    asked_admission.push_back({k, hint});
    return admit;
  }
  uint64_t FreeCacheBytes() const override { return free_bytes; }
  void Abandon(const BlockKey& k) override { abandoned.push_back(k); }
  std::vector<BlockKey> abandoned;  // set predictions given up (a staged block is dropped)
  bool admit = true;                // what the "cache" answers
  uint64_t free_bytes = 0;          // the "cache"'s free room
  mutable std::vector<std::pair<BlockKey, AdmissionHint>> asked_admission;
  void CompleteAll() {
    inflight.clear();
    inflight_bytes = 0;
  }
  std::deque<BlockKey> inflight;
  std::unordered_set<BlockKey, BlockKeyHash> fetching;
  uint64_t inflight_bytes = 0, max_inflight = 0;
  std::map<ExpertId, uint64_t> by_expert;
};

// Predicts blocks of one big file: the truth (the next blocks the reader will read) until
// `wrong` is set, then blocks nobody reads.
class ScriptedExpert final : public Predictor {
 public:
  std::string_view name() const override { return "scripted"; }
  void OnRead(const ReadEvent& e) override { next = e.offset / kBs + 1; }
  void Predict(uint64_t budget, uint32_t bs, std::vector<PrefetchRequest>* out) override {
    PrefetchRequest r;
    r.path = "big";
    r.file_id = 7;
    r.version = 1;
    r.file_size = kFileBlocks * kBs;
    r.first_block = wrong ? 50000 + next : next;
    r.block_count = std::min<uint64_t>(budget / bs, 8);
    r.predicted_use = 0;
    if (r.block_count > 0) out->push_back(r);
  }
  uint64_t next = 0;
  bool wrong = false;
};

TEST(PrefetchScheduler, WrongExpertLosesItsBudgetWithinBoundedPredictions) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 64ull * kBs;
  c.max_inflight_bytes = 16ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  auto owned = std::make_unique<ScriptedExpert>();
  ScriptedExpert* expert = owned.get();
  const ExpertId id = s.AddExpert(std::move(owned));

  ReadEvent r;
  r.handle = 1;
  r.path = "big";
  r.file_id = 7;
  r.version = 1;
  r.file_size = kFileBlocks * kBs;
  r.length = kBs;
  uint64_t block = 0;
  const auto read_one = [&] {
    r.offset = block++ * kBs;
    r.hit = sink.fetching.contains(BlockKey{1, 7, 1, r.offset / kBs});
    s.OnRead(r);
    sink.CompleteAll();
    s.Tick();
  };
  for (int i = 0; i < 2000; ++i) read_one();
  PrefetchStats st = s.Stats();
  ASSERT_EQ(st.experts.size(), 1u);
  EXPECT_GT(st.experts[0].precision, 0.95);
  EXPECT_EQ(st.experts[0].budget_bytes, c.space_budget_bytes);

  expert->wrong = true;
  const uint64_t before = sink.by_expert[id];
  const uint64_t allowance_blocks = st.experts[0].budget_bytes / kBs;
  uint64_t issued_until_floor = 0;
  for (int i = 0; i < 5000; ++i) {
    read_one();
    st = s.Stats();
    if (st.experts[0].budget_bytes <= uint64_t{c.exploration_blocks} * kBs) {
      issued_until_floor = sink.by_expert[id] - before;
      break;
    }
  }
  ASSERT_GT(issued_until_floor, 0u) << "the wrong expert kept its budget";
  // Bound from the header: allowance + ceil(log(cutoff)/log(1-decay)) = allowance + 15.
  EXPECT_LE(issued_until_floor, allowance_blocks + 16);
  EXPECT_LT(st.experts[0].precision, c.cutoff);
  // The budgets were never exceeded.
  EXPECT_LE(sink.max_inflight, c.max_inflight_bytes);
  EXPECT_LE(st.outstanding_bytes, c.space_budget_bytes);
}

// Predicts nothing: an expert that never had a verdict.
class SilentExpert final : public Predictor {
 public:
  std::string_view name() const override { return "silent"; }
  void Predict(uint64_t, uint32_t, std::vector<PrefetchRequest>*) override {}
};

const ExpertStats& StatsOf(const PrefetchStats& s, ExpertId id) { return s.experts[id - 1]; }

// Reads block after block of the big file: ScriptedExpert's predictions come true.
void ReadSequentially(PrefetchScheduler& s, FakeSink& sink, uint64_t* block, int count) {
  ReadEvent r;
  r.handle = 1;
  r.path = "big";
  r.file_id = 7;
  r.version = 1;
  r.file_size = kFileBlocks * kBs;
  r.length = kBs;
  for (int i = 0; i < count; ++i) {
    r.offset = (*block)++ * kBs;
    r.hit = sink.fetching.contains(BlockKey{1, 7, 1, r.offset / kBs});
    s.OnRead(r);
    sink.CompleteAll();
    s.Tick();
  }
}

// The working set is a set: a shuffled loader reads its blocks anywhere in the epoch. While
// the metadata walk is still feeding the tree, the first predictions see a small set; they
// must still count as used when the loader reaches them late in the epoch, not expire.
// A loader's open, whole read and close of one half-block file (version 1); true when the
// sink had the block (a hit).
bool ReadHalfBlockFile(PrefetchScheduler& s, const FakeSink& sink, uint64_t handle,
                       const std::string& path, uint64_t file_id) {
  s.OnOpen(
      OpenEvent{.handle = handle, .path = path, .file_id = file_id, .version = 1, .size = kBs / 2});
  ReadEvent r{.handle = handle,
              .path = path,
              .file_id = file_id,
              .version = 1,
              .file_size = kBs / 2,
              .offset = 0,
              .length = kBs / 2};
  r.hit = sink.fetching.contains(BlockKey{1, file_id, 1, 0});
  s.OnRead(r);
  s.OnClose(CloseEvent{.handle = handle});
  return r.hit;
}

TEST(PrefetchScheduler, SetPredictionsAreJudgedAgainstTheEpochNotARank) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 4096ull * kBs;  // the cache holds the whole set
  c.max_inflight_bytes = 64ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  s.AddTrackerExperts({.directory = false, .replay = false, .working_set = true, .hints = false});
  constexpr int kFiles = 3000;
  const auto path = [](int i) { return "train/s" + std::to_string(i); };
  // The walk delivers 100 files, the expert predicts from them, then the rest arrives.
  for (int i = 0; i < 100; ++i) s.AddTreeFile(path(i), 100 + i, 1, kBs / 2);
  s.Tick();
  ASSERT_GT(sink.fetching.size(), 0u);
  for (int i = 100; i < kFiles; ++i) s.AddTreeFile(path(i), 100 + i, 1, kBs / 2);

  std::vector<int> order(kFiles);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t handle = 0;
  for (int i : order) {
    ReadHalfBlockFile(s, sink, ++handle, path(i), 100u + i);
    sink.CompleteAll();
    s.Tick();
  }
  const PrefetchStats st = s.Stats();
  ASSERT_EQ(st.experts.size(), 1u);
  const ExpertStats& ws = st.experts[0];
  EXPECT_GT(ws.used_blocks, kFiles * 9u / 10) << "the working set did not cover the epoch";
  EXPECT_EQ(ws.expired_blocks, 0u) << "set predictions read within the epoch expired";
  EXPECT_GT(ws.precision, 0.9);
  EXPECT_EQ(ws.budget_bytes, c.space_budget_bytes);
}

// Demand misses of one shuffled epoch over a working set of `files` half-block files, with
// the configured space budget a quarter of the set and `free_bytes` of free cache room.
uint64_t ShuffledEpochMisses(uint64_t free_bytes) {
  ManualClock clock;
  FakeSink sink;
  sink.free_bytes = free_bytes;
  constexpr int kFiles = 2000;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = kFiles / 4 * (kBs / 2);
  c.max_inflight_bytes = 64ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  s.AddTrackerExperts({.directory = false, .replay = false, .working_set = true, .hints = false});
  const auto path = [](int i) { return "train/s" + std::to_string(i); };
  for (int i = 0; i < kFiles; ++i) s.AddTreeFile(path(i), 100 + i, 1, kBs / 2);
  std::vector<int> order(kFiles);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(11);
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t handle = 0, misses = 0;
  for (int i : order) {
    sink.CompleteAll();
    s.Tick();
    if (!ReadHalfBlockFile(s, sink, ++handle, path(i), 100u + i)) ++misses;
  }
  return misses;
}

// A proven expert may fill the cache's free room: filling it evicts nothing. With the space
// budget alone (a quarter of the set outstanding), a shuffled loader misses on most reads
// of the first half of the epoch, however fast the link is.
TEST(PrefetchScheduler, AProvenSetPredictionFillsTheFreeCacheRoomNotOnlyTheSpaceBudget) {
  const uint64_t budget_only = ShuffledEpochMisses(0);
  const uint64_t with_room = ShuffledEpochMisses(4000ull * kBs);
  EXPECT_GT(budget_only, 2000u / 5) << "the space budget alone should leave many misses";
  EXPECT_LT(with_room, 2000u / 20) << "free room unused: " << with_room << " misses of 2000";
}

// A set prediction that the epoch did not read is wrong: it expires once the next epoch is
// under way, and only then is it given up to the sink (which drops its staged block).
TEST(PrefetchScheduler, SetPredictionsUnreadByTheEpochExpire) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 4096ull * kBs;
  c.max_inflight_bytes = 4096ull * kBs;
  c.unproven_share = 1;
  c.min_horizon_blocks = 16;
  PrefetchScheduler s(c, clock, sink);
  s.AddTrackerExperts({.directory = false, .replay = false, .working_set = true, .hints = false});
  // 200 files in the tree; the loader only ever reads the first 100 (two epochs).
  const auto path = [](int i) { return "d/f" + std::to_string(i); };
  for (int i = 0; i < 200; ++i) s.AddTreeFile(path(i), 100 + i, 1, kBs);
  s.Tick();
  EXPECT_EQ(sink.fetching.size(), 200u);
  uint64_t handle = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    // Nothing is given up while its epoch runs, however long it takes.
    clock.Advance(std::chrono::minutes(1));
    EXPECT_TRUE(sink.abandoned.empty()) << "epoch " << epoch;
    for (int i = 0; i < 100; ++i) {
      s.OnOpen(OpenEvent{
          .handle = ++handle, .path = path(i), .file_id = 100u + i, .version = 1, .size = kBs});
      s.OnRead(ReadEvent{.handle = handle,
                         .path = path(i),
                         .file_id = 100u + i,
                         .version = 1,
                         .file_size = kBs,
                         .offset = 0,
                         .length = kBs,
                         .hit = true});
      s.OnClose(CloseEvent{.handle = handle});
    }
  }
  const ExpertStats ws = s.Stats().experts[0];
  EXPECT_EQ(ws.used_blocks, 100u);
  EXPECT_EQ(ws.expired_blocks, 100u);
  EXPECT_EQ(ws.outstanding_blocks, 0u);
  // Exactly the unread ones were given up.
  ASSERT_EQ(sink.abandoned.size(), 100u);
  for (const BlockKey& k : sink.abandoned) EXPECT_GE(k.file_id, 200u) << k.file_id;
}

// The job stopping is no verdict: releasing the outstanding blocks of an idle volume must
// not drag a right expert's precision down.
TEST(PrefetchScheduler, IdleReleaseFreesSpaceWithoutAVerdict) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 256ull * kBs;
  c.max_inflight_bytes = 64ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  const ExpertId id = s.AddExpert(std::make_unique<ScriptedExpert>());
  uint64_t block = 0;
  ReadSequentially(s, sink, &block, 500);
  PrefetchStats st = s.Stats();
  ASSERT_GT(StatsOf(st, id).outstanding_blocks, 0u);
  const double precision = StatsOf(st, id).precision;
  const uint64_t wasted = StatsOf(st, id).wasted_blocks;
  EXPECT_GT(precision, 0.95);

  clock.Advance(c.idle_release + std::chrono::seconds(1));
  s.Tick();
  st = s.Stats();
  EXPECT_EQ(st.outstanding_bytes, 0u);
  EXPECT_GT(StatsOf(st, id).released_blocks, 0u);
  EXPECT_EQ(StatsOf(st, id).wasted_blocks, wasted);
  EXPECT_DOUBLE_EQ(StatsOf(st, id).precision, precision);
  EXPECT_EQ(StatsOf(st, id).budget_bytes, c.space_budget_bytes);
}

// Budget follows demonstrated precision: an expert without a single verdict holds only an
// exploration allowance, also when the proven expert has fallen below the cutoff.
TEST(PrefetchScheduler, ExpertsWithoutVerdictsHoldOnlyAnExplorationAllowance) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 256ull * kBs;
  c.max_inflight_bytes = 16ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  auto owned = std::make_unique<ScriptedExpert>();
  ScriptedExpert* scripted = owned.get();
  const ExpertId right = s.AddExpert(std::move(owned));
  const ExpertId silent = s.AddExpert(std::make_unique<SilentExpert>());
  const uint64_t exploration =
      std::max<uint64_t>(uint64_t{c.exploration_blocks} * kBs,
                         static_cast<uint64_t>(c.unproven_share * c.space_budget_bytes));
  uint64_t block = 0;
  ReadSequentially(s, sink, &block, 1000);
  PrefetchStats st = s.Stats();
  EXPECT_TRUE(StatsOf(st, right).proven);
  EXPECT_EQ(StatsOf(st, right).budget_bytes, c.space_budget_bytes);
  EXPECT_FALSE(StatsOf(st, silent).proven);
  EXPECT_EQ(StatsOf(st, silent).budget_bytes, exploration);

  scripted->wrong = true;  // the proven expert falls below the cutoff
  ReadSequentially(s, sink, &block, 1000);
  st = s.Stats();
  EXPECT_LT(StatsOf(st, right).precision, c.cutoff);
  EXPECT_EQ(StatsOf(st, silent).budget_bytes, exploration);
}

// Admission before fetch: a block the cache would refuse is not sent over the WAN, gives
// its expert no verdict, and is asked about again once the cache had time to move on.
TEST(PrefetchScheduler, BlocksTheCacheWouldRefuseAreNotFetched) {
  ManualClock clock;
  FakeSink sink;
  sink.admit = false;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 64ull * kBs;
  c.max_inflight_bytes = 16ull * kBs;
  c.min_horizon_blocks = 32;
  PrefetchScheduler s(c, clock, sink);
  const ExpertId id = s.AddExpert(std::make_unique<ScriptedExpert>());
  uint64_t block = 0;
  ReadSequentially(s, sink, &block, 8);
  PrefetchStats st = s.Stats();
  EXPECT_TRUE(sink.fetching.empty()) << "a refused block crossed the WAN";
  EXPECT_GT(st.admission_declined_blocks, 0u);
  EXPECT_EQ(st.outstanding_bytes, 0u);
  EXPECT_EQ(StatsOf(st, id).wasted_blocks + StatsOf(st, id).used_blocks, 0u);
  ASSERT_FALSE(sink.asked_admission.empty());
  EXPECT_EQ(sink.asked_admission.front().second.origin, id);
  // The refusals are remembered: the next events do not ask the cache about them again.
  const size_t asked = sink.asked_admission.size();
  s.Tick();
  EXPECT_EQ(sink.asked_admission.size(), asked);

  sink.admit = true;  // room appeared; after min_horizon block reads the scheduler asks again
  ReadSequentially(s, sink, &block, 40);
  EXPECT_FALSE(sink.fetching.empty());
  EXPECT_GT(s.Stats().experts[0].used_blocks, 0u);
}

TEST(PrefetchScheduler, DeduplicatesAcrossExpertsAndStaysWithinBudgets) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 32ull * kBs;
  c.max_inflight_bytes = 8ull * kBs;
  c.unproven_share = 1;  // neither expert has a verdict yet: let both ask for everything
  PrefetchScheduler s(c, clock, sink);
  s.AddExpert(std::make_unique<ScriptedExpert>());
  s.AddExpert(std::make_unique<ScriptedExpert>());  // proposes the very same blocks
  ReadEvent r;
  r.handle = 1;
  r.file_id = 7;
  r.version = 1;
  r.file_size = kFileBlocks * kBs;
  r.length = kBs;
  r.offset = 0;
  s.OnRead(r);
  EXPECT_EQ(sink.inflight.size(), 8u);  // in-flight budget, each block once
  std::unordered_set<BlockKey, BlockKeyHash> unique(sink.inflight.begin(), sink.inflight.end());
  EXPECT_EQ(unique.size(), sink.inflight.size());
  for (int i = 0; i < 10; ++i) s.Tick();  // nothing completed: nothing more is submitted
  EXPECT_EQ(sink.inflight.size(), 8u);
  sink.CompleteAll();
  s.Tick();
  EXPECT_LE(sink.max_inflight, c.max_inflight_bytes);
  EXPECT_LE(s.Stats().outstanding_bytes, c.space_budget_bytes);
}

// Proposes the same cached block at every pass and counts the passes.
class CountingExpert final : public Predictor {
 public:
  std::string_view name() const override { return "counting"; }
  void Predict(uint64_t, uint32_t, std::vector<PrefetchRequest>* out) override {
    ++passes;
    PrefetchRequest r;
    r.path = "big";
    r.file_id = 7;
    r.version = 1;
    r.file_size = kFileBlocks * kBs;
    r.first_block = 3;
    r.block_count = 1;
    out->push_back(r);
  }
  int passes = 0;
};

// A warm working set: every prediction is present. The experts are not asked again at every
// cached read (their proposals would only be checked against the cache once more), but a
// miss and a tick ask them at once.
TEST(PrefetchScheduler, CachedReadsAfterAPassThatFoundEverythingPresentDoNotReplan) {
  ManualClock clock;
  FakeSink sink;
  sink.fetching.insert(BlockKey{1, 7, 1, 3});  // the only prediction: present
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 32ull * kBs;
  c.max_inflight_bytes = 8ull * kBs;
  c.unproven_share = 1;
  PrefetchScheduler s(c, clock, sink);
  auto owned = std::make_unique<CountingExpert>();
  CountingExpert* expert = owned.get();
  s.AddExpert(std::move(owned));
  ReadEvent r;
  r.handle = 1;
  r.file_id = 7;
  r.version = 1;
  r.file_size = kFileBlocks * kBs;
  r.length = kBs;
  r.hit = true;
  for (int i = 0; i < 100; ++i) {
    r.offset = static_cast<uint64_t>(i) * kBs;
    s.OnRead(r);
  }
  EXPECT_EQ(expert->passes, 1);
  EXPECT_TRUE(sink.inflight.empty());
  r.hit = false;  // a miss: plan now
  s.OnRead(r);
  EXPECT_EQ(expert->passes, 2);
  s.Tick();  // ticks always plan
  EXPECT_EQ(expert->passes, 3);
  // Once a pass finds something to fetch, every event plans again.
  sink.fetching.clear();
  s.Tick();
  EXPECT_EQ(sink.inflight.size(), 1u);
  r.hit = true;
  s.OnRead(r);
  EXPECT_EQ(expert->passes, 5);
}

TEST(PrefetchScheduler, HintsWithoutHintExpertAreRejected) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.space_budget_bytes = 8ull * kBs;
  PrefetchScheduler s(c, clock, sink);
  EXPECT_EQ(s.AddHints("a\nb\n").rejected, 2u);
  s.AddTrackerExperts({});
  EXPECT_EQ(s.AddHints("a\n..\n").accepted, 1u);
  EXPECT_EQ(s.Stats().hints_rejected, 1u);
}

TEST(PrefetchSchedulerConfig, ValidateRejectsNonsense) {
  PrefetchScheduler::Config c;
  EXPECT_FALSE(c.Validate());  // space budget required
  c.space_budget_bytes = 1 << 30;
  EXPECT_TRUE(c.Validate());
  c.precision_decay = 0;
  EXPECT_FALSE(c.Validate());
}

}  // namespace
}  // namespace spoke::agent
