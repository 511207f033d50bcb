#include "cache-agent/prefetch/hint_predictor.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdio>
#include <string>

namespace spoke::agent {
namespace {

class NothingPresent final : public BlockPresence {
 public:
  bool Present(const TrackedFile&, uint64_t) const override { return false; }
};

TEST(HintParser, AcceptsAndNormalises) {
  EXPECT_EQ(*NormalizeHintPath("train/a.jpg"), "train/a.jpg");
  EXPECT_EQ(*NormalizeHintPath("train//a.jpg\r"), "train/a.jpg");
  EXPECT_EQ(*NormalizeHintPath("a/b/"), "a/b");
  // `find . -type f` writes "./a/b": the "." parts are dropped, as a shell would.
  EXPECT_EQ(*NormalizeHintPath("./a"), "a");
  EXPECT_EQ(*NormalizeHintPath("./train/./a.jpg\r"), "train/a.jpg");
}

TEST(HintParser, RejectsEscapesAndJunk) {
  EXPECT_FALSE(NormalizeHintPath("../etc/passwd"));
  EXPECT_FALSE(NormalizeHintPath("a/../../b"));
  EXPECT_FALSE(NormalizeHintPath("a/.."));
  EXPECT_FALSE(NormalizeHintPath("./../a"));
  EXPECT_FALSE(NormalizeHintPath("."));
  EXPECT_FALSE(NormalizeHintPath("./"));
  EXPECT_FALSE(NormalizeHintPath("/etc/passwd"));
  EXPECT_FALSE(NormalizeHintPath(""));
  EXPECT_FALSE(NormalizeHintPath("\r"));
  EXPECT_FALSE(NormalizeHintPath("//"));
  EXPECT_FALSE(NormalizeHintPath(std::string("a\0b", 3)));
  EXPECT_FALSE(NormalizeHintPath(std::string(kMaxHintPath + 1, 'a')));
  EXPECT_FALSE(NormalizeHintPath("d/" + std::string(kMaxHintComponent + 1, 'a')));
  EXPECT_EQ(NormalizeHintPath("..").error().code(), Code::kInvalidArgument);
}

TEST(HintPredictor, CountsAcceptedAndRejectedLines) {
  AccessTracker tracker(AccessTracker::Config{});
  NothingPresent none;
  HintPredictor hints(tracker, none);
  const std::string text = "a/1\n../x\n/abs\n\n" + std::string(5000, 'b') + "\na/2\n";
  const HintCounts c = hints.AddHints(text);
  EXPECT_EQ(c.accepted, 2u);
  EXPECT_EQ(c.rejected, 4u);
  EXPECT_EQ(hints.pending(), 2u);
}

TEST(HintPredictor, JoinsLinesSplitAcrossWrites) {
  AccessTracker tracker(AccessTracker::Config{});
  NothingPresent none;
  HintPredictor hints(tracker, none);
  EXPECT_EQ(hints.AddHints("train/ab").accepted, 0u);
  EXPECT_EQ(hints.AddHints("c.jpg\ntrain/d").accepted, 1u);
  EXPECT_EQ(hints.FlushHints().accepted, 1u);
  EXPECT_EQ(hints.pending(), 2u);
}

TEST(HintPredictor, ProposesHintedFilesInOrderAndConsumesThem) {
  AccessTracker::Config tc;
  tc.block_size = 1 << 20;
  AccessTracker tracker(tc);
  for (int i = 0; i < 4; ++i) {
    tracker.AddTreeFile("f" + std::to_string(i), 10 + i, 1, 2 << 20);
  }
  NothingPresent none;
  HintPredictor hints(tracker, none);
  hints.AddHints("f3\nf1\nnot-there\nf2\n");
  std::vector<PrefetchRequest> out;
  hints.Predict(3 << 20, 1 << 20, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].path, "f3");
  EXPECT_EQ(out[0].block_count, 2u);
  EXPECT_EQ(out[1].path, "f1");
  EXPECT_EQ(out[1].block_count, 1u);
  EXPECT_LT(out[0].predicted_use, out[1].predicted_use);

  OpenEvent e;
  e.handle = 1;
  e.path = "f3";
  e.file_id = 13;
  e.version = 1;
  e.size = 2 << 20;
  tracker.OnOpen(e);
  hints.OnOpen(e);
  out.clear();
  hints.Predict(8 << 20, 1 << 20, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].path, "f1");
  EXPECT_EQ(out[1].path, "f2");
  EXPECT_EQ(hints.unresolved(), 1u) << "an unresolved hint is counted once, then dropped";
}

