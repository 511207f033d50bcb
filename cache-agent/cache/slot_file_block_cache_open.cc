// SlotFileBlockCache, opening: the slot geometry, the store, the directory lock, and
// recovery of the index (from the index file after a clean shutdown, else by the crash scan).
// Same class and locking as slot_file_block_cache.h; the data path is in
// slot_file_block_cache.cc.
#include <sys/statvfs.h>

#include <algorithm>
#include <string>

#include "cache-agent/cache/block_header.h"
#include "cache-agent/cache/cache_dir.h"
#include "cache-agent/cache/crash_scan.h"
#include "cache-agent/cache/index_file.h"
#include "cache-agent/cache/slot_file_block_cache.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

// Smallest block the slot count is sized for (slot_file_block_cache.h).
constexpr uint64_t kDenseBlockBytes = 64 << 10;

}  // namespace

SlotFileBlockCache::StoreFactory SlotFileBlockCache::UringStore(
    const UringBlockStore::Options& options) {
  return [options](const std::string& dir, uint64_t slot_count,
                   uint32_t slot_size) -> Result<std::unique_ptr<BlockStore>> {
    SPOKE_TRY(auto store, UringBlockStore::Open(dir, slot_count, slot_size, options));
    return std::unique_ptr<BlockStore>(std::move(store));
  };
}

SlotFileBlockCache::SlotFileBlockCache(const Config& config, const Options& options,
                                       metrics::Registry* metrics)
    : config_(config),
      options_(options),
      buffers_(kHeaderBytes + config.block_size, options.spare_buffers) {
  if (metrics == nullptr) {
    own_metrics_ = std::make_unique<metrics::Registry>();
    metrics = own_metrics_.get();
  }
  m_evictions_ = &metrics->GetCounter("spoke_cache_evictions_total",
                                      "Blocks evicted from the cache to make room");
  m_checksum_failures_ = &metrics->GetCounter(
      "spoke_checksum_failures_total", "Cached blocks dropped because they failed verification");
  m_disk_errors_ =
      &metrics->GetCounter("spoke_cache_disk_errors_total", "Failed I/O on the cache disk");
  m_bytes_ = &metrics->GetGauge("spoke_cache_bytes", "Bytes of block data held in the cache");
  m_capacity_ = &metrics->GetGauge("spoke_cache_capacity_bytes", "Block data quota of the cache");
  m_disk_bytes_ =
      &metrics->GetGauge("spoke_cache_disk_bytes",
                         "Disk space charged to cached blocks (header + data rounded up to 4 KiB)");
  m_disk_quota_ = &metrics->GetGauge("spoke_cache_disk_quota_bytes",
                                     "Limit on spoke_cache_disk_bytes (capacity + block headers)");
  m_degraded_ = &metrics->GetGauge("spoke_cache_degraded",
                                   "1 when the cache disk failed and every read goes to the hub");
}

Result<std::unique_ptr<SlotFileBlockCache>> SlotFileBlockCache::Open(
    const Config& config, const StoreFactory& store_factory, std::unique_ptr<EvictionPolicy> policy,
    metrics::Registry* metrics, const Options& options) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  if (!policy) return Fail(Code::kInvalidArgument, "cache eviction policy: must be set");
  std::unique_ptr<SlotFileBlockCache> cache(new SlotFileBlockCache(config, options, metrics));

  SPOKE_TRY(cache->dir_lock_, CacheDirLock::Acquire(config.dir));
  SPOKE_RETURN_IF_ERROR(cache->OpenStore(store_factory));
  {
    // Not shared yet; the lock keeps the analysis (and every later reader) honest.
    MutexLock stats_lock(cache->mu_);
    cache->policy_ = std::move(policy);
    cache->stats_.capacity_bytes = config.capacity_bytes / config.block_size * config.block_size;
    cache->stats_.disk_quota_bytes = cache->disk_quota_;
    cache->m_capacity_->Set(static_cast<int64_t>(cache->stats_.capacity_bytes));
  }
  cache->m_disk_quota_->Set(static_cast<int64_t>(cache->disk_quota_));
  cache->m_disk_bytes_->Set(0);
  cache->m_degraded_->Set(0);
  SPOKE_RETURN_IF_ERROR(cache->Recover());
  return cache;
}

