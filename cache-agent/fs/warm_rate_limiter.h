// WarmRateLimiter: a token bucket on the bytes one warm-up asks the hub (or the peers) for,
// so that a warm-up leaves the WAN to others ("rateLimit" of a SpokeWarmup). Only the warm-up
// that owns it waits: readers, the prefetcher and other warm-ups never see it.
//
// The bucket holds at most one second's worth of bytes (`burst_bytes`, at least one block) and
// refills at `bytes_per_second`. A block may go once the bucket holds its length (or is full,
// for a block larger than the bucket); the bucket may then run into debt by the rest, which
// later blocks wait for. So over any interval of length T the bytes granted are at most
// burst + rate x T + one block. Time and waiting are injected: tests run on a ManualClock.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "cache-agent/fs/clock.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class WarmRateLimiter {
 public:
  // Waits until `until` (or shorter: the limiter looks at its cancel flag every step).
  using SleepUntil = std::function<void(SteadyTime until)>;

  // `bytes_per_second` > 0. `sleep_until` null = a real sleep (the agent's); tests advance
  // their ManualClock in it. `clock` must outlive the limiter.
  WarmRateLimiter(uint64_t bytes_per_second, const Clock& clock, SleepUntil sleep_until = nullptr);

  // How long before `bytes` may go (zero: now, and they are taken from the bucket).
  std::chrono::nanoseconds TryTake(uint64_t bytes) EXCLUDES(mu_);
  // Waits until `bytes` may go and takes them. False when `cancelled` (optional) became true
  // first (nothing taken); it is looked at at least every 100 ms.
  bool Take(uint64_t bytes, const std::atomic<bool>* cancelled = nullptr) EXCLUDES(mu_);

  uint64_t bytes_per_second() const { return rate_; }
  uint64_t burst_bytes() const { return burst_; }
  uint64_t granted_bytes() const EXCLUDES(mu_);
  // Time spent waiting for the bucket (on the injected clock).
  std::chrono::nanoseconds waited() const EXCLUDES(mu_);

 private:
  void RefillLocked(SteadyTime now) REQUIRES(mu_);

  const uint64_t rate_;
  const uint64_t burst_;
  const Clock& clock_;
  SleepUntil sleep_until_;
  mutable Mutex mu_;
  double tokens_ GUARDED_BY(mu_);  // may be negative: a block larger than what was left
  SteadyTime last_ GUARDED_BY(mu_);
  uint64_t granted_ GUARDED_BY(mu_) = 0;
  std::chrono::nanoseconds waited_ GUARDED_BY(mu_){0};
};

}  // namespace spoke::agent
