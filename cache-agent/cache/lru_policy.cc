#include "cache-agent/cache/lru_policy.h"

namespace spoke::agent {

void LruPolicy::OnInsert(const BlockKey& key, const AdmissionHint& hint) {
  if (auto it = map_.find(key); it != map_.end()) {
    lru_.erase(it->second);
    map_.erase(it);
  }
  lru_.push_front(Node{key, hint, false});
  map_.emplace(key, lru_.begin());
}

void LruPolicy::OnAccess(const BlockKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  it->second->read = true;
  lru_.splice(lru_.begin(), lru_, it->second);
}

void LruPolicy::OnRemove(const BlockKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  lru_.erase(it->second);
  map_.erase(it);
}

std::optional<BlockKey> LruPolicy::PickVictim(const BlockKey&, const AdmissionHint& hint) {
  if (!WouldAdmit(hint)) return std::nullopt;
  return lru_.back().key;
}

bool LruPolicy::WouldAdmit(const AdmissionHint& hint) const {
  if (lru_.empty()) return false;
  const Node& victim = lru_.back();
  return !(hint.origin != kDemand && victim.hint.origin != kDemand && !victim.read &&
           victim.hint.predicted_use < hint.predicted_use);
}

std::unique_ptr<EvictionPolicy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace spoke::agent
