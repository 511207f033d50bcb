// SlotFileBlockCache: BlockCache over slot files: an in-memory index (BlockKey -> slot) +
// SlotSpace (free list, pins, hole punching) + EvictionPolicy + BlockStore + stats, persisted
// through IndexFile at Close and rebuilt by the crash scan (crash_scan.h) otherwise. Blocks are
// charged the disk they occupy; the slot geometry, recovery and the degraded mode are in
// docs/design.md, "Slot geometry, recovery and disk errors".
//
// Concurrency: one mutex (mu_) guards the index, the SlotSpace, policy and stats; device I/O
// runs outside it; the BufferPool has its own leaf mutex (never held while taking mu_). A Get
// pins its slot while reading, so an eviction never overwrites a slot under a reader; a Put
// reserves its slot in `writing_` and publishes it in the index after the write, so readers
// never see a half-written block.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/block_store.h"
#include "cache-agent/cache/buffer_pool.h"
#include "cache-agent/cache/cache_dir.h"
#include "cache-agent/cache/slot_space.h"
#include "cache-agent/cache/uring_block_store.h"
#include "common/metrics.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class SlotFileBlockCache final : public BlockCache {
 public:
  struct Options {
    unsigned degrade_after_consecutive_errors = 3;  // a dead disk fails every I/O
    unsigned degrade_after_total_errors = 32;       // a dying one fails some, repeatedly
    size_t spare_buffers = 32;                      // bounce buffers kept (one slot each)
    // Charge blocks by bytes in many sparse slots when the filesystem can punch holes; false
    // forces the one-slot-per-block geometry (what a filesystem without punch-hole gets).
    bool punch_holes = true;
  };
  // Most slots a cache has (see above): ~80 MiB of slot state, ~270 GiB of quota at 64 KiB.
  static constexpr uint64_t kMaxSlots = 4ull << 20;
  // Opens the store for (slot_count, slot_size). Tests wrap the real store to inject faults.
  using StoreFactory = std::function<Result<std::unique_ptr<BlockStore>>(
      const std::string& dir, uint64_t slot_count, uint32_t slot_size)>;
  static StoreFactory UringStore(const UringBlockStore::Options& options);
  static StoreFactory UringStore() { return UringStore(UringBlockStore::Options()); }

  enum class Recovery { kFresh, kIndex, kScan };

  // `config` must be valid (Config::Validate) and config.dir must exist. Takes an exclusive
  // lock on the directory (kUnavailable if another cache holds it), opens the store, loads or
  // rebuilds the index. `metrics` may be null.
  static Result<std::unique_ptr<SlotFileBlockCache>> Open(const Config& config,
                                                          const StoreFactory& store_factory,
                                                          std::unique_ptr<EvictionPolicy> policy,
                                                          metrics::Registry* metrics,
                                                          const Options& options);
  static Result<std::unique_ptr<SlotFileBlockCache>> Open(const Config& config,
                                                          const StoreFactory& store_factory,
                                                          std::unique_ptr<EvictionPolicy> policy,
                                                          metrics::Registry* metrics) {
    return Open(config, store_factory, std::move(policy), metrics, Options());
  }
  ~SlotFileBlockCache() override;

  // kNotFound on a miss, on a dropped block (bad checksum, key or generation mismatch, device
  // error) and when degraded or closed. kInvalidArgument if `capacity` < the block's length.
  Result<size_t> Get(const BlockKey& key, char* out, size_t capacity) override;
  // OK (stored, or already cached/being stored), kNoSpace (policy refused admission), kIo
  // (device error or degraded), kInvalidArgument (length 0 or > block_size), kUnavailable
  // (closed).
  Status Put(const BlockKey& key, const char* data, size_t length,
             const AdmissionHint& hint) override;
  bool Contains(const BlockKey& key) const override;
  bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const override;
  uint64_t FreeBytes() const override;
  uint64_t Evict(uint64_t volume, uint64_t file_id) override;
  uint64_t VolumeBytes(uint64_t volume) const override;
  BlockCacheStats Stats() const override;
  uint32_t block_size() const override { return config_.block_size; }
  // Waits for in-flight Get/Put, syncs the data files, writes the index and the clean marker.
  // kIo if any of that failed (the next Open then rescans). Idempotent.
  Status Close() override;
  void SetListener(CacheListener* listener) override;

  Recovery recovery() const { return recovery_; }
  uint64_t slot_count() const { return slot_count_; }
  // True while blocks are charged by bytes (holes punched); false in the old geometry.
  bool punching() const;

 private:
  struct Entry {
    uint64_t slot = 0;
    uint64_t seq = 0;
    uint64_t last_use = 0;  // recency tick, persisted so a restart keeps LRU order
    uint32_t length = 0;
    ExpertId origin = kDemand;
    bool read = false;
    uint32_t charge = 0;  // counted in stats_.disk_bytes
  };
  struct Writing {
    uint64_t slot = 0;
    uint32_t charge = 0;     // reserved in stats_.disk_bytes until published or abandoned
    bool cancelled = false;  // Evict() ran meanwhile: free the slot instead of publishing
  };
  struct Event {
    bool used;
    BlockKey key;
    ExpertId expert;
  };
  using Index = std::unordered_map<BlockKey, Entry, BlockKeyHash>;
  // A Put between its reservation of a slot and its publication.
  struct PendingPut {
    uint64_t slot = 0;
    uint64_t seq = 0;
    uint32_t charge = 0;
    uint32_t old_extent = 0;  // of the block the slot held before
    uint32_t extent = 0;      // of this block
    Status io = Ok();         // the write
    Status tail = Ok();       // giving the old block's longer tail back
  };

  SlotFileBlockCache(const Config& config, const Options& options, metrics::Registry* metrics);
  // Opens the store (see above for the geometry); sets slot_count_, slots_, store_fresh_.
  Status OpenStore(const StoreFactory& store_factory);
  Status Recover();
  bool LoadIndex();
  void Scan();
  // After a scan: punches slots beyond their blocks when the files hold more than those.
  void PunchUnaccounted();
  // Counts a device error seen by a recovery worker; true when the cache is now degraded.
  bool OnRecoveryIoError(const Status& s, std::string_view what);
  void Publish(const BlockKey& key, Entry e, const AdmissionHint& hint) REQUIRES(mu_);
  Status WriteIndex();
  // Gives back the disk space of freed slots (SlotSpace::ClearIo) and puts them on the free
  // list. Runs without mu_; the caller keeps Close() waiting (inflight_) and owns `slots`.
  void ClearSlots(const std::vector<uint64_t>& slots);
  // ClearSlots on the slots freed by any operation so far (SlotSpace::TakeToClear).
  void ClearReleased();
  // The SlotSpace for ClearIo, which touches only the (thread-safe) store and no slot state,
  // and so runs without mu_.
  const SlotSpace& SlotsForClearIo() const NO_THREAD_SAFETY_ANALYSIS { return *slots_; }

  // Helpers below run with mu_ held.
  // Put's eviction loop: evicts (policy's choice) until a block charged `charge` fits the
  // quota and has a slot, and returns that slot. kNoSpace when the policy refuses (counted as
  // a rejected admission; a refused prefetch queues a wasted event), kInternal when the policy
  // keeps naming uncached blocks; any slot taken is released again then.
  Result<uint64_t> MakeRoomLocked(const BlockKey& key, const AdmissionHint& hint, uint32_t charge,
                                  std::vector<Event>& events) REQUIRES(mu_);
  // Disk space a block of `length` bytes is charged.
  uint32_t ChargeLocked(uint32_t length) const REQUIRES(mu_);
  // Removes a block from the index and policy (queueing a wasted-prefetch event); frees its
  // slot (once unpinned) unless the caller takes it over.
  void DropLocked(Index::iterator it, std::vector<Event>& events, bool release_slot = true)
      REQUIRES(mu_);
  // Evicts (policy's choice) until the charged bytes fit the quota; after recovery.
  void TrimToQuotaLocked(std::vector<Event>& events) REQUIRES(mu_);
  // The filesystem refused a punch: charge whole slots from now on (logged once).
  void StopPunchingLocked() REQUIRES(mu_);
  void SetDiskBytesLocked(uint64_t bytes) REQUIRES(mu_);
  void RecordIoLocked(const Status& s, std::string_view what) REQUIRES(mu_);
  // Tells the listener, without mu_ (the listener may call back into the cache).
  void Fire(const std::vector<Event>& events) EXCLUDES(mu_);

  // Put's steps. Reserves a slot (evicting for it) and the disk charge; nullopt when the block
  // is cached or being written. `clear_victims`: freed slots wait for ClearReleased.
  Result<std::optional<PendingPut>> ReserveForPut(const BlockKey& key, size_t length,
                                                  const AdmissionHint& hint,
                                                  std::vector<Event>& events, bool& clear_victims)
      EXCLUDES(mu_);
  // Writes the block into the reserved slot, without mu_; punches the old block's tail.
  void WriteForPut(const BlockKey& key, const char* data, size_t length, const AdmissionHint& hint,
                   PendingPut& put) EXCLUDES(mu_);
  // Publishes the written block, or frees the slot when the write failed or Evict/Close ran.
  Status FinishPut(const BlockKey& key, size_t length, const AdmissionHint& hint,
                   const PendingPut& put) EXCLUDES(mu_);

  const Config config_;
  const Options options_;
  uint64_t slot_count_ = 0;
  uint32_t slot_size_ = 0;
  uint64_t disk_quota_ = 0;
  bool store_fresh_ = false;  // the data files were just created
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<EvictionPolicy> policy_ PT_GUARDED_BY(mu_);  // called under mu_ only
  CacheDirLock dir_lock_;
  Recovery recovery_ = Recovery::kFresh;

  std::unique_ptr<metrics::Registry> own_metrics_;
  metrics::Counter* m_evictions_ = nullptr;
  metrics::Counter* m_checksum_failures_ = nullptr;
  metrics::Counter* m_disk_errors_ = nullptr;
  metrics::Gauge* m_bytes_ = nullptr;
  metrics::Gauge* m_capacity_ = nullptr;
  metrics::Gauge* m_disk_bytes_ = nullptr;
  metrics::Gauge* m_disk_quota_ = nullptr;
  metrics::Gauge* m_degraded_ = nullptr;

  mutable Mutex mu_;
  CondVar cv_;  // slot unpinned, in-flight op finished
  Index index_ GUARDED_BY(mu_);
  // index_'s keys by volume and file, so that Evict of a file (an `rm -rf` of many files)
  // costs the blocks of that file, not a scan of the whole index under mu_.
  std::unordered_map<uint64_t,
                     std::unordered_map<uint64_t, std::unordered_set<BlockKey, BlockKeyHash>>>
      by_file_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, Writing, BlockKeyHash> writing_ GUARDED_BY(mu_);
  std::unique_ptr<SlotSpace> slots_ PT_GUARDED_BY(mu_);  // set at Open
  std::unordered_map<uint64_t, uint64_t> volume_bytes_ GUARDED_BY(mu_);
  BlockCacheStats stats_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t tick_ GUARDED_BY(mu_) = 0;
  unsigned consecutive_errors_ GUARDED_BY(mu_) = 0;
  unsigned inflight_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
  CacheListener* listener_ GUARDED_BY(mu_) = nullptr;

  BufferPool buffers_;  // bounce buffers of one slot; its own mutex
};

}  // namespace spoke::agent
