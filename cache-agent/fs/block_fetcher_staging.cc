// BlockFetcher's staging of prefetched blocks for a full cache (see "Staging" in
// block_fetcher.h): the admission answer, eviction, and the reader's block taken from it.
#include <algorithm>

#include "cache-agent/fs/block_fetcher.h"

namespace spoke::agent {

bool BlockFetcher::WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const {
  if (cache_ == nullptr) return true;
  if (staging_ == nullptr) return cache_->WouldAdmit(key, hint);
  // A whole block's worth, whatever the block's length: the key does not say it.
  if (cache_->Contains(key) || cache_->FreeBytes() >= config_.block_size) return true;
  return staging_->HasRoom(config_.block_size, prefetch_bytes_.load());
}

uint64_t BlockFetcher::Evict(uint64_t file_id) {
  if (cache_ == nullptr) return 0;
  const uint64_t staged = staging_ != nullptr ? staging_->DropFile(volume_, file_id) : 0;
  return staged + cache_->Evict(volume_, file_id);
}

bool BlockFetcher::DropStaged(const BlockKey& key) {
  return staging_ != nullptr && staging_->Drop(key);
}

StagingBuffer::Stats BlockFetcher::staging_stats() const {
  return staging_ != nullptr ? staging_->GetStats() : StagingBuffer::Stats{};
}

BlockFetcher::FetchPtr BlockFetcher::AdmitTaken(const BlockKey& key, const BlockData& data) {
  const uint64_t size = data->size();
  // Room as a reader's block queued for the cache: only while the whole budget has it.
  if (config_.memory != nullptr && !config_.memory->TryAcquire(MemoryBudget::Use::kStoreQueue, size,
                                                               MemoryBudget::Level::kDemand)) {
    store_skips_++;
    return nullptr;
  }
  FetchPtr queued;
  bool queue_full = false;
  {
    MutexLock lock(mu_);
    if (!stopping_ && !table_.Contains(key)) {
      // Joinable until stored, as a fetched block waiting for a store thread.
      auto f = std::make_shared<BlockFetch>();
      f->key = key;
      f->length = static_cast<uint32_t>(size);
      f->cls = kDemandClass;
      f->stored_as_demand = true;
      f->dispatched = true;
      f->done = true;
      f->result = data;
      if (config_.memory != nullptr) {
        f->memory_held = size;
        f->memory_use = MemoryBudget::Use::kStoreQueue;
      }
      // Queued and in the table under mu_: its store thread settles it only after.
      if (store_queue_->Push(f, size, /*bounded=*/true)) {
        table_.AddDone(f);
        queued = std::move(f);
      } else {
        queue_full = true;
      }
    }
  }
  if (queued) return queued;
  if (config_.memory != nullptr) config_.memory->Release(MemoryBudget::Use::kStoreQueue, size);
  if (queue_full) store_skips_++;
  return nullptr;
}

}  // namespace spoke::agent
