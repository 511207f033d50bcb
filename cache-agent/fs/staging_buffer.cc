#include "cache-agent/fs/staging_buffer.h"

#include <utility>

namespace spoke::agent {

Status StagingBuffer::Config::Validate() const {
  if (ttl <= std::chrono::milliseconds(0) || held_ttl <= std::chrono::milliseconds(0)) {
    return Fail(Code::kInvalidArgument, "staging ttl: must be > 0");
  }
  return Ok();
}

StagingBuffer::StagingBuffer(const Config& config, const Clock& clock, metrics::Registry& registry,
                             const metrics::Labels& labels)
    : config_(config), clock_(clock) {
  staged_ =
      &registry.GetCounter("spoke_staging_blocks_total",
                           "Prefetched blocks held in memory because the cache was full", labels);
  hits_ = &registry.GetCounter("spoke_staging_hits_total",
                               "Block reads served from the staging buffer", labels);
  const auto drops = [&](const char* reason) {
    metrics::Labels l = labels;
    l["reason"] = reason;
    return &registry.GetCounter("spoke_staging_drops_total",
                                "Staged blocks dropped unread (full, expired, evicted, memory)", l);
  };
  dropped_full_ = drops("full");
  expired_ = drops("expired");
  evicted_ = drops("evicted");
  memory_refused_ = drops("memory");
  bytes_gauge_ =
      &registry.GetGauge("spoke_staging_bytes", "Bytes of staged blocks held in memory", labels);
}

StagingBuffer::~StagingBuffer() { Clear(); }

void StagingBuffer::EraseLocked(Where w) {
  const uint64_t size = w.it->data->size();
  bytes_ -= size;
  if (config_.memory != nullptr) config_.memory->Release(MemoryBudget::Use::kStaged, size);
  index_.erase(w.it->key);
  (w.held ? held_ : order_).erase(w.it);
  bytes_gauge_->Set(static_cast<int64_t>(bytes_));
}

std::optional<StagingBuffer::Where> StagingBuffer::OldestLocked() {
  if (!order_.empty()) return Where{order_.begin(), false};
  if (!held_.empty()) return Where{held_.begin(), true};
  return std::nullopt;
}

void StagingBuffer::ExpireLocked(SteadyTime now) {
  while (!order_.empty() && now - order_.front().staged_at > config_.ttl) {
    EraseLocked(Where{order_.begin(), false});
    ++stats_.expired;
    expired_->Inc();
  }
  while (!held_.empty() && now - held_.front().staged_at > config_.held_ttl) {
    EraseLocked(Where{held_.begin(), true});
    ++stats_.expired;
    expired_->Inc();
  }
}

bool StagingBuffer::Put(const BlockKey& key, Data data, bool held) {
  const uint64_t size = data->size();
  const SteadyTime now = clock_.Now();
  MutexLock lock(mu_);
  ExpireLocked(now);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);  // a re-fetch
  if (size > config_.max_bytes) {
    ++stats_.dropped_full;
    dropped_full_->Inc();
    return false;
  }
  while (bytes_ + size > config_.max_bytes) {
    const auto oldest = OldestLocked();
    if (!oldest) break;
    EraseLocked(*oldest);
    ++stats_.dropped_full;
    dropped_full_->Inc();
  }
  if (config_.memory != nullptr && !config_.memory->TryAcquire(MemoryBudget::Use::kStaged, size)) {
    ++stats_.memory_refused;
    memory_refused_->Inc();
    return false;
  }
  List& list = held ? held_ : order_;
  list.push_back(Entry{key, std::move(data), now});
  index_[key] = Where{std::prev(list.end()), held};
  bytes_ += size;
  ++stats_.staged;
  staged_->Inc();
  bytes_gauge_->Set(static_cast<int64_t>(bytes_));
  return true;
}

std::optional<StagingBuffer::Data> StagingBuffer::Take(const BlockKey& key) {
  const SteadyTime now = clock_.Now();
  MutexLock lock(mu_);
  ExpireLocked(now);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  Data data = it->second.it->data;
  EraseLocked(it->second);
  ++stats_.hits;
  hits_->Inc();
  return data;
}

bool StagingBuffer::Contains(const BlockKey& key) const {
  MutexLock lock(mu_);
  return index_.contains(key);
}

bool StagingBuffer::HasRoom(uint64_t length, uint64_t reserved) const {
  MutexLock lock(mu_);
  return bytes_ + reserved + length <= config_.max_bytes;
}

uint64_t StagingBuffer::DropFile(uint64_t volume, uint64_t file_id) {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (const bool held : {false, true}) {
    List& list = held ? held_ : order_;
    for (auto it = list.begin(); it != list.end();) {
      auto next = std::next(it);
      if (it->key.volume == volume && (file_id == 0 || it->key.file_id == file_id)) {
        EraseLocked(Where{it, held});
        ++n;
      }
      it = next;
    }
  }
  stats_.evicted += n;
  evicted_->Inc(n);
  return n;
}

bool StagingBuffer::Drop(const BlockKey& key) {
  MutexLock lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  EraseLocked(it->second);
  ++stats_.expired;
  expired_->Inc();
  return true;
}

void StagingBuffer::Clear() {
  MutexLock lock(mu_);
  const uint64_t n = index_.size();
  while (const auto oldest = OldestLocked()) EraseLocked(*oldest);
  stats_.evicted += n;
  evicted_->Inc(n);
}

void StagingBuffer::Expire() {
  const SteadyTime now = clock_.Now();
  MutexLock lock(mu_);
  ExpireLocked(now);
}

StagingBuffer::Stats StagingBuffer::GetStats() const {
  MutexLock lock(mu_);
  Stats s = stats_;
  s.blocks = index_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace spoke::agent
