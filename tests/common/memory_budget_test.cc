#include "common/memory_budget.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/resident_watch.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;
using Use = MemoryBudget::Use;
using Level = MemoryBudget::Level;

MemoryBudget::Config Budget(uint64_t total, double reserve = 0.25) {
  MemoryBudget::Config c;
  c.total_bytes = total;
  c.demand_reserve_share = reserve;
  return c;
}

TEST(MemoryBudget, ValidateNamesWhatIsWrong) {
  EXPECT_FALSE(Budget(0).Validate());
  auto bad = Budget(100, 1.0).Validate();
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("demand_reserve_share"), std::string::npos);
  EXPECT_FALSE(Budget(100, -0.1).Validate());
  EXPECT_TRUE(Budget(100, 0).Validate());
}

TEST(MemoryBudget, AccountsEachUseAgainstOneTotal) {
  MemoryBudget b(Budget(1000));
  EXPECT_EQ(b.background_limit(), 750u);
  EXPECT_TRUE(b.TryAcquire(Use::kPrefetch, 300));
  EXPECT_TRUE(b.TryAcquire(Use::kHints, 200));
  b.Charge(Use::kMetadata, 100);
  EXPECT_EQ(b.used(), 600u);
  EXPECT_EQ(b.used(Use::kPrefetch), 300u);
  EXPECT_EQ(b.used(Use::kHints), 200u);
  EXPECT_EQ(b.used(Use::kMetadata), 100u);
  b.Move(Use::kPrefetch, Use::kStoreQueue, 300);
  EXPECT_EQ(b.used(Use::kPrefetch), 0u);
  EXPECT_EQ(b.used(Use::kStoreQueue), 300u);
  EXPECT_EQ(b.used(), 600u) << "a move takes nothing new";
  b.Release(Use::kStoreQueue, 300);
  b.Release(Use::kHints, 200);
  b.Release(Use::kMetadata, 100);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.peak(), 600u);
  // A release of more than held is clamped (a bug elsewhere must not wrap the figures).
  b.Release(Use::kHints, 5);
  EXPECT_EQ(b.used(Use::kHints), 0u);
  EXPECT_EQ(b.used(), 0u);
}

// Back-pressure: background takers stop at total - reserve and are counted; they get room
// again as soon as bytes are released.
TEST(MemoryBudget, BackgroundStopsAtTheReserveAndResumesOnRelease) {
  MemoryBudget b(Budget(1000));
  EXPECT_TRUE(b.TryAcquire(Use::kPrefetch, 700));
  EXPECT_FALSE(b.TryAcquire(Use::kPrefetch, 100));
  EXPECT_FALSE(b.TryAcquire(Use::kHints, 51));
  EXPECT_TRUE(b.TryAcquire(Use::kHints, 50));
  EXPECT_EQ(b.refusals(Use::kPrefetch), 1u);
  EXPECT_EQ(b.refusals(Use::kHints), 1u);
  EXPECT_EQ(b.used(), 750u);
  b.Release(Use::kPrefetch, 100);
  EXPECT_TRUE(b.TryAcquire(Use::kPrefetch, 100));
}

// The reserve is demand's: a demand taker gets it while background takers are refused.
TEST(MemoryBudget, DemandMayUseTheReserve) {
  MemoryBudget b(Budget(1000));
  EXPECT_TRUE(b.TryAcquire(Use::kPrefetch, 750));
  EXPECT_FALSE(b.TryAcquire(Use::kPrefetch, 1));
  EXPECT_TRUE(b.TryAcquire(Use::kStoreQueue, 250, Level::kDemand));
  EXPECT_FALSE(b.TryAcquire(Use::kStoreQueue, 1, Level::kDemand));
  EXPECT_EQ(b.used(), 1000u);
}

