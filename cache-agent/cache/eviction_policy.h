// EvictionPolicy decides which cached block goes when space is needed, and whether an
// incoming block is worth a victim at all. BlockCache calls it under its own lock, so
// implementations need no locking of their own.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <memory>
#include <optional>

#include "cache-agent/cache/block_key.h"

namespace spoke::agent {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual void OnInsert(const BlockKey& key, const AdmissionHint& hint) = 0;
  virtual void OnAccess(const BlockKey& key) = 0;
  virtual void OnRemove(const BlockKey& key) = 0;

  // The block to evict to make room for `incoming`, or nullopt to refuse admitting
  // `incoming` (e.g. a prefetch must not evict a block predicted to be needed sooner, or
  // a no-thrash policy keeping a stable subset). A demand block (hint.origin == kDemand)
  // should only be refused when nothing is evictable.
  virtual std::optional<BlockKey> PickVictim(const BlockKey& incoming,
                                             const AdmissionHint& hint) = 0;

  // Whether PickVictim would find a victim for a block with `hint` now, changing nothing.
  // The prefetcher asks before a block crosses the WAN, so that a block the policy would
  // refuse is not fetched at all. Asked only when the cache has no free room.
  virtual bool WouldAdmit(const AdmissionHint& hint) const = 0;
};

// O(1) LRU; a prefetch never evicts an unread prefetched block predicted to be needed sooner
// (lru_policy.h).
std::unique_ptr<EvictionPolicy> MakeLruPolicy();

}  // namespace spoke::agent
