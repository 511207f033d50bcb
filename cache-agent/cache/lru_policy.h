// LruPolicy: least-recently-used eviction in O(1) (a list in recency order + a hash map into
// it), with one admission rule for prefetches:
//
//   A prefetch never evicts a block predicted to be needed sooner than the one it brings.
//
// Concretely, PickVictim for an incoming block with hint.origin != kDemand returns nullopt
// (refuse) when the LRU victim was itself inserted by a prefetch, has not been read since,
// and its predicted_use is strictly lower (sooner) than the incoming hint's. Only the LRU tail
// is considered (no search): keeping the rule O(1) and predictable matters more than finding
// another victim, and the prefetcher retries later when the tail has moved. Demand blocks are
// never refused while anything is cached.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <list>
#include <optional>
#include <unordered_map>

#include "cache-agent/cache/eviction_policy.h"

namespace spoke::agent {

class LruPolicy final : public EvictionPolicy {
 public:
  void OnInsert(const BlockKey& key, const AdmissionHint& hint) override;
  void OnAccess(const BlockKey& key) override;
  void OnRemove(const BlockKey& key) override;
  std::optional<BlockKey> PickVictim(const BlockKey& incoming, const AdmissionHint& hint) override;
  bool WouldAdmit(const AdmissionHint& hint) const override;

  size_t size() const { return map_.size(); }

 private:
  struct Node {
    BlockKey key;
    AdmissionHint hint;
    bool read = false;
  };
  std::list<Node> lru_;  // front = most recently used
  std::unordered_map<BlockKey, std::list<Node>::iterator, BlockKeyHash> map_;
};

}  // namespace spoke::agent
