// BlockFetcher: brings blocks of hub files into the BlockCache and hands them to readers.
//
// - Cache first, hub on a miss; a block being fetched is fetched once: later askers (demand
//   or prefetch) join the fetch in flight.
// - Three priority classes, one queue each, drained in order: demand (readers), warm-up
//   (Warm: control-plane warm-up and hints), prefetch (the prefetcher). A block asked for
//   in a higher class is promoted. Warm-up and prefetch together never take the last
//   `demand_reserved` hub slots, and prefetch bytes queued or in flight are capped, so
//   neither fills the pipe that demand needs.
// - Pacing (Config::pacing, link_pacer.h): bytes on the hub are held to what the WAN link
//   delivers within a target queue delay, readers' first: background reads take what
//   readers leave of the window (at least one block), so that on a link slower than the
//   in-flight bounds a reader's block does not queue behind seconds of prefetches; readers
//   beyond the window wait in the demand queue (under their deadline), not in the link,
//   where an RPC past its timeout would be sent again and its bytes cross the link twice.
// - With the agent's MemoryBudget (Config::memory), every block's buffer is accounted from
//   the time it is queued until it is stored or dropped: a prefetch takes background room
//   (refused = back-pressure: Prefetch returns false) and keeps it through the store queue;
//   a reader's block is charged (never refused, never waited for) and is queued for the
//   cache only while the whole budget has room, else served and not cached.
// - Every reader's request has one deadline (`read_deadline` from when it reached the
//   fetcher, or the caller's), covering its time in the queue as well as on the hub: a
//   reader waits no longer, and a demand fetch still queued when every reader of it gave up
//   is dropped rather than sent.
// - A failed cache Put (kNoSpace, kIo) never fails a read: the fetched bytes are served.
// - A null cache means "cache disabled": reads pass through (still de-duplicated).
// - Staging (Config::staging_bytes_max > 0): a prefetched block that arrives when the cache
//   has no free room for it is not stored (it would evict a cached block that a later read
//   then misses: the no-thrash set eroded by prefetches) but held in a StagingBuffer; so is
//   one whose room the blocks queued before it took by the time a store thread has it. A
//   reader takes it from there once (counted as a hit: it did not wait for the hub) and it
//   is then queued for the cache as a demand block when the cache has room or its policy
//   would admit it as a prefetch with no predicted use: it is never worth a prefetched block
//   not read yet (that block would cross the WAN again). WouldAdmit answers for the fetcher as a
//   whole: free cache room or staging room (not the eviction policy: a full cache never takes a
//   prefetched block). A set prediction's block (PrefetchRequest::within_epoch) is staged without
//   the ttl and dropped when the prefetcher gives the prediction up (DropStaged; see
//   staging_buffer.h). Evict drops staged blocks with the cached ones; the destructor drops them
//   all. Warm moves a staged block into the cache instead of reading it again.
//
// Parts (one mutex, mu_, over the first two and every BlockFetch): FetchTable (fetch_table.h:
// one fetch per block, its waiters, the class queues of each route), FetchDispatcher
// (fetch_dispatcher.h: slots, and a window per route: the hub, the source), FetchReader
// (fetch_reader.h: the source for a fetch routed there, else the hub, checked), StoreQueue
// (store_queue.h: blocks waiting for the store threads, its own leaf lock), StagingBuffer
// (staging_buffer.h). This class joins them: the cache lookups, memory accounting, the prefetch
// cap, and waiting for fetches.
//
// Counts per volume: spoke_cache_hits_total (reads that did not wait for the hub: from the
// cache or from staging), spoke_cache_misses_total, spoke_hub_read_bytes_total,
// spoke_cache_read_bytes_total (from the cache only); staging's own: staging_buffer.h.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/fs/block_bytes.h"
#include "cache-agent/fs/block_fetch.h"
#include "cache-agent/fs/block_source.h"
#include "cache-agent/fs/clock.h"
#include "cache-agent/fs/fetch_dispatcher.h"
#include "cache-agent/fs/fetch_reader.h"
#include "cache-agent/fs/fetch_table.h"
#include "cache-agent/fs/link_pacer.h"
#include "cache-agent/fs/staging_buffer.h"
#include "cache-agent/fs/store_queue.h"
#include "cache-agent/fs/warm_rate_limiter.h"
#include "cache-agent/prefetch/predictor.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/memory_budget.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

// One version of one hub file.
struct FileRef {
  std::string path;
  uint64_t file_id = 0;
  uint64_t version = 0;  // FileAttr::ContentVersion(), or a local one once written here
  uint64_t size = 0;
  // Written through this agent since it was opened: `version` is local, there is no hub
  // version to check fetched blocks against (they are the writer's own bytes).
  bool written_here = false;
  // The opener whose identity the hub reads of the file go as; none (prefetch, warm-up): the
  // volume's. Blocks are shared by all callers: the kernel checked each one may open the file.
  std::optional<Credentials> reader = std::nullopt;
};

