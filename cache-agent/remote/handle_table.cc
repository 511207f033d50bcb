#include "cache-agent/remote/handle_table.h"

namespace spoke::agent {

void HandleTable::Put(const std::string& path, std::string_view fh, uint64_t file_id) {
  if (capacity_ == 0) return;
  spoke::MutexLock lock(mu_);
  auto it = map_.find(path);
  if (it != map_.end()) {
    it->second.entry = Entry{std::string(fh), file_id};
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  while (map_.size() >= capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  auto [slot, added] = map_.emplace(path, Slot{Entry{std::string(fh), file_id}, {}});
  lru_.push_front(slot);
  slot->second.lru = lru_.begin();
}

std::optional<HandleTable::Entry> HandleTable::Find(const std::string& path) {
  spoke::MutexLock lock(mu_);
  auto it = map_.find(path);
  if (it == map_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

HandleTable::Map::iterator HandleTable::DropLocked(Map::iterator it) {
  lru_.erase(it->second.lru);
  return map_.erase(it);
}

void HandleTable::DropTree(const std::string& path) {
  spoke::MutexLock lock(mu_);
  if (auto it = map_.find(path); it != map_.end()) DropLocked(it);
  const std::string prefix = path.empty() ? std::string() : path + "/";
  for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.starts_with(prefix);) {
    it = DropLocked(it);
  }
}

size_t HandleTable::size() const {
  spoke::MutexLock lock(mu_);
  return map_.size();
}

}  // namespace spoke::agent
