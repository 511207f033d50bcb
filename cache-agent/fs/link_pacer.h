// LinkPacer: how many bytes the fetcher keeps in flight to the hub, readers' and background
// reads (warm-up, prefetch) together, so that background reads fill the WAN link without
// building a queue in it: they take what readers leave of the window.
//
// Why: on a link slower than the fetcher's in-flight bound (192 MiB is 27 s at 7.2 MB/s),
// everything sent waits in the link's queue (the routers', the hub's socket buffers), and a
// reader's block asked for behind it waits as long, past the hub timeout: the read fails,
// and the bytes of the timed-out read still cross the link. Reserved hub slots do not help:
// the queue is in the network, not in the fetcher.
//
// How (delay-based, like TCP Vegas or LEDBAT for background transfers): every interval in
// which reads (readers' or background) were held back by the window, the window becomes
//     delivered rate x (lowest latency seen + target queue delay)
// where the delivered rate counts every hub read completed in the interval (readers' too)
// and the lowest latency is the minimum over recent reads (its round trip with no queue).
// - Link not full: reads see no queue, latency ~ the minimum, so the window grows by
//   (minimum + target) / latency (at most 4x an interval) until the link is full.
// - Link full: the rate is the link's; a window of rate x (minimum + target) leaves
//   `target` of queue in the link, which is what a reader's block waits behind.
// Intervals without held-back reads do not move it (the rate then measures what was asked
// for, not the link), and an interval is measured from its first held-back read. Starts at
// `initial` bytes (a bound on the first burst's queue), within [min, max]. Not thread-safe: the
// fetcher calls it under its mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>

namespace spoke::agent {

class LinkPacer {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Config {
    // Queue delay the window leaves in the link: what a reader's block waits behind
    // background reads. 0 = no pacing (the window is `max`).
    std::chrono::milliseconds target_queue{0};
    uint64_t min_window = 1ull << 20;  // one block: the check lets one more go
    uint64_t initial_window = 16ull << 20;
    uint64_t max_window = 192ull << 20;
    // The lowest latency is kept over about this long (two halves): a path that got slower
    // is learnt within it, a queue that lasts shorter never counts as the base.
    std::chrono::seconds base_window{120};
  };

  explicit LinkPacer(const Config& config, TimePoint now);

  bool enabled() const { return config_.target_queue.count() > 0; }
  // Bytes allowed on the hub, readers' and background together.
  uint64_t window() const { return window_; }
  // The lowest latency seen over the base window (zero before any read).
  Duration base_latency() const;

  // A hub read of `bytes` completed `latency` after it was sent (any class).
  void OnCompleted(uint64_t bytes, Duration latency, TimePoint now);
  // A read waited for the window (the window, not the link, bounded it). The first in an
  // interval starts the interval again: its rate is measured from when the window bound,
  // not over the time before, when fewer reads were asked for than it allowed (readers
  // starting after a mount would otherwise cut a fast link's window to a quarter).
  void OnHeldBack(TimePoint now);

 private:
  void MaybeUpdate(TimePoint now);

  Config config_;
  uint64_t window_;
  // Interval being measured.
  TimePoint interval_start_;
  uint64_t interval_bytes_ = 0;
  bool held_back_ = false;
  // Lowest latency: this half of the base window and the one before it.
  Duration min_now_ = Duration::max();
  Duration min_before_ = Duration::max();
  TimePoint half_start_;
};

}  // namespace spoke::agent