class BlockFetcher {
 public:
  struct Config {
    uint32_t block_size = 1 << 20;  // = BlockCache block size = hub rsize
    // Hub reads in flight from this fetcher (demand + prefetch). Matches the remote pool
    // (connections x inflight) so the pipe stays full.
    int max_hub_inflight = 256;
    // Prefetch bytes queued or in flight; the rest of the pipe is kept for demand.
    uint64_t prefetch_bytes_max = 192ull << 20;
    // Hub slots warm-up and prefetch may not take (capped to max_hub_inflight - 1).
    int demand_reserved = 32;
    // A reader's request fails with kTimeout when its blocks are not there this long after
    // it reached the fetcher (queue time included). About twice the hub's request timeout:
    // one hub timeout plus time queued behind other demand.
    std::chrono::milliseconds read_deadline{20000};
    // Threads that store fetched blocks into the cache (disk I/O off the network loops).
    // Each store is one synchronous cache write (0.2-0.5 ms, longer while the filesystem
    // allocates): a cold fill of small files at 3-4k blocks/s needs several at once, or the
    // store queue lags the hub and the fill waits for it at the end (bench/cold-fill).
    int store_threads = 8;
    // Bytes of fetched blocks waiting for a store thread. Prefetched blocks count against
    // prefetch_bytes_max until stored (so a slow cache disk slows prefetching down); a
    // demand block that would exceed this bound is served but not cached.
    uint64_t store_queue_bytes_max = 256ull << 20;
    // The agent's memory budget, shared by every volume (optional; must outlive the fetcher).
    MemoryBudget* memory = nullptr;
    // Asked before the hub for every block to fetch (the cluster's peers); null = hub only.
    // Must outlive the fetcher. Its bytes are not counted as hub bytes.
    BlockSource* source = nullptr;
    // Bytes of prefetched blocks held in memory while the cache is full (see Staging above);
    // 0 = no staging (such blocks go to the cache, whose policy may evict for them).
    uint64_t staging_bytes_max = 0;
    // A staged block not read within this long is dropped (not a set prediction's: above).
    std::chrono::milliseconds staging_ttl{std::chrono::minutes(2)};
    // Time for the staging buffer's ttl (optional: the system clock; must outlive the fetcher).
    const Clock* clock = nullptr;
    // Bytes on the hub held to the link's rate (default off: target_queue 0).
    LinkPacer::Config pacing;
    Status Validate() const;
  };

  // `cache` may be null (cache disabled). `registry` must outlive the fetcher.
  BlockFetcher(RemoteFs& remote, BlockCache* cache, uint64_t volume_key, const Config& config,
               metrics::Registry& registry, const metrics::Labels& labels);
  ~BlockFetcher();  // fails queued fetches with kCancelled and waits for callbacks
  BlockFetcher(const BlockFetcher&) = delete;
  BlockFetcher& operator=(const BlockFetcher&) = delete;

