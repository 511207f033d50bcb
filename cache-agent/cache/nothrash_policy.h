// NoThrashPolicy: an EvictionPolicy for working sets larger than the cache.
//
// LRU cycles such a working set: with a dataset of twice the cache read in a fresh random
// order every epoch, a block is evicted before its next read about 7 times in 8, and with a
// fixed order every time. NoThrashPolicy keeps a stable subset instead (the LIP idea:
// newcomers enter at the eviction end), so the hit rate approaches cache/dataset, and it
// lets prefetches use a small transient area without ever evicting a block predicted to be
// needed sooner than the one they bring (Belady's rule on the predictions we have).
//
// Two segments:
//  - stable: every block admitted while the cache is filling (before the first
//    PickVictim), LRU-ordered. After that it only loses blocks that went stale (not read
//    for `stale_factor` x capacity block accesses — the working set moved on, e.g. a new
//    job) and, once, the blocks needed to give the transient segment its share.
//  - transient (`transient_fraction` of the cache to start with): blocks admitted once the
//    cache is full. A demand block or a prefetched block that was read has no further predicted use
//    and goes first (oldest first). A prefetched block not yet read is due at
//    clock + predicted_use; it goes when its due point passed by more than
//    predicted_use + `grace_blocks` (a wrong prediction), or when an incoming block is due
//    sooner.
// The policy clock counts block accesses (OnInsert, and OnAccess of a block other than the
// previous one — a 1 MiB block read in 128 KiB FUSE reads counts once), so predicted_use is
// taken as a rank in block reads, as PrefetchScheduler produces it.
//
// Admission: a demand block always gets a victim while anything is cached. A prefetch is
// refused (nullopt) when the only candidates are stable blocks, or transient blocks due
// no later than it — except that a *timely* prefetch (predicted_use below one cache-full of
// block reads: hints, epoch replay, read-ahead) that would be refused grows the transient
// share by one block (up to `max_transient_fraction`), taking the stable LRU block: exact
// predictions turn a transient slot over many times per epoch, a stable block gives one
// hit per epoch. Each transient block that expires unread (a wrong prediction) gives one
// block back to the stable share (down to `transient_fraction`). A random-order working-set
// prediction (rank ~ half an epoch) is never timely, so it cannot erode the stable set.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "cache-agent/cache/eviction_policy.h"
#include "common/status.h"

namespace spoke::agent {

class NoThrashPolicy final : public EvictionPolicy {
 public:
  struct Config {
    // 1/32 of the cache for newcomers: keeps >= 97 % of the cache stable (hit rate close to
    // cache/dataset) while leaving room for a bandwidth x RTT of just-in-time prefetches.
    double transient_fraction = 1.0 / 32;
    // Stable blocks unread for 8 cache-fulls of accesses are released: working sets up to
    // 8x the cache keep their subset; a moved-on workload frees the cache in bounded time.
    double stale_factor = 8;
    // Upper bound of the transient share when prefetches prove timely: a quarter keeps at
    // least 3/4 of the cache stable even when every prefetch is exact.
    double max_transient_fraction = 0.25;
    uint64_t grace_blocks = 256;  // slack before a prefetched block counts as overdue (as the
                                  // scheduler's min_horizon_blocks)
    Status Validate() const;
  };

  NoThrashPolicy() : NoThrashPolicy(Config{}) {}
  explicit NoThrashPolicy(Config config);

  void OnInsert(const BlockKey& key, const AdmissionHint& hint) override;
  void OnAccess(const BlockKey& key) override;
  void OnRemove(const BlockKey& key) override;
  std::optional<BlockKey> PickVictim(const BlockKey& incoming, const AdmissionHint& hint) override;
  bool WouldAdmit(const AdmissionHint& hint) const override;

  // Introspection (tests, stats).
  size_t stable_blocks() const { return stable_.size(); }
  size_t transient_blocks() const { return by_due_.size(); }
  size_t transient_share() const { return capacity_ - stable_cap_; }
  bool full() const { return full_; }

 private:
  static constexpr double kNever = 1e300;
  struct Node {
    bool stable = true;
    std::list<BlockKey>::iterator lru;  // stable only
    uint64_t last_access = 0;
    double due = kNever;    // transient: clock at which it is expected to be read
    uint64_t deadline = 0;  // transient: after this the prediction failed (0 = no use left)
    uint64_t seq = 0;
  };
  void Tick(const BlockKey& key);
  void EraseTransientIndex(const BlockKey& key, const Node& n);
  void IndexTransient(const BlockKey& key, const Node& n);

  Config config_;
  std::unordered_map<BlockKey, Node, BlockKeyHash> nodes_;
  std::list<BlockKey> stable_;                                     // front = most recently used
  std::map<std::pair<double, uint64_t>, BlockKey> by_due_;         // transient
  std::map<std::pair<uint64_t, uint64_t>, BlockKey> by_deadline_;  // transient
  uint64_t clock_ = 0;
  uint64_t seq_ = 0;
  BlockKey last_{};
  bool have_last_ = false;
  bool full_ = false;
  size_t capacity_ = 0;
  size_t stable_cap_ = 0;
  size_t min_transient_ = 1, max_transient_ = 1;
};

}  // namespace spoke::agent
