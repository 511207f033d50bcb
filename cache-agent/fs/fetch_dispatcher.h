// FetchDispatcher: whether a queued fetch may go to its source now (a peer or the hub), and
// what is on the link. Hub slots: warm-up and prefetch never take the last `demand_reserved`.
// Bytes: readers' and background bytes in flight together stay within the LinkPacer's window,
// readers first (background takes what they leave; one block of each kind may always go).
// Not thread-safe: the BlockFetcher calls it under its mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <optional>

#include "cache-agent/fs/block_fetch.h"
#include "cache-agent/fs/link_pacer.h"

namespace spoke::agent {

class FetchDispatcher {
 public:
  using TimePoint = LinkPacer::TimePoint;

  struct Config {
    int max_inflight = 256;    // fetches sent and not answered, every class
    int demand_reserved = 32;  // slots warm-up and prefetch may not take (capped: one is theirs)
    LinkPacer::Config pacing{};
  };
  FetchDispatcher(const Config& config, TimePoint now);

  enum class Gate {
    kOpen,        // the class may send one more
    kWindowFull,  // the pacer's window holds the class back
    kNoSlot,      // no slot for this class nor a less urgent one
  };
  bool HasSlot() const { return inflight_ < config_.max_inflight; }
  Gate GateFor(int cls) const;
  // A queued fetch waited for the window (the pacer then measures the link's rate).
  void OnHeldBack() { pacer_.OnHeldBack(); }

  // `f` is sent: marks it dispatched and counts its slot and bytes.
  void OnSent(BlockFetch& f, TimePoint now);
  // `f` was answered. `hub_reply_bytes`: the size of a good hub reply, which times the link
  // (a peer's reply or an error does not). Returns whether the window was measured.
  bool OnAnswered(const BlockFetch& f, std::optional<uint64_t> hub_reply_bytes, TimePoint now);

  // Bytes the window lets on the link at once.
  uint64_t window() const { return pacer_.window(); }
  int inflight() const { return inflight_; }
  uint64_t demand_bytes() const { return demand_on_link_; }
  uint64_t background_bytes() const { return background_on_link_; }

 private:
  const Config config_;
  const int background_slots_;
  LinkPacer pacer_;
  int inflight_ = 0;
  // Readers' and warm-up/prefetch bytes sent (to the hub or a peer) and not answered yet.
  uint64_t demand_on_link_ = 0;
  uint64_t background_on_link_ = 0;
};

}  // namespace spoke::agent
