// SourceWindow: how many bytes the fetcher keeps in flight to the BlockSource (the cluster's
// peers), readers' and background asks together.
//
// Why not a LinkPacer: a peer answers from its cache in a LAN round trip or after reading the
// hub itself (a WAN round trip), so latency says how many asks missed there, not that a queue
// builds. What says "too many" is a refusal: an owner's serving quota was full. So the window
// is additive increase, multiplicative decrease, as TCP's congestion avoidance: each good reply
// grows it by `step` x bytes / window (one step per window of replies), a refusal halves it,
// at most once per `cut_spacing` (the refusals of one burst count once). Within [min, max].
// Not thread-safe: the fetcher calls it under its mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <optional>

namespace spoke::agent {

class SourceWindow {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Config {
    uint64_t min_window = 1ull << 20;  // one block: the check lets one more go
    uint64_t initial_window = 16ull << 20;
    uint64_t max_window = 192ull << 20;
    uint64_t step = 1ull << 20;
    std::chrono::milliseconds cut_spacing{50};
  };

  explicit SourceWindow(const Config& config);

  uint64_t window() const { return window_; }
  // A good reply of `bytes`.
  void OnReply(uint64_t bytes);
  // An ask refused because the owner was busy.
  void OnRefused(TimePoint now);

 private:
  const Config config_;
  uint64_t window_;
  std::optional<TimePoint> last_cut_;
};

}  // namespace spoke::agent
