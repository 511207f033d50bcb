// Injected time for the metadata cache and the prefetcher (tests use a manual clock).
#pragma once

#include <atomic>
#include <chrono>

namespace spoke::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  static SystemClock& Get() {
    static SystemClock clock;
    return clock;
  }
};

// A clock that only moves when told to.
class ManualClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns_.load()));
  }
  void Advance(std::chrono::nanoseconds d) { ns_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> ns_{1'000'000'000};
};

}  // namespace spoke::agent
