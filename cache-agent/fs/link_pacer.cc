#include "cache-agent/fs/link_pacer.h"

#include <algorithm>

namespace spoke::agent {

namespace {
// An interval spans two round trips (at least 100 ms), so that its rate is not one read's
// burst; a window that is not full grows up to 4x an interval: a fast link is full a few
// intervals after the first window (16 -> 256 MiB in two), as TCP's slow start fills its path.
constexpr std::chrono::milliseconds kMinInterval{100};
constexpr double kMaxGrowth = 4.0;
}  // namespace

LinkPacer::LinkPacer(const Config& config, TimePoint now)
    : config_(config),
      window_(enabled() ? std::clamp(config.initial_window, config.min_window, config.max_window)
                        : config.max_window),
      interval_start_(now),
      half_start_(now) {}

LinkPacer::Duration LinkPacer::base_latency() const {
  Duration m = std::min(min_now_, min_before_);
  return m == Duration::max() ? Duration::zero() : m;
}

void LinkPacer::OnHeldBack(TimePoint now) {
  if (!held_back_) {
    interval_start_ = now;
    interval_bytes_ = 0;
  }
  held_back_ = true;
}

void LinkPacer::OnCompleted(uint64_t bytes, Duration latency, TimePoint now) {
  if (!enabled()) return;
  if (now - half_start_ >= config_.base_window / 2) {
    min_before_ = min_now_;
    min_now_ = Duration::max();
    half_start_ = now;
  }
  min_now_ = std::min(min_now_, latency);
  // An interval starts no earlier than its first read was sent: time the link sat idle
  // before (the mount, a pause of the loader) is not a slow link.
  if (interval_bytes_ == 0) interval_start_ = std::max(interval_start_, now - latency);
  interval_bytes_ += bytes;
  MaybeUpdate(now);
}

void LinkPacer::MaybeUpdate(TimePoint now) {
  const Duration base = base_latency();
  const Duration interval = std::max<Duration>(kMinInterval, 2 * base);
  const Duration elapsed = now - interval_start_;
  if (elapsed < interval) return;
  if (held_back_) {
    const double seconds = std::chrono::duration<double>(elapsed).count();
    const double rate = static_cast<double>(interval_bytes_) / seconds;
    const double horizon = std::chrono::duration<double>(base + config_.target_queue).count();
    const double grown = static_cast<double>(window_) * kMaxGrowth;
    const double next = std::min(rate * horizon, grown);
    window_ = std::clamp(static_cast<uint64_t>(next), config_.min_window, config_.max_window);
  }
  interval_start_ = now;
  interval_bytes_ = 0;
  held_back_ = false;
}

}  // namespace spoke::agent
