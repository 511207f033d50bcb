// FetchDispatcher: whether a queued fetch may go on its route now (the hub, or the source: the
// cluster's peers), and what is on each. Slots, shared by both routes: warm-up and prefetch
// never take the last `demand_reserved`, and on the source's route at most half of theirs
// (asks there wait for the owners' hub reads; an owner's own hub reads, which answer its
// peers, must not wait for slots its asks hold, or agents wait on each other). Bytes: each route
// has its own window, so that each learns from the replies of the bytes it holds: the hub's a
// LinkPacer timed by hub replies only, the source's a SourceWindow that grows with peer replies and
// halves when an owner refuses an ask as busy. (One window over both, taught by hub replies only,
// shrinks with the share of peer asks: with n agents about (n-1)/n of a cold fill's bytes are asked
// of peers, and the rate it learns is the hub's 1/n.) On a route, readers' and background bytes in
// flight together stay within its window, readers first (background takes what they leave;
// one block of each kind may always go). A source ask that failed leaves the source's count;
// the fetcher queues it again, for the hub (whose window then holds it like any hub read) or,
// for a background ask a busy owner refused, for the source (up to `source_busy_retries`).
// Not thread-safe: the BlockFetcher calls it under its mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <optional>

#include "cache-agent/fs/block_fetch.h"
#include "cache-agent/fs/link_pacer.h"
#include "cache-agent/fs/source_window.h"

namespace spoke::agent {

class FetchDispatcher {
 public:
  using TimePoint = LinkPacer::TimePoint;

  struct Config {
    int max_inflight = 256;    // fetches sent and not answered, every class and route
    int demand_reserved = 32;  // slots warm-up and prefetch may not take (capped: one is theirs)
    LinkPacer::Config pacing{};
    SourceWindow::Config source{};
    // Times a background ask refused by a busy owner is queued for the source again before it
    // goes to the hub: the owner reads the block for its own readers or other askers soon, and
    // a hub read now would cross the WAN twice for the cluster.
    int source_busy_retries = 8;
  };
  FetchDispatcher(const Config& config, TimePoint now);

  enum class Gate {
    kOpen,        // the class may send one more on the route
    kWindowFull,  // the route's window holds the class back
    kNoSlot,      // no slot for this class nor a less urgent one
  };
  bool HasSlot() const { return inflight_ < config_.max_inflight; }
  Gate GateFor(int cls, FetchRoute route = kHubRoute) const;
  // A queued hub fetch waited for the window (the pacer then measures the link's rate).
  void OnHeldBack(TimePoint now) { pacer_.OnHeldBack(now); }

  // `f` is sent on f.route: marks it dispatched and counts its slot and bytes there.
  void OnSent(BlockFetch& f, TimePoint now);
  // `f` was answered. `reply_bytes`: the size of a good reply, which teaches the window of the
  // route it came by (`from_hub`: a source that declined at once sends to the hub itself).
  // Returns whether the hub's window was measured.
  bool OnAnswered(const BlockFetch& f, std::optional<uint64_t> reply_bytes, bool from_hub,
                  TimePoint now);
  // `f`'s source ask failed (`busy`: the owner refused it for its quota, which halves the
  // source's window): its slot and bytes leave the count, and `f` is no longer dispatched (the
  // caller queues it again). Routed to the hub, but a background ask refused as busy stays on
  // the source up to `source_busy_retries` times: it goes again when the halved window has
  // room (other asks answered), and the hub would read it twice for the cluster.
  void OnSourceFailed(BlockFetch& f, bool busy, TimePoint now);

  // Bytes the route's window lets on it at once.
  uint64_t window(FetchRoute route = kHubRoute) const {
    return route == kHubRoute ? pacer_.window() : source_.window();
  }
  int inflight() const { return inflight_; }
  uint64_t demand_bytes(FetchRoute route = kHubRoute) const { return on_[route].demand; }
  uint64_t background_bytes(FetchRoute route = kHubRoute) const { return on_[route].background; }

 private:
  // Readers' and warm-up/prefetch bytes sent on a route and not answered yet.
  struct OnRoute {
    uint64_t demand = 0;
    uint64_t background = 0;
  };
  void Uncount(const BlockFetch& f);

  const Config config_;
  const int background_slots_;
  const int source_background_slots_;  // half of them: the most the source's may take
  LinkPacer pacer_;
  SourceWindow source_;
  int inflight_ = 0;
  int background_inflight_[kFetchRoutes] = {0, 0};
  OnRoute on_[kFetchRoutes];
};

}  // namespace spoke::agent