  // Reads blocks [first, first + count) of `file` (cache first, hub on a miss, all
  // fetched in parallel), blocking until all are there. Each result holds the block's
  // bytes (short for the last block) or the hub's error (kTimeout, kUnavailable, kIo,
  // kNotFound). `hits` (optional) gets how many came from the cache. Each block is looked
  // up in the cache once. `before_wait` (optional) is called with the hit count after the
  // lookups and before waiting for the hub, so a prefetcher hears of the read one round trip
  // earlier. A read that waited for the hub is one demand miss: its wait is recorded once.
  // Blocks not there by `deadline` (default: now + read_deadline) give kTimeout; all not there
  // when the thread's request is interrupted (common/interrupt.h) give kInterrupted.
  std::vector<Result<BlockData>> GetBlocks(
      const FileRef& file, uint64_t first, uint64_t count, uint64_t* hits = nullptr,
      const std::function<void(uint64_t hits)>& before_wait = nullptr,
      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  // Queues a prefetch of the request's blocks that are neither cached nor in flight; block
  // i of the request is stored with AdmissionHint{request.expert, request.predicted_use + i}.
  // false when the prefetch budget is used up (the blocks before it stay queued).
  bool Prefetch(const PrefetchRequest& request);
  uint64_t PrefetchBytesInFlight() const { return prefetch_bytes_.load(); }
  // Fetches (cache miss) blocks into the cache, waiting for them: warm-up and hints. Queued
  // in the warm-up class (after readers, before prefetches); stored as demand blocks; not
  // counted as a reader's hit/miss. Returns hub bytes read. = FinishWarm(StartWarm(...)).
  Result<uint64_t> Warm(const FileRef& file, uint64_t first, uint64_t count);

  // The fetches one StartWarm queued or joined, for FinishWarm. Move-only; dropping one
  // unfinished leaves its fetches to complete on their own (cached, never waited for).
  class WarmTicket {
   public:
    WarmTicket() = default;
    WarmTicket(WarmTicket&&) = default;
    WarmTicket& operator=(WarmTicket&&) = default;
    WarmTicket(const WarmTicket&) = delete;
    WarmTicket& operator=(const WarmTicket&) = delete;
    // Blocks it waits for (not cached when it started) and their bytes.
    size_t blocks() const { return waits_.size(); }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class BlockFetcher;
    std::vector<std::pair<BlockFetchPtr, bool>> waits_;  // fetch, created by it
    uint64_t bytes_ = 0;
    std::optional<Error> error_;  // the start failed (shutting down)
  };
  // The first half of Warm: queues (or joins) in the warm-up class every block of
  // [first, first + count) that is not cached and dispatches them; does not wait for the
  // hub. May wait for memory-budget room like Warm (bounded by read_deadline). With `rate`,
  // each block it asks for (not cached, not staged) first takes its length from that bucket,
  // the blocks queued before it going out meanwhile; a true `cancelled` ends that wait and the
  // ticket then fails with kCancelled.
  WarmTicket StartWarm(const FileRef& file, uint64_t first, uint64_t count,
                       WarmRateLimiter* rate = nullptr,
                       const std::atomic<bool>* cancelled = nullptr);
  // True once every block of the ticket is fetched and settled (stored, or not to be),
  // waiting at most until `until`.
  bool WaitWarm(const WarmTicket& ticket, std::chrono::steady_clock::time_point until);
  // The second half: waits for the ticket's blocks and their store. Hub bytes read by
  // fetches the ticket started, or the first error of its blocks.
  Result<uint64_t> FinishWarm(WarmTicket ticket);
  int max_hub_inflight() const { return config_.max_hub_inflight; }
  uint64_t store_queue_bytes_max() const { return config_.store_queue_bytes_max; }

  bool Cached(const FileRef& file, uint64_t index) const;
  // Reads a cached block back through the cache's own check (header, key, length, checksum:
  // BlockCache::Get drops a bad block and counts it). kAbsent: not cached; kGood: it verified;
  // kDropped: it was cached and is not any more (bad checksum, disk error, wrong length), so a
  // Warm fetches it again.
  enum class CachedCheck { kAbsent, kGood, kDropped };
  CachedCheck CheckCached(const FileRef& file, uint64_t index);
  // True when the block is cached, being fetched or staged (PrefetchSink::Has).
  bool Has(const BlockKey& key) const;
  // True when the fetcher would keep a prefetch of the block until it is read
  // (PrefetchSink::WouldAdmit): with staging, the cache has free room for a block or the
  // staging buffer has room; without, the cache's own answer. True without a cache.
  bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const;
  // The cache's FreeBytes (0 without a cache).
  uint64_t CacheFreeBytes() const;
  uint32_t block_size() const { return config_.block_size; }
  uint64_t volume_key() const { return volume_; }
  // Drops the cached and staged blocks of file `file_id` of this volume (0 = every file).
  // Returns the blocks dropped; 0 without a cache.
  uint64_t Evict(uint64_t file_id);
  // Bytes of this volume in the cache (0 without a cache).
  uint64_t CachedBytes() const;
  // Drops the staged block `key` unread: the prefetcher gave up the set prediction it was
  // fetched for (PrefetchSink::Abandon). Returns whether it was staged.
  bool DropStaged(const BlockKey& key);

  // Since this fetcher was made (the registry's series live on across remounts).
  uint64_t hits() const { return hits_->Value() - base_hits_; }
  uint64_t misses() const { return misses_->Value() - base_misses_; }
  uint64_t hub_read_bytes() const { return hub_bytes_->Value() - base_hub_bytes_; }
  uint64_t cache_read_bytes() const { return cache_bytes_->Value() - base_cache_bytes_; }
  uint64_t prefetch_issued_blocks() const { return prefetch_blocks_.load(); }
  // Mean time readers waited for the hub, per read that missed (GetBlocks calls that waited).
  double demand_miss_latency_ms_avg() const;
  uint64_t demand_miss_reads() const { return demand_miss_count_.load(); }
  // Demand fetches never sent: every reader of them had passed its deadline.
  uint64_t expired_drops() const { return expired_drops_.load(); }
  // Demand blocks served but not cached because the store queue was full.
  uint64_t store_skips() const { return store_skips_.load(); }
  // The staging buffer's figures (all zero without staging).
  StagingBuffer::Stats staging_stats() const;

 private:
  using FetchPtr = BlockFetchPtr;
  using SteadyTime = std::chrono::steady_clock::time_point;
  BlockKey Key(const FileRef& f, uint64_t index) const;
  uint32_t BlockLength(const FileRef& f, uint64_t index) const;
  // `room_taken`: the caller took the block's room in the memory budget (prefetch, warm-up);
  // otherwise a new fetch is charged (a reader's). A joined fetch keeps its own room; one
  // promoted out of prefetch leaves the prefetch bytes and moves its room to demand.
  FetchPtr Join(const FileRef& file, uint64_t index, const FetchTable::Ask& ask, bool* created,
                bool room_taken) REQUIRES(mu_);
  void Dispatch() EXCLUDES(mu_);  // starts queued fetches while there is room
  // The next queued fetch the dispatcher lets go, most urgent class first; null when none.
  FetchPtr NextToSendLocked(SteadyTime now) REQUIRES(mu_);
  // `from_hub`: false for a block the BlockSource gave (not counted as hub bytes).
  void OnFetched(const FetchPtr& f, Result<std::vector<char>> r, bool from_hub);
  // `f`'s source ask failed: queued again, first of its class, on the route the dispatcher
  // gives it; false (the reader reads the hub at once) while stopping.
  bool RequeueAfterSource(const FetchPtr& f, bool busy) EXCLUDES(mu_);
  // On a store thread: puts the fetched block into the cache, then settles it.
  void Store(const FetchPtr& f);
  // On a store thread: a prefetched block that would evict a cached one is staged instead
  // (with staging); false when it is to be stored.
  bool StagedInsteadOfStored(const FetchPtr& f) EXCLUDES(mu_);
  uint64_t StoredGen() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stored_gen_;
  }
  // Done with `f`: settled, its memory room given back, out of the table. mu_ held.
  void SettleLocked(const FetchPtr& f) REQUIRES(mu_);
  // kTimeout when `f` is not done by `deadline`.
  Result<BlockData> Wait(const FetchPtr& f, SteadyTime deadline);
  // Warm-up is no reader: it waits (bounded by read_deadline) for background room in the
  // memory budget, letting queued fetches go meanwhile; past the deadline it is charged.
  void TakeWarmRoom(uint32_t length);
  // Gives the fetch's bytes back to the memory budget (if it holds any). mu_ held.
  void ReleaseMemoryLocked(BlockFetch& f) REQUIRES(mu_);
  // Takes the fetch's bytes out of prefetch_bytes_ (if they are in). mu_ held.
  void UncountPrefetchLocked(BlockFetch& f) REQUIRES(mu_);
  // A staged block a reader took: queued for the cache as a demand block (a reader fetched
  // it), unless it is being fetched already or there is no room to queue it. Returns the
  // queued fetch (settled once stored), or null.
  FetchPtr AdmitTaken(const BlockKey& key, const BlockData& data);
  // The block from the cache or the staging buffer, without the hub; nullopt if neither has
  // it. A cached block of the wrong length is dropped with its file's blocks.
  std::optional<BlockData> LocalBlock(const FileRef& file, uint64_t index, uint32_t len);

