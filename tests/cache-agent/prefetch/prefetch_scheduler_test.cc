#include "cache-agent/prefetch/prefetch_scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
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

TEST(PrefetchScheduler, DeduplicatesAcrossExpertsAndStaysWithinBudgets) {
  ManualClock clock;
  FakeSink sink;
  PrefetchScheduler::Config c;
  c.volume_key = 1;
  c.block_size = kBs;
  c.space_budget_bytes = 32ull * kBs;
  c.max_inflight_bytes = 8ull * kBs;
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