Status SlotFileBlockCache::OpenStore(const StoreFactory& store_factory) {
  // Geometry (slot_file_block_cache.h): the quota is the disk one slot per block of capacity
  // took; with hole punching, many more slots share it.
  const uint64_t block_slots = config_.capacity_bytes / config_.block_size;
  slot_size_ = static_cast<uint32_t>(kHeaderBytes + config_.block_size);
  disk_quota_ = block_slots * slot_size_;
  const uint64_t dense_slots = std::clamp(disk_quota_ / (kDenseBlockBytes + kHeaderBytes),
                                          block_slots, std::max(block_slots, kMaxSlots));
  auto open = [&](uint64_t slot_count) -> Result<std::unique_ptr<BlockStore>> {
    SPOKE_TRY_WRAP(auto store, store_factory(config_.dir, slot_count, slot_size_), "cache store");
    if (store->slot_count() != slot_count || store->slot_size() != slot_size_) {
      return Fail(Code::kInternal, "cache store: geometry does not match the config");
    }
    return store;
  };
  slot_count_ = options_.punch_holes ? dense_slots : block_slots;
  SPOKE_TRY(auto store, open(slot_count_));
  store_fresh_ = store->fresh();
  bool punch = options_.punch_holes && store->CanPunchHoles();
  if (options_.punch_holes && !punch) {
    log::Warn("cache filesystem cannot punch holes: one slot per block, each charged whole",
              {{"dir", config_.dir}});
    if (dense_slots != block_slots) {
      // The files are sparse: reopening at the smaller geometry only resizes them. Whether
      // they were fresh is what the first open saw.
      store.reset();
      slot_count_ = block_slots;
      SPOKE_TRY(store, open(slot_count_));
    }
  }
  store_ = std::move(store);
  slots_ = std::make_unique<SlotSpace>(store_.get(), punch);
  return Ok();
}

SlotFileBlockCache::~SlotFileBlockCache() {
  if (store_) (void)Close();
}

Status SlotFileBlockCache::Recover() {
  // From here on the on-disk index is stale: a crash before the next Close must rescan.
  SPOKE_TRY(const bool was_clean, ConsumeCleanMarker(config_.dir));
  if (store_fresh_) {
    recovery_ = Recovery::kFresh;
    MutexLock lock(mu_);
    slots_->AddFreeExcept(std::vector<bool>(slot_count_, false));
  } else if (was_clean && LoadIndex()) {
    recovery_ = Recovery::kIndex;
  } else {
    if (!was_clean)
      log::Warn("cache was not shut down cleanly; rebuilding index by scanning",
                {{"dir", config_.dir}});
    recovery_ = Recovery::kScan;
    Scan();
  }
  RemoveIndexFile(config_.dir);
  std::vector<uint64_t> clear;
  {
    // A smaller quota than the blocks found (capacity changed), or duplicates left by a crash.
    std::vector<Event> events;  // no listener yet
    MutexLock lock(mu_);
    TrimToQuotaLocked(events);
    clear = slots_->TakeToClear();
  }
  ClearSlots(clear);
  MutexLock lock(mu_);
  // Sparse files reserve nothing: say so now if the filesystem cannot hold the quota.
  struct statvfs vfs {};
  if (statvfs(config_.dir.c_str(), &vfs) == 0 &&
      uint64_t{vfs.f_bavail} * vfs.f_frsize < disk_quota_ - stats_.disk_bytes) {
    log::Warn("cache filesystem has less free space than the cache quota; writes may fail",
              {{"dir", config_.dir},
               {"free_bytes", uint64_t{vfs.f_bavail} * vfs.f_frsize},
               {"quota_left_bytes", disk_quota_ - stats_.disk_bytes}});
  }
  log::Info("block cache open", {{"dir", config_.dir},
                                 {"recovery", recovery_ == Recovery::kFresh   ? "fresh"
                                              : recovery_ == Recovery::kIndex ? "index"
                                                                              : "scan"},
                                 {"blocks", index_.size()},
                                 {"slots", slot_count_},
                                 {"block_size", config_.block_size},
                                 {"punch_holes", slots_->punching()},
                                 {"disk_bytes", stats_.disk_bytes},
                                 {"disk_quota_bytes", disk_quota_}});
  return Ok();
}

