#include "cache-agent/cache/nothrash_policy.h"

#include <algorithm>
#include <cassert>

namespace spoke::agent {

Status NoThrashPolicy::Config::Validate() const {
  if (!(transient_fraction > 0 && transient_fraction < 1)) {
    return Fail(Code::kInvalidArgument, "nothrash: transient_fraction must be in (0, 1)");
  }
  if (!(max_transient_fraction >= transient_fraction && max_transient_fraction < 1)) {
    return Fail(Code::kInvalidArgument,
                "nothrash: max_transient_fraction must be in [transient_fraction, 1)");
  }
  if (!(stale_factor >= 1)) {
    return Fail(Code::kInvalidArgument, "nothrash: stale_factor must be >= 1");
  }
  return Ok();
}

NoThrashPolicy::NoThrashPolicy(Config config) : config_(config) {
  assert(config_.Validate().has_value());
}

void NoThrashPolicy::Tick(const BlockKey& key) {
  if (have_last_ && key == last_) return;
  last_ = key;
  have_last_ = true;
  ++clock_;
}

void NoThrashPolicy::EraseTransientIndex(const BlockKey&, const Node& n) {
  by_due_.erase({n.due, n.seq});
  by_deadline_.erase({n.deadline, n.seq});
}

void NoThrashPolicy::IndexTransient(const BlockKey& key, const Node& n) {
  by_due_.emplace(std::make_pair(n.due, n.seq), key);
  by_deadline_.emplace(std::make_pair(n.deadline, n.seq), key);
}

void NoThrashPolicy::OnInsert(const BlockKey& key, const AdmissionHint& hint) {
  if (nodes_.contains(key)) OnRemove(key);
  Tick(key);
  Node n;
  n.seq = ++seq_;
  n.last_access = clock_;
  if (!full_ || stable_.size() < stable_cap_) {
    n.stable = true;
    stable_.push_front(key);
    n.lru = stable_.begin();
    nodes_.emplace(key, n);
    return;
  }
  n.stable = false;
  if (hint.origin != kDemand && hint.predicted_use < kNever / 2) {
    const double use = std::max(0.0, hint.predicted_use);
    n.due = static_cast<double>(clock_) + use;
    n.deadline = clock_ + static_cast<uint64_t>(2 * use) + config_.grace_blocks;
  }  // else: demand block, no further use predicted (due = never, deadline = 0)
  nodes_.emplace(key, n);
  IndexTransient(key, n);
}

void NoThrashPolicy::OnAccess(const BlockKey& key) {
  Tick(key);
  auto it = nodes_.find(key);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  n.last_access = clock_;
  if (n.stable) {
    stable_.splice(stable_.begin(), stable_, n.lru);
    return;
  }
  // The prediction came true: no further use is predicted.
  if (n.deadline != 0) {
    EraseTransientIndex(key, n);
    n.due = kNever;
    n.deadline = 0;
    IndexTransient(key, n);
  }
}

void NoThrashPolicy::OnRemove(const BlockKey& key) {
  auto it = nodes_.find(key);
  if (it == nodes_.end()) return;
  if (it->second.stable) {
    stable_.erase(it->second.lru);
  } else {
    EraseTransientIndex(key, it->second);
  }
  nodes_.erase(it);
}

std::optional<BlockKey> NoThrashPolicy::PickVictim(const BlockKey&, const AdmissionHint& hint) {
  if (!full_) {
    full_ = true;
    capacity_ = nodes_.size();
    const auto share = [this](double f) {
      return std::min(capacity_,
                      std::max<size_t>(1, static_cast<size_t>(static_cast<double>(capacity_) * f)));
    };
    min_transient_ = share(config_.transient_fraction);
    max_transient_ = std::max(min_transient_, share(config_.max_transient_fraction));
    stable_cap_ = capacity_ - min_transient_;
  }
  if (nodes_.empty()) return std::nullopt;
  const bool prefetch = hint.origin != kDemand;

  // 1. A stale stable block: the workload moved on.
  if (!stable_.empty()) {
    const Node& tail = nodes_.at(stable_.back());
    const double stale = config_.stale_factor * static_cast<double>(std::max<size_t>(capacity_, 1));
    if (static_cast<double>(clock_ - tail.last_access) > stale) return stable_.back();
  }
  // 2. The transient segment has not got its share yet.
  if (stable_.size() > stable_cap_) return stable_.back();
  // 3. Transient: a block with no use left (or overdue) first, else the one due last.
  if (!by_deadline_.empty() && by_deadline_.begin()->first.first < clock_) {
    const auto& [deadline_seq, key] = *by_deadline_.begin();
    // An overdue prediction (not a block whose use is over): give the slot back to stable.
    if (deadline_seq.first != 0 && stable_cap_ + min_transient_ < capacity_) ++stable_cap_;
    return key;
  }
  const bool predicted = prefetch && hint.predicted_use < kNever / 2;
  const bool timely =
      predicted && hint.predicted_use < static_cast<double>(std::max<size_t>(capacity_, 1));
  if (!by_due_.empty()) {
    const auto& [due_seq, key] = *by_due_.rbegin();
    if (!prefetch) return key;
    if (predicted) {
      const double incoming_due = static_cast<double>(clock_) + std::max(0.0, hint.predicted_use);
      if (due_seq.first > incoming_due) return key;  // the victim is needed later
    }
  } else if (!prefetch) {
    // 4. Nothing transient: demand takes the stable LRU block.
    return stable_.empty() ? std::nullopt : std::optional<BlockKey>(stable_.back());
  }
  // A prefetch that would be refused: a timely one grows the transient share.
  if (timely && !stable_.empty() && capacity_ - stable_cap_ < max_transient_) {
    --stable_cap_;
    return stable_.back();
  }
  return std::nullopt;
}

// PickVictim's decision, without its side effects (sizing the segments on first use, growing
// the transient share). Kept step for step in line with PickVictim.
bool NoThrashPolicy::WouldAdmit(const AdmissionHint& hint) const {
  if (nodes_.empty()) return false;
  if (hint.origin == kDemand) return true;  // demand takes a victim while anything is cached
  // Before the first PickVictim the segments are unsized: the first one gives transient its
  // share from the stable set.
  if (!full_) return true;
  if (!stable_.empty()) {
    const Node& tail = nodes_.at(stable_.back());
    const double stale = config_.stale_factor * static_cast<double>(std::max<size_t>(capacity_, 1));
    if (static_cast<double>(clock_ - tail.last_access) > stale) return true;
  }
  if (stable_.size() > stable_cap_) return true;
  if (!by_deadline_.empty() && by_deadline_.begin()->first.first < clock_) return true;
  const bool predicted = hint.predicted_use < kNever / 2;
  const bool timely =
      predicted && hint.predicted_use < static_cast<double>(std::max<size_t>(capacity_, 1));
  if (!by_due_.empty() && predicted) {
    const double incoming_due = static_cast<double>(clock_) + std::max(0.0, hint.predicted_use);
    if (by_due_.rbegin()->first.first > incoming_due) return true;
  }
  return timely && !stable_.empty() && capacity_ - stable_cap_ < max_transient_;
}

}  // namespace spoke::agent