// Charge is never refused (a reader's block must be fetched) but is seen by everyone else:
// above the total, demand blocks are no longer queued for the cache (TryMove at the demand
// level fails) and background takers are refused.
TEST(MemoryBudget, ChargesAboveTheTotalStopEveryoneElse) {
  MemoryBudget b(Budget(1000));
  b.Charge(Use::kDemand, 1200);
  EXPECT_EQ(b.used(), 1200u);
  EXPECT_FALSE(b.TryMove(Use::kDemand, Use::kStoreQueue, 100, Level::kDemand));
  EXPECT_EQ(b.refusals(Use::kStoreQueue), 1u);
  EXPECT_EQ(b.used(Use::kDemand), 1200u) << "a refused move moves nothing";
  EXPECT_FALSE(b.TryAcquire(Use::kPrefetch, 1));
  b.Release(Use::kDemand, 400);
  EXPECT_TRUE(b.TryMove(Use::kDemand, Use::kStoreQueue, 100, Level::kDemand));
  EXPECT_EQ(b.used(Use::kStoreQueue), 100u);
  EXPECT_EQ(b.used(), 800u);
  EXPECT_EQ(b.peak(), 1200u);
}

TEST(MemoryBudget, AcquireWaitGetsRoomWhenItIsReleasedOrGivesUpAtTheDeadline) {
  MemoryBudget b(Budget(1000));
  ASSERT_TRUE(b.TryAcquire(Use::kPrefetch, 750));
  // Nobody releases: refused at the deadline.
  EXPECT_FALSE(b.AcquireWait(Use::kPrefetch, 10, std::chrono::steady_clock::now() + 20ms));
  EXPECT_EQ(b.refusals(Use::kPrefetch), 1u);
  // More than the whole background share: refused at once, whatever the deadline.
  EXPECT_FALSE(b.AcquireWait(Use::kPrefetch, 751, std::chrono::steady_clock::time_point::max()));
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    b.Release(Use::kPrefetch, 100);
  });
  EXPECT_TRUE(b.AcquireWait(Use::kPrefetch, 100, std::chrono::steady_clock::now() + 30s));
  releaser.join();
  EXPECT_EQ(b.used(), 750u);
}

// No deadlock: background takers hold every byte they may and wait for more, while demand
// keeps being served (Charge never waits) and the holders' releases wake the waiters.
TEST(MemoryBudget, DemandIsNeverBlockedByBackgroundWaiters) {
  MemoryBudget b(Budget(1 << 20));
  ASSERT_TRUE(b.TryAcquire(Use::kPrefetch, b.background_limit()));
  std::atomic<int> got{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      if (b.AcquireWait(Use::kPrefetch, 4096, std::chrono::steady_clock::now() + 30s)) {
        got++;
        b.Release(Use::kPrefetch, 4096);
      }
    });
  }
  for (int i = 0; i < 1000; ++i) {
    b.Charge(Use::kDemand, 1 << 20);
    b.Release(Use::kDemand, 1 << 20);
  }
  EXPECT_EQ(got.load(), 0) << "no background room was freed yet";
  b.Release(Use::kPrefetch, b.background_limit());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(got.load(), 4);
  EXPECT_EQ(b.used(), 0u);
}