bool SlotFileBlockCache::LoadIndex() {
  bool punched;
  {
    MutexLock lock(mu_);
    punched = slots_->punching();
  }
  auto index = ReadIndexFile(config_.dir, config_.block_size, slot_count_, punched);
  if (!index) {
    log::Warn("cache index unusable; rebuilding by scanning",
              {{"path", config_.dir + "/index"}, {"reason", index.error().message()}});
    return false;
  }
  std::vector<bool> used(slot_count_, false);
  MutexLock lock(mu_);
  for (const IndexRecord& r : index->records) {
    used[r.slot] = true;
    Entry e{r.slot, r.seq, ++tick_, r.length, r.origin, r.read, 0};
    // Records are coldest first: inserting in order rebuilds the recency order. Predictions
    // do not survive a restart; a read prefetch counts as demand for admission.
    Publish(r.key, e, AdmissionHint{e.read ? kDemand : e.origin, kUnknownUse});
  }
  slots_->AddFreeExcept(used);
  next_seq_ = index->next_seq;
  return true;
}

bool SlotFileBlockCache::OnRecoveryIoError(const Status& s, std::string_view what) {
  MutexLock lock(mu_);
  RecordIoLocked(s, what);
  return stats_.degraded;
}

void SlotFileBlockCache::Scan() {
  HeaderScan scan = ScanSlotHeaders(*store_, config_.block_size, buffers_, [this](const Status& s) {
    return OnRecoveryIoError(s, "scan header");
  });
  ResolvedScan resolved = ResolveGenerations(scan.found);
  MutexLock lock(mu_);
  std::vector<bool> used(slot_count_, false);
  for (const FoundHeader& f : resolved.blocks) {
    Entry e{f.slot, f.header.seq, ++tick_, f.header.length, f.header.origin, false, 0};
    used[f.slot] = true;
    Publish(f.header.key, e, AdmissionHint{e.origin, kUnknownUse});
  }
  // Older generations still carry a valid header: cleared before reuse.
  for (uint64_t slot : resolved.stale_slots) {
    used[slot] = true;
    slots_->set_extent(slot, slot_size_);
    slots_->Free(slot);
  }
  slots_->AddFreeExcept(used);
  next_seq_ = resolved.max_seq + 1;
  lock.unlock();
  log::Info("cache scan done", {{"blocks", resolved.blocks.size()},
                                {"invalid_headers", scan.invalid},
                                {"stale_copies", resolved.stale_slots.size()}});
  PunchUnaccounted();
}

void SlotFileBlockCache::PunchUnaccounted() {
  // Free slots are assumed empty and blocks to end at their data. What a crash between a
  // write and its punch left, or an older version's preallocated files, breaks that: when the
  // files hold clearly more than that (a few interrupted operations and the filesystem's
  // extent maps are tolerated), punch every slot beyond its block. A punch per slot costs ~3x
  // a header read, so an ordinary crash does not pay for it.
  std::vector<uint32_t> keep(slot_count_);
  uint64_t expected = 0;
  {
    MutexLock lock(mu_);
    if (!slots_->punching()) return;
    for (uint64_t s = 0; s < slot_count_; ++s) {
      keep[s] = slots_->extent(s);
      expected += keep[s];
    }
  }
  const std::optional<uint64_t> allocated = store_->allocated_bytes();
  const uint64_t tolerated = 16ull * slot_size_ + disk_quota_ / 1024;
  if (allocated && *allocated <= expected + tolerated) return;
  log::Info("cache files hold more than their blocks; punching every slot",
            {{"dir", config_.dir},
             {"allocated_bytes", allocated.value_or(0)},
             {"expected_bytes", expected}});
  const bool refused = PunchBeyondExtents(*store_, keep, [this](const Status& s) {
    return OnRecoveryIoError(s, "punch unaccounted space");
  });
  MutexLock lock(mu_);
  if (refused) StopPunchingLocked();
}

}  // namespace spoke::agent
