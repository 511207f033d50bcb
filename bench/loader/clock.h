// Time source for the loader, injectable so tests are deterministic.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace spoke::bench {

using Nanos = std::chrono::nanoseconds;

// A monotonic clock with an arbitrary origin. Implementations must be safe to call from
// several threads at once.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos Now() const = 0;
  // Blocks until Now() >= deadline (returns at once when it already is).
  virtual void SleepUntil(Nanos deadline) = 0;
};

// The real thing: std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  Nanos Now() const override {
    return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
  }
  void SleepUntil(Nanos deadline) override {
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline)));
  }
};

// A clock that only moves when told to: SleepUntil jumps straight to the deadline, Advance
// moves it forward. For tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos(0)) : now_(start.count()) {}
  Nanos Now() const override { return Nanos(now_.load()); }
  void SleepUntil(Nanos deadline) override {
    auto cur = now_.load();
    while (cur < deadline.count() && !now_.compare_exchange_weak(cur, deadline.count())) {
    }
  }
  void Advance(Nanos d) { now_.fetch_add(d.count()); }

 private:
  std::atomic<Nanos::rep> now_;
};

inline double ToSeconds(Nanos d) { return std::chrono::duration<double>(d).count(); }
inline Nanos FromSeconds(double s) {
  return std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(s));
}

}  // namespace spoke::bench
