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
  d.OnAnswered(sent[0], std::nullopt, true, t0);
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

// Background asks of peers wait for the owners' hub reads: they take at most half the
// background slots, so that this agent's own hub reads (which answer its peers' asks) always
// find one. Before, an agent whose slots were all held by asks of peers could not read the
// blocks those peers waited for, and agents waited on each other until the ask deadline.
TEST(FetchDispatcher, PeerAsksLeaveHalfTheBackgroundSlotsToTheHub) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d({.max_inflight = 10, .demand_reserved = 2}, t0);
  std::vector<BlockFetch> asks(4, Fetch(kPrefetchClass, 4096));
  for (auto& f : asks) {
    ASSERT_EQ(d.GateFor(kPrefetchClass, kSourceRoute), Gate::kOpen);
    f.route = kSourceRoute;
    d.OnSent(f, t0);
  }
  EXPECT_EQ(d.GateFor(kPrefetchClass, kSourceRoute), Gate::kWindowFull);  // 4 of 8
  EXPECT_EQ(d.GateFor(kWarmClass, kSourceRoute), Gate::kWindowFull);
  EXPECT_EQ(d.GateFor(kDemandClass, kSourceRoute), Gate::kOpen);  // readers are not held
  EXPECT_EQ(d.GateFor(kWarmClass, kHubRoute), Gate::kOpen);
  d.OnAnswered(asks[0], 4096, /*from_hub=*/false, t0);
  EXPECT_EQ(d.GateFor(kPrefetchClass, kSourceRoute), Gate::kOpen);
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
  d.OnAnswered(r1, kMiB, true, t0 + 10ms);
  d.OnAnswered(r2, kMiB, true, t0 + 10ms);
  // Background alone fills no window with one block: a reader goes again.
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kOpen);
  d.OnSent(r3, t0 + 10ms);
  EXPECT_EQ(d.GateFor(kDemandClass), Gate::kWindowFull);
}

TEST(FetchDispatcher, OnlyHubRepliesMeasureTheLink) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d(PacedConfig(), t0);
  BlockFetch peer = Fetch(kPrefetchClass), hub = Fetch(kPrefetchClass), failed = Fetch(kWarmClass);
  peer.route = kSourceRoute;
  d.OnSent(peer, t0);
  d.OnSent(hub, t0);
  d.OnSent(failed, t0);
  EXPECT_FALSE(d.OnAnswered(peer, kMiB, /*from_hub=*/false, t0 + 5ms));
  EXPECT_TRUE(d.OnAnswered(hub, kMiB, true, t0 + 5ms));
  EXPECT_FALSE(d.OnAnswered(failed, std::nullopt, true, t0 + 5ms));
  EXPECT_EQ(d.inflight(), 0);
  EXPECT_EQ(d.background_bytes(), 0u);
  EXPECT_EQ(d.background_bytes(kSourceRoute), 0u);
}

// The source's window: its own bytes, not the hub's; halved once per burst of busy refusals;
// grown by its good replies.
TEST(FetchDispatcher, TheSourceHasAWindowOfItsOwnThatBusyOwnersHalve) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher::Config c = PacedConfig();
  c.source.initial_window = 4 * kMiB;
  c.source.cut_spacing = 50ms;
  c.source_busy_retries = 1;
  FetchDispatcher d(c, t0);
  std::vector<BlockFetch> asks(4, Fetch(kPrefetchClass));
  for (auto& f : asks) {
    f.route = kSourceRoute;
    d.OnSent(f, t0);
  }
  // 4 MiB on the source: its window is full, the hub's (2 MiB) is empty.
  EXPECT_EQ(d.background_bytes(kSourceRoute), 4 * kMiB);
  EXPECT_EQ(d.background_bytes(kHubRoute), 0u);
  EXPECT_EQ(d.GateFor(kPrefetchClass, kSourceRoute), Gate::kWindowFull);
  EXPECT_EQ(d.GateFor(kPrefetchClass, kHubRoute), Gate::kOpen);
  // Two refusals of one burst halve it once. A background ask refused as busy is the
  // source's again (source_busy_retries times), then the hub's.
  d.OnSourceFailed(asks[0], /*busy=*/true, t0 + 1ms);
  d.OnSourceFailed(asks[1], /*busy=*/true, t0 + 2ms);
  EXPECT_EQ(d.window(kSourceRoute), 2 * kMiB);
  EXPECT_FALSE(asks[0].dispatched);
  EXPECT_EQ(asks[0].route, kSourceRoute);
  EXPECT_EQ(d.background_bytes(kSourceRoute), 2 * kMiB);
  EXPECT_EQ(d.inflight(), 2);
  d.OnSent(asks[0], t0 + 3ms);
  d.OnSourceFailed(asks[0], /*busy=*/true, t0 + 4ms);
  EXPECT_EQ(asks[0].route, kHubRoute);
  EXPECT_EQ(d.window(kSourceRoute), 2 * kMiB);
  // A failure that is not a busy owner (a dead peer) does not shrink it; a later burst does.
  d.OnSourceFailed(asks[2], /*busy=*/false, t0 + 100ms);
  EXPECT_EQ(d.window(kSourceRoute), 2 * kMiB);
  // Good replies grow it by one step (1 MiB by default) per window of replies.
  d.OnAnswered(asks[3], kMiB, /*from_hub=*/false, t0 + 101ms);
  EXPECT_EQ(d.window(kSourceRoute), 2 * kMiB + kMiB / 2);
  EXPECT_EQ(d.inflight(), 0);
  // The hub's window never moved for any of it.
  EXPECT_EQ(d.window(kHubRoute), 2 * kMiB);
}

TEST(FetchDispatcher, ARefusedAskIsCountedOnTheHubWhenSentAgain) {
  const auto t0 = std::chrono::steady_clock::now();
  FetchDispatcher d(PacedConfig(), t0);
  BlockFetch f = Fetch(kDemandClass);
  f.route = kSourceRoute;
  d.OnSent(f, t0);
  EXPECT_EQ(d.demand_bytes(kSourceRoute), kMiB);
  d.OnSourceFailed(f, /*busy=*/true, t0 + 1ms);
  d.OnSent(f, t0 + 1ms);
  EXPECT_EQ(d.demand_bytes(kSourceRoute), 0u);
  EXPECT_EQ(d.demand_bytes(kHubRoute), kMiB);
  EXPECT_TRUE(d.OnAnswered(f, kMiB, true, t0 + 60ms));
  EXPECT_EQ(d.demand_bytes(kHubRoute), 0u);
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