  BlockCache* cache_;
  uint64_t volume_;
  Config config_;
  FetchReader reader_;

  mutable Mutex mu_;
  CondVar done_cv_;
  FetchTable table_ GUARDED_BY(mu_);
  FetchDispatcher dispatcher_ GUARDED_BY(mu_);
  int callbacks_pending_ GUARDED_BY(mu_) = 0;  // sent fetches whose callback has not returned
  bool stopping_ GUARDED_BY(mu_) = false;
  // Fetches stored in the cache and then taken out of table_ (Store). GetBlocks looks in the
  // cache before it takes mu_ to join a fetch: when this moved in between, the block may have
  // been stored in that window and it looks again rather than read the hub twice.
  uint64_t stored_gen_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> prefetch_bytes_{0};
  std::atomic<uint64_t> prefetch_blocks_{0};
  std::atomic<uint64_t> expired_drops_{0};  // demand fetches dropped at their deadline
  std::atomic<uint64_t> store_skips_{0};    // demand blocks not cached: store queue full
  std::atomic<uint64_t> demand_miss_count_{0};
  std::atomic<uint64_t> demand_miss_micros_{0};

  std::unique_ptr<StagingBuffer> staging_;  // null without staging

  metrics::Counter* hits_;
  metrics::Counter* misses_;
  metrics::Counter* hub_bytes_;
  metrics::Counter* cache_bytes_;
  metrics::Counter* put_failures_;
  metrics::Gauge* window_gauge_;
  metrics::Gauge* source_window_gauge_;
  metrics::Histogram* miss_latency_;
  uint64_t base_hits_, base_misses_, base_hub_bytes_, base_cache_bytes_;
  // Made last, stopped first: its threads call Store.
  std::unique_ptr<StoreQueue> store_queue_;
};

}  // namespace spoke::agent
