#include "cache-agent/fs/fetch_dispatcher.h"

#include <algorithm>

namespace spoke::agent {

FetchDispatcher::FetchDispatcher(const Config& config, TimePoint now)
    : config_(config),
      background_slots_(std::max(
          1, config.max_inflight - std::min(config.demand_reserved, config.max_inflight - 1))),
      source_background_slots_(std::max(1, background_slots_ / 2)),
      pacer_(config.pacing, now),
      source_(config.source) {}

FetchDispatcher::Gate FetchDispatcher::GateFor(int cls, FetchRoute route) const {
  if (cls != kDemandClass && inflight_ >= background_slots_) return Gate::kNoSlot;
  // Background asks of peers wait there for the owners' hub reads; an owner's own hub reads
  // (its share, and its peers' asks it serves) must never wait for slots they hold.
  if (cls != kDemandClass && route == kSourceRoute &&
      background_inflight_[kSourceRoute] >= source_background_slots_) {
    return Gate::kWindowFull;
  }
  if (route == kHubRoute && !pacer_.enabled()) return Gate::kOpen;
  // One block of each kind may always go: readers never wait for background, and background
  // never stops.
  const OnRoute& on = on_[route];
  const uint64_t mine = cls == kDemandClass ? on.demand : on.background;
  const bool full = mine > 0 && on.background + on.demand >= window(route);
  return full ? Gate::kWindowFull : Gate::kOpen;
}

void FetchDispatcher::OnSent(BlockFetch& f, TimePoint now) {
  f.dispatched = true;
  f.dispatched_at = now;
  f.paced = f.cls != kDemandClass;
  (f.paced ? on_[f.route].background : on_[f.route].demand) += f.length;
  inflight_++;
  if (f.paced) background_inflight_[f.route]++;
}

void FetchDispatcher::Uncount(const BlockFetch& f) {
  inflight_--;
  (f.paced ? on_[f.route].background : on_[f.route].demand) -= f.length;
  if (f.paced) background_inflight_[f.route]--;
}

bool FetchDispatcher::OnAnswered(const BlockFetch& f, std::optional<uint64_t> reply_bytes,
                                 bool from_hub, TimePoint now) {
  Uncount(f);
  if (!reply_bytes) return false;
  if (!from_hub) {
    source_.OnReply(*reply_bytes);
    return false;
  }
  // A hub reply of a fetch counted on the source's window (the source declined it when it was
  // sent) times the link as well as any.
  pacer_.OnCompleted(*reply_bytes, now - f.dispatched_at, now);
  return true;
}

void FetchDispatcher::OnSourceFailed(BlockFetch& f, bool busy, TimePoint now) {
  Uncount(f);
  if (busy) source_.OnRefused(now);
  f.dispatched = false;
  const bool retry =
      busy && f.cls != kDemandClass && f.source_busy_retries < config_.source_busy_retries;
  f.source_busy_retries += retry ? 1 : 0;
  f.route = retry ? kSourceRoute : kHubRoute;
}

}  // namespace spoke::agent
