// WarmRateLimiter on a ManualClock: the bytes it grants in any window are bounded by the
// bucket and the rate, a block larger than the bucket still goes, and a cancel ends a wait.
#include "cache-agent/fs/warm_rate_limiter.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;

// Grants of `block` bytes for `seconds` of virtual time; each wait advances the clock.
std::vector<std::pair<SteadyTime, uint64_t>> TakeFor(WarmRateLimiter& limiter, ManualClock& clock,
                                                     uint64_t block, std::chrono::seconds seconds) {
  std::vector<std::pair<SteadyTime, uint64_t>> grants;
  const SteadyTime end = clock.Now() + seconds;
  while (clock.Now() < end) {
    EXPECT_TRUE(limiter.Take(block));
    grants.emplace_back(clock.Now(), block);
  }
  return grants;
}

TEST(WarmRateLimiter, BytesPerWindowStayWithinTheRate) {
  ManualClock clock;
  constexpr uint64_t kRate = 10 << 20;  // 10 MiB/s
  constexpr uint64_t kBlock = 1 << 20;
  WarmRateLimiter limiter(kRate, clock, [&](SteadyTime until) { clock.Set(until); });
  const SteadyTime start = clock.Now();
  auto grants = TakeFor(limiter, clock, kBlock, 20s);
  // Every window [t, t + w): at most burst + rate x w + one block.
  for (auto w : {100ms, 1000ms, 5000ms}) {
    for (size_t i = 0; i < grants.size(); ++i) {
      uint64_t bytes = 0;
      for (size_t j = i; j < grants.size() && grants[j].first < grants[i].first + w; ++j) {
        bytes += grants[j].second;
      }
      const double bound = static_cast<double>(limiter.burst_bytes() + kBlock) +
                           static_cast<double>(kRate) * std::chrono::duration<double>(w).count();
      ASSERT_LE(static_cast<double>(bytes), bound) << "window " << w.count() << " ms at " << i;
    }
  }
  // And it does not hold back more than it must: 20 s give about 20 x rate + the burst.
  const double secs = std::chrono::duration<double>(clock.Now() - start).count();
  EXPECT_GE(limiter.granted_bytes(), static_cast<uint64_t>(secs * kRate));
  EXPECT_LE(limiter.granted_bytes(),
            static_cast<uint64_t>(secs * kRate) + limiter.burst_bytes() + kBlock);
  EXPECT_GT(limiter.waited(), 15s);
}

TEST(WarmRateLimiter, ABlockLargerThanTheBucketGoesWhenItIsFull) {
  ManualClock clock;
  WarmRateLimiter limiter(1000, clock, [&](SteadyTime until) { clock.Set(until); });
  const SteadyTime start = clock.Now();
  EXPECT_EQ(limiter.TryTake(4000).count(), 0) << "a full bucket lets it go";
  // Now 3000 bytes in debt: the next block waits for the debt and its own share.
  EXPECT_GT(limiter.TryTake(500), 3s);
  EXPECT_TRUE(limiter.Take(500));
  EXPECT_GE(clock.Now() - start, 3500ms);
  EXPECT_EQ(limiter.granted_bytes(), 4500u);
}

TEST(WarmRateLimiter, ACancelEndsTheWaitAndTakesNothing) {
  ManualClock clock;
  std::atomic<bool> cancelled{false};
  int sleeps = 0;
  WarmRateLimiter limiter(1000, clock, [&](SteadyTime until) {
    clock.Set(until);
    if (++sleeps == 3) cancelled = true;
  });
  EXPECT_TRUE(limiter.Take(1000, &cancelled));
  EXPECT_FALSE(limiter.Take(1000, &cancelled));
  EXPECT_EQ(sleeps, 3) << "the flag is looked at every step (100 ms), not after the whole wait";
  EXPECT_EQ(limiter.granted_bytes(), 1000u);
}

}  // namespace
}  // namespace spoke::agent
