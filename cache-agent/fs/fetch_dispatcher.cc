#include "cache-agent/fs/fetch_dispatcher.h"

#include <algorithm>

namespace spoke::agent {

FetchDispatcher::FetchDispatcher(const Config& config, TimePoint now)
    : config_(config),
      background_slots_(std::max(
          1, config.max_inflight - std::min(config.demand_reserved, config.max_inflight - 1))),
      pacer_(config.pacing, now) {}

FetchDispatcher::Gate FetchDispatcher::GateFor(int cls) const {
  if (cls != kDemandClass && inflight_ >= background_slots_) return Gate::kNoSlot;
  if (!pacer_.enabled()) return Gate::kOpen;
  // One block of each kind may always go: readers never wait for background, and background
  // never stops.
  const uint64_t mine = cls == kDemandClass ? demand_on_link_ : background_on_link_;
  const bool full = mine > 0 && background_on_link_ + demand_on_link_ >= pacer_.window();
  return full ? Gate::kWindowFull : Gate::kOpen;
}

void FetchDispatcher::OnSent(BlockFetch& f, TimePoint now) {
  f.dispatched = true;
  f.dispatched_at = now;
  f.paced = f.cls != kDemandClass;
  (f.paced ? background_on_link_ : demand_on_link_) += f.length;
  inflight_++;
}

bool FetchDispatcher::OnAnswered(const BlockFetch& f, std::optional<uint64_t> hub_reply_bytes,
                                 TimePoint now) {
  inflight_--;
  (f.paced ? background_on_link_ : demand_on_link_) -= f.length;
  if (!hub_reply_bytes) return false;
  pacer_.OnCompleted(*hub_reply_bytes, now - f.dispatched_at, now);
  return true;
}

}  // namespace spoke::agent