// A flood of hints stays within the volume's hint budget: lines beyond it are rejected and
// counted, the accounted bytes never exceed it, and consuming hints frees room again.
TEST(HintPredictor, FloodStaysWithinTheHintBudget) {
  AccessTracker::Config tc;
  tc.block_size = 1 << 20;
  AccessTracker tracker(tc);
  NothingPresent none;
  HintPredictor::Options o;
  o.max_pending_bytes = 1 << 20;
  o.max_pending = 1u << 30;  // only the byte bound applies
  HintPredictor hints(tracker, none, o);
  const std::string dir(200, 'd');
  uint64_t accepted = 0, rejected = 0;
  for (int w = 0; w < 200; ++w) {  // 200 writes of 64 KiB lines: 12.5 MiB of hints
    std::string text;
    for (int i = 0; i < 256; ++i) text += dir + "/f" + std::to_string(w * 256 + i) + "\n";
    const HintCounts c = hints.AddHints(text);
    accepted += c.accepted;
    rejected += c.rejected;
    ASSERT_LE(hints.pending_bytes(), o.max_pending_bytes);
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_EQ(accepted, hints.pending());
  EXPECT_GE(hints.pending_bytes(), o.max_pending_bytes - HintPredictor::HintBytes(dir.size() + 8));
  // None of them names a file: the next prediction drops what it scans, freeing budget.
  std::vector<PrefetchRequest> out;
  hints.Predict(64 << 20, 1 << 20, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_LT(hints.pending(), accepted);
  EXPECT_EQ(hints.unresolved(), accepted - hints.pending());
  EXPECT_GT(hints.AddHints("x\n").accepted, 0u);
}

// What a queued hint charges the budget covers what it holds on the heap: a wide-prefetch
// hint file names every file of a dataset in short paths, a million of them for a large one.
// Before each pending path kept a std::deque of its sequence numbers (a 512-byte node and its
// map): about 890 heap bytes per hint here against 210 charged.
TEST(HintPredictor, ChargesAtLeastTheHeapAQueuedHintHolds) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator does not report heap use (mallinfo2)";
#endif
  constexpr int kHints = 100000;
  std::string text;
  for (int i = 0; i < kHints; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "train/d%03d/%06d.jpg\n", i / 1000, i);
    text += line;
  }
  AccessTracker tracker(AccessTracker::Config{});
  NothingPresent none;
  MemoryBudget::Config mc;
  mc.total_bytes = 4ull << 30;
  MemoryBudget budget(mc);
  HintPredictor::Options o;
  o.max_pending_bytes = 1ull << 30;
  o.memory = &budget;
  // Large arrays are mmapped chunks, which uordblks leaves out.
  const auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  malloc_trim(0);
  const size_t before = heap();
  HintPredictor hints(tracker, none, o);
  ASSERT_EQ(hints.AddHints(text).accepted, static_cast<uint64_t>(kHints));
  const size_t held = heap() - before;
  const uint64_t charged = budget.used(MemoryBudget::Use::kHints);
  std::printf("[ memory   ] %zu heap bytes per queued hint, %lu charged\n", held / kHints,
              static_cast<unsigned long>(charged / kHints));
  EXPECT_LE(held, charged);
}

// Every volume's hints draw on the agent's one memory budget: once it is spent (here by
// another volume's hints), lines are rejected and counted as budget refusals; unresolved
// hints dropped by Predict, and a volume going away, give their bytes back.
TEST(HintPredictor, HintsOfAllVolumesShareTheAgentBudget) {
  AccessTracker::Config tc;
  tc.block_size = 1 << 20;
  AccessTracker tracker(tc);
  NothingPresent none;
  MemoryBudget::Config mc;
  mc.total_bytes = 4 << 20;  // background share: 3 MiB
  MemoryBudget budget(mc);
  HintPredictor::Options o;
  o.max_pending_bytes = 2 << 20;  // per volume
  o.memory = &budget;
  HintPredictor first(tracker, none, o);
  auto flood = [](HintPredictor& h, const std::string& tag) {
    HintCounts total;
    for (int w = 0; w < 64; ++w) {
      std::string text;
      for (int i = 0; i < 256; ++i) {
        for (int c = 0; c < 5; ++c) text += std::string(200, 'x') + "/";  // ~1 KB, valid
        text += tag + std::to_string(w * 256 + i) + "\n";
      }
      const HintCounts c = h.AddHints(text);
      total.accepted += c.accepted;
      total.rejected += c.rejected;
    }
    return total;
  };
  flood(first, "a");
  EXPECT_LE(first.pending_bytes(), o.max_pending_bytes);
  EXPECT_EQ(budget.used(MemoryBudget::Use::kHints), first.pending_bytes());
  EXPECT_EQ(first.budget_rejected(), 0u) << "the per-volume bound came first";
  {
    HintPredictor second(tracker, none, o);
    const HintCounts c = flood(second, "b");
    EXPECT_GT(c.rejected, 0u);
    EXPECT_GT(second.budget_rejected(), 0u);
    EXPECT_LE(budget.used(), budget.background_limit());
    EXPECT_EQ(budget.used(MemoryBudget::Use::kHints),
              first.pending_bytes() + second.pending_bytes());
    EXPECT_GT(budget.refusals(MemoryBudget::Use::kHints), 0u);
  }
  EXPECT_EQ(budget.used(MemoryBudget::Use::kHints), first.pending_bytes())
      << "freed with the volume";
  std::vector<PrefetchRequest> out;
  first.Predict(64 << 20, 1 << 20, &out);  // none resolves: dropped, counted, bytes returned
  EXPECT_GT(first.unresolved(), 0u);
  EXPECT_EQ(budget.used(MemoryBudget::Use::kHints), first.pending_bytes());
  while (first.pending() > 0) first.Predict(64 << 20, 1 << 20, &out);
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace spoke::agent
