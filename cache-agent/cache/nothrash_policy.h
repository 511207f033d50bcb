// NoThrashPolicy: an EvictionPolicy for working sets larger than the cache. LRU cycles such
// a working set; this policy keeps a stable LRU segment (newcomers enter at the eviction end,
// as in LIP) and gives prefetches a small transient segment in which a prefetch never evicts
// a block predicted to be needed sooner. predicted_use is a rank in block reads, as
// PrefetchScheduler produces it. The segments and the admission rule: docs/design.md,
// "NoThrash".
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