TEST(MemoryBudget, MetricsFollowTheAccounting) {
  metrics::Registry registry;
  MemoryBudget b(Budget(1000));
  EXPECT_FALSE(b.TryAcquire(Use::kHints, 2000));  // refused before the export: still counted
  b.ExportTo(registry);
  EXPECT_EQ(registry.GetGauge("spoke_memory_budget_bytes", "").Value(), 1000);
  auto& prefetch = registry.GetGauge("spoke_memory_used_bytes", "", {{"use", "prefetch"}});
  auto& hint_refusals = registry.GetCounter("spoke_memory_refusals_total", "", {{"use", "hints"}});
  EXPECT_EQ(hint_refusals.Value(), 1u);
  ASSERT_TRUE(b.TryAcquire(Use::kPrefetch, 300));
  EXPECT_EQ(prefetch.Value(), 300);
  b.Move(Use::kPrefetch, Use::kStoreQueue, 300);
  EXPECT_EQ(prefetch.Value(), 0);
  EXPECT_EQ(registry.GetGauge("spoke_memory_used_bytes", "", {{"use", "store_queue"}}).Value(),
            300);
  EXPECT_FALSE(b.TryAcquire(Use::kHints, 600));
  EXPECT_EQ(hint_refusals.Value(), 2u);
  EXPECT_EQ(registry.GetGauge("spoke_memory_peak_bytes", "").Value(), 300);
  // Staged prefetches (the fetcher's staging buffer) have a series of their own.
  ASSERT_TRUE(b.TryAcquire(Use::kStaged, 100));
  EXPECT_EQ(registry.GetGauge("spoke_memory_used_bytes", "", {{"use", "staged"}}).Value(), 100);
  EXPECT_EQ(b.used(), 400u);
}

// What the process holds counts as well as what is accounted: background takers stop when
// either reaches their level, and get room again when the resident figure falls.
TEST(MemoryBudget, ResidentMemoryStopsBackgroundTakersLikeAccountedMemory) {
  metrics::Registry registry;
  MemoryBudget b(Budget(1000));
  b.ExportTo(registry);
  ASSERT_TRUE(b.TryAcquire(Use::kPrefetch, 100));
  b.SetResident(700);  // 600 held that no account covers
  EXPECT_EQ(registry.GetGauge("spoke_memory_resident_bytes", "").Value(), 700);
  EXPECT_FALSE(b.TryAcquire(Use::kHints, 51)) << "700 resident + 51 is over the 750 limit";
  EXPECT_TRUE(b.TryAcquire(Use::kHints, 50));
  EXPECT_EQ(b.refusals(Use::kHints), 1u);
  // Demand may still use the reserve; a move into the store queue at the demand level is
  // refused once resident memory is over the whole total.
  EXPECT_TRUE(b.TryAcquire(Use::kDemand, 200, Level::kDemand));
  b.SetResident(1001);
  EXPECT_FALSE(b.TryMove(Use::kDemand, Use::kStoreQueue, 200, Level::kDemand));
  b.Charge(Use::kDemand, 10);  // never refused
  // A waiter gets room when the resident figure falls, with nothing released.
  std::thread fall([&] {
    std::this_thread::sleep_for(20ms);
    b.SetResident(0);
  });
  EXPECT_TRUE(b.AcquireWait(Use::kPrefetch, 100, std::chrono::steady_clock::now() + 30s));
  fall.join();
  // Accounted memory above the resident figure (taken, not yet filled) still counts.
  EXPECT_EQ(b.used(), 460u);
  EXPECT_FALSE(b.TryAcquire(Use::kPrefetch, 291));
  EXPECT_TRUE(b.TryAcquire(Use::kPrefetch, 290));
}

// The watch reports what the process holds over its start: memory touched after it started
// shows within a few periods, and goes again once freed.
TEST(ResidentWatch, TellsTheBudgetWhatTheProcessHoldsOverItsStart) {
  ASSERT_TRUE(AnonResidentBytes().has_value());
  MemoryBudget b(Budget(1ull << 40));
  ResidentWatch watch(b, 5ms);
  EXPECT_GT(watch.start_bytes(), 0u);
  const auto until = [&](auto pred) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return pred();
  };
  constexpr size_t kHeld = 64u << 20;
  // Mapped here, not allocated: a sanitizer's allocator would keep freed memory resident.
  void* held = ::mmap(nullptr, kHeld, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(held, MAP_FAILED);
  std::memset(held, 1, kHeld);
  EXPECT_TRUE(until([&] { return b.resident() >= kHeld * 9 / 10; })) << b.resident();
  ::munmap(held, kHeld);
  EXPECT_TRUE(until([&] { return b.resident() < kHeld / 2; })) << b.resident();
}

}  // namespace
}  // namespace spoke
