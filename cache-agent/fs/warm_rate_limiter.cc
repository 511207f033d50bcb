#include "cache-agent/fs/warm_rate_limiter.h"

#include <algorithm>
#include <thread>

namespace spoke::agent {

namespace {
constexpr std::chrono::milliseconds kCancelStep{100};
}  // namespace

WarmRateLimiter::WarmRateLimiter(uint64_t bytes_per_second, const Clock& clock,
                                 SleepUntil sleep_until)
    : rate_(std::max<uint64_t>(bytes_per_second, 1)),
      burst_(rate_),  // one second's worth: a short burst, then the rate
      clock_(clock),
      sleep_until_(std::move(sleep_until)),
      tokens_(static_cast<double>(burst_)),
      last_(clock.Now()) {
  if (!sleep_until_) {
    sleep_until_ = [this](SteadyTime until) {
      const auto d = until - clock_.Now();
      if (d.count() > 0) std::this_thread::sleep_for(d);
    };
  }
}

void WarmRateLimiter::RefillLocked(SteadyTime now) {
  if (now <= last_) return;
  const double secs = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + secs * static_cast<double>(rate_));
  last_ = now;
}

std::chrono::nanoseconds WarmRateLimiter::TryTake(uint64_t bytes) {
  MutexLock lock(mu_);
  RefillLocked(clock_.Now());
  // A block larger than the bucket goes once the bucket is full (then it is in debt).
  const double need = static_cast<double>(std::min(bytes, burst_));
  if (tokens_ >= need) {
    tokens_ -= static_cast<double>(bytes);
    granted_ += bytes;
    return std::chrono::nanoseconds(0);
  }
  const double secs = (need - tokens_) / static_cast<double>(rate_);
  return std::max(std::chrono::nanoseconds(1),
                  std::chrono::nanoseconds(static_cast<int64_t>(secs * 1e9) + 1));
}

bool WarmRateLimiter::Take(uint64_t bytes, const std::atomic<bool>* cancelled) {
  while (true) {
    if (cancelled != nullptr && cancelled->load()) return false;
    const auto wait = TryTake(bytes);
    if (wait.count() == 0) return true;
    const auto step = std::min<std::chrono::nanoseconds>(wait, kCancelStep);
    const SteadyTime before = clock_.Now();
    sleep_until_(before + step);
    const auto slept = clock_.Now() - before;
    MutexLock lock(mu_);
    waited_ += std::chrono::duration_cast<std::chrono::nanoseconds>(slept);
  }
}

uint64_t WarmRateLimiter::granted_bytes() const {
  MutexLock lock(mu_);
  return granted_;
}

std::chrono::nanoseconds WarmRateLimiter::waited() const {
  MutexLock lock(mu_);
  return waited_;
}

}  // namespace spoke::agent
