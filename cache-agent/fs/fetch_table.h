// FetchTable: the blocks being fetched, one BlockFetch per key that every asker of the block
// joins (readers, warm-up, prefetch), and the queues of those not sent yet, one per route
// (hub, source) and class. A block asked for in a more urgent class is promoted: queued again
// there, on the same route. Not thread-safe:
// the BlockFetcher holds it, and every BlockFetch it hands out, under its mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache-agent/fs/block_fetch.h"

namespace spoke::agent {

class FetchTable {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  // The block a new fetch reads.
  struct Block {
    const std::string& path;
    uint64_t offset = 0;
    uint32_t length = 0;
    bool written_here = false;
    const Credentials* reader = nullptr;  // FileRef::reader; null: the volume's identity
    FetchRoute route = kHubRoute;         // where a new fetch is queued
  };
  // Who asks for a block.
  struct Ask {
    FetchClass cls = kDemandClass;
    ExpertId expert = kDemand;
    double predicted_use = 0;
    SteadyTime deadline{};  // a reader's (demand only)
  };
  struct Joined {
    BlockFetchPtr fetch;
    bool created = false;   // made and queued by this ask
    bool promoted = false;  // was in a less urgent class
  };

  // The fetch of `key`: joined (its deadline, warm-up waiter and class updated by `ask`), or
  // made for `block` and queued in ask.cls when there is none.
  Joined Join(const BlockKey& key, const Block& block, const Ask& ask);
  // Adds a fetch that is done already (its bytes wait for a store thread): joinable until it
  // leaves. Replaces no fetch: the caller checked Contains.
  void AddDone(BlockFetchPtr f);
  bool Contains(const BlockKey& key) const { return fetches_.contains(key); }
  // Takes `f` out of the table (not a later fetch of the same key).
  void Erase(const BlockFetch& f);

  // The next fetch of class `cls` to send on `route`, or null. Skips entries sent, done or
  // promoted since queued; a demand fetch every reader gave up on (its latest deadline passed,
  // no warm-up waits) is failed with kTimeout, taken out and appended to `expired`.
  BlockFetchPtr PopQueued(int cls, SteadyTime now, std::vector<BlockFetchPtr>* expired,
                          FetchRoute route = kHubRoute);
  // Queues `f` again, sent and handed back unanswered (dispatched false), at the front of its
  // route's and class's queue: it was next once already.
  void Requeue(BlockFetchPtr f);
  // Whether any queue of `route` of class `cls` or a less urgent one holds an entry.
  bool QueuedFrom(int cls, FetchRoute route = kHubRoute) const;
  // Fails every queued fetch not sent yet with `error`, takes them out and empties the
  // queues; returns them.
  std::vector<BlockFetchPtr> CancelQueued(const Error& error);

 private:
  std::unordered_map<BlockKey, BlockFetchPtr, BlockKeyHash> fetches_;
  std::deque<BlockFetchPtr> queues_[kFetchRoutes][kFetchClasses];
};

}  // namespace spoke::agent
