// FetchDispatcher alone: hub slots with some reserved for readers, and the pacer's window
// over readers' and background bytes together (readers first, one block of each kind).
#include "cache-agent/fs/fetch_dispatcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using Gate = FetchDispatcher::Gate;

constexpr uint32_t kMiB = 1 << 20;

BlockFetch Fetch(int cls, uint32_t length = kMiB) {
  BlockFetch f;
  f.cls = cls;
  f.length = length;
  return f;
}

TEST(FetchDispatcher, BackgroundLeavesTheReservedSlotsToReaders) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d({.max_inflight = 4, .demand_reserved = 2}, t0);
  std::vector<BlockFetch> sent(4, Fetch(kPrefetchClass));
  d.OnSent(sent[0], t0);
  d.OnSent(sent[1], t0);
  EXPECT_TRUE(sent[0].dispatched && sent[0].paced);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kNoSlot);
  EXPECT_EQ(d.GateFor(kWarmClass), Gate::kNoSlot);
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kOpen);
  sent[2] = Fetch(kDemandClass);
  sent[3] = Fetch(kDemandClass);
  d.OnSent(sent[2], t0);
  d.OnSent(sent[3], t0);
  EXPECT_FALSE(sent[2].paced);
  EXPECT_FALSE(d.HasSlot());
  EXPECT_EQ(d.inflight(), 4);
  EXPECT_EQ(d.demand_bytes(), 2u * kMiB);
  EXPECT_EQ(d.background_bytes(), 2u * kMiB);
  d.OnAnswered(sent[0], std::nullopt, t0);
  EXPECT_TRUE(d.HasSlot());
  EXPECT_EQ(d.background_bytes(), 1u * kMiB);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kNoSlot);  // 3 in flight, 2 background slots
}

TEST(FetchDispatcher, BackgroundKeepsOneSlotWhateverIsReserved) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d({.max_inflight = 2, .demand_reserved = 10}, t0);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kOpen);
  BlockFetch f = Fetch(kWarmClass);
  d.OnSent(f, t0);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kNoSlot);
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kOpen);
}

// Slots to spare, so that only the pacer's window (2 MiB at first) holds fetches back.
FetchDispatcher::Config PacedConfig() {
  FetchDispatcher::Config c{.max_inflight = 100, .demand_reserved = 0};
  c.pacing.target_queue = 200ms;
  c.pacing.min_window = kMiB;
  c.pacing.initial_window = 2 * kMiB;
  return c;
}

TEST(FetchDispatcher, TheWindowHoldsBackgroundBehindReadersButLetsOneOfEachGo) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d(PacedConfig(), t0);
  ASSERT_EQ(d.window(), 2u * kMiB);
  BlockFetch r1 = Fetch(kDemandClass), r2 = Fetch(kDemandClass), r3 = Fetch(kDemandClass);
  d.OnSent(r1, t0);
  d.OnSent(r2, t0);
  // Readers filled the window: the next reader waits, background still sends its one block.
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kWindowFull);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kOpen);
  BlockFetch b1 = Fetch(kPrefetchClass);
  d.OnSent(b1, t0);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kWindowFull);
  d.OnAnswered(r1, kMiB, t0 + 10ms);
  d.OnAnswered(r2, kMiB, t0 + 10ms);
  // Background alone fills no window with one block: a reader goes again.
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kOpen);
  d.OnSent(r3, t0 + 10ms);
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kWindowFull);
}

TEST(FetchDispatcher, OnlyHubRepliesMeasureTheLink) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d(PacedConfig(), t0);
  BlockFetch peer = Fetch(kPrefetchClass), hub = Fetch(kPrefetchClass);
  d.OnSent(peer, t0);
  d.OnSent(hub, t0);
  EXPECT_FALSE(d.OnAnswered(peer, std::nullopt, t0 + 5ms));
  EXPECT_TRUE(d.OnAnswered(hub, kMiB, t0 + 5ms));
  EXPECT_EQ(d.inflight(), 0);
  EXPECT_EQ(d.background_bytes(), 0u);
}

TEST(FetchDispatcher, NoPacingLeavesEveryClassOpen) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d({.max_inflight = 100, .demand_reserved = 0}, t0);
  std::vector<BlockFetch> many(50, Fetch(kDemandClass, 64 * kMiB));
  for (auto& f : many) d.OnSent(f, t0);
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kOpen);
  EXPECT_EQ(d.GateFor(kPrefetchClass), Gate::kOpen);
}

}  // namespace
}  // namespace spoke::agent
