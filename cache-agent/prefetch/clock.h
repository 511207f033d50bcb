// Clock: the agent's time source (prefetcher, metadata cache, VolumeFs), injected so tests
// and the simulator run on virtual time. SystemClock is the agent's; ManualClock moves only
// when told to. (cache-agent/fs/clock.h forwards here: one Clock for the whole agent.)
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>

#include "cache-agent/prefetch/predictor.h"

namespace spoke::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  static SystemClock& Get() {
    static SystemClock clock;
    return clock;
  }
};

class ManualClock final : public Clock {
 public:
  SteadyTime Now() const override {
    return SteadyTime(std::chrono::nanoseconds(now_ns_.load(std::memory_order_relaxed)));
  }
  void Set(SteadyTime t) {
    now_ns_.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(),
        std::memory_order_relaxed);
  }
  void Advance(std::chrono::nanoseconds d) { now_ns_.fetch_add(d.count()); }

 private:
  // Starts at 1 s, not 0: a zero time_point means "never" to the metadata cache.
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace spoke::agent
