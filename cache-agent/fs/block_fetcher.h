// BlockFetcher: brings blocks of hub files into the BlockCache and hands them to readers.
//
// - Cache first, hub on a miss; a block being fetched is fetched once: later askers (demand
//   or prefetch) join the fetch in flight.
// - Demand fetches go before prefetches: two queues, demand drained first, and prefetch
//   bytes in flight are capped so prefetch never fills the pipe that demand needs.
// - A failed cache Put (kNoSpace, kIo) never fails a read: the fetched bytes are served.
// - A null cache means "cache disabled": reads pass through (still de-duplicated).
//
// Counts per volume: spoke_cache_hits_total, spoke_cache_misses_total,
// spoke_hub_read_bytes_total, spoke_cache_read_bytes_total.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/prefetch/predictor.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

// One version of one hub file.
struct FileRef {
  std::string path;
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t size = 0;
};

using BlockData = std::shared_ptr<const std::vector<char>>;

class BlockFetcher {
 public:
  struct Config {
    uint32_t block_size = 1 << 20;  // = BlockCache block size = hub rsize
    // Hub reads in flight from this fetcher (demand + prefetch). Matches the remote pool
    // (connections x inflight) so the pipe stays full.
    int max_hub_inflight = 256;
    // Prefetch bytes queued or in flight; the rest of the pipe is kept for demand.
    uint64_t prefetch_bytes_max = 192ull << 20;
    // Threads that store fetched blocks into the cache (disk I/O off the network loops).
    int store_threads = 2;
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
  std::vector<Result<BlockData>> GetBlocks(
      const FileRef& file, uint64_t first, uint64_t count, uint64_t* hits = nullptr,
      const std::function<void(uint64_t hits)>& before_wait = nullptr);

  // Queues a prefetch of the request's blocks that are neither cached nor in flight; block
  // i of the request is stored with AdmissionHint{request.expert, request.predicted_use + i}.
  // false when the prefetch budget is used up (the blocks before it stay queued).
  bool Prefetch(const PrefetchRequest& request);
  uint64_t PrefetchBytesInFlight() const { return prefetch_bytes_.load(); }
  // Fetches (cache miss) blocks into the cache, waiting for them: warm-up and hints.
  // Counts as demand but not as a reader's hit/miss. Returns hub bytes read.
  Result<uint64_t> Warm(const FileRef& file, uint64_t first, uint64_t count);

  bool Cached(const FileRef& file, uint64_t index) const;
  // True when the block is cached or being fetched (PrefetchSink::Has).
  bool Has(const BlockKey& key) const;
  uint32_t block_size() const { return config_.block_size; }
  uint64_t volume_key() const { return volume_; }
  // Drops the cached blocks of file `file_id` of this volume (0 = every file). Returns the
  // blocks dropped; 0 without a cache.
  uint64_t Evict(uint64_t file_id);
  // Bytes of this volume in the cache (0 without a cache).
  uint64_t CachedBytes() const;

  // Since this fetcher was made (the registry's series live on across remounts).
  uint64_t hits() const { return hits_->Value() - base_hits_; }
  uint64_t misses() const { return misses_->Value() - base_misses_; }
  uint64_t hub_read_bytes() const { return hub_bytes_->Value() - base_hub_bytes_; }
  uint64_t cache_read_bytes() const { return cache_bytes_->Value() - base_cache_bytes_; }
  uint64_t prefetch_issued_blocks() const { return prefetch_blocks_.load(); }
  // Mean time readers waited for the hub, per read that missed (GetBlocks calls that waited).
  double demand_miss_latency_ms_avg() const;
  uint64_t demand_miss_reads() const { return demand_miss_count_.load(); }

 private:
  struct Fetch;
  using FetchPtr = std::shared_ptr<Fetch>;
  BlockKey Key(const FileRef& f, uint64_t index) const;
  uint32_t BlockLength(const FileRef& f, uint64_t index) const;
  // Returns the fetch for the block, creating it (queued with `demand` priority) or
  // promoting an existing prefetch to demand.
  FetchPtr Join(const FileRef& file, uint64_t index, bool demand, ExpertId expert,
                double predicted_use, bool* created) REQUIRES(mu_);
  void Dispatch() EXCLUDES(mu_);  // starts queued fetches while there is room; takes mu_
  void OnFetched(const FetchPtr& f, Result<std::vector<char>> r);
  void StoreLoop();
  Result<BlockData> Wait(const FetchPtr& f);

  RemoteFs& remote_;
  BlockCache* cache_;
  uint64_t volume_;
  Config config_;

  mutable Mutex mu_;
  CondVar done_cv_;
  std::unordered_map<BlockKey, FetchPtr, BlockKeyHash> inflight_ GUARDED_BY(mu_);
  std::deque<FetchPtr> demand_q_ GUARDED_BY(mu_);
  std::deque<FetchPtr> prefetch_q_ GUARDED_BY(mu_);
  int hub_inflight_ GUARDED_BY(mu_) = 0;
  int callbacks_pending_ GUARDED_BY(mu_) = 0;  // hub reads whose callback has not returned
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> prefetch_bytes_{0};
  std::atomic<uint64_t> prefetch_blocks_{0};
  std::atomic<uint64_t> demand_miss_count_{0};
  std::atomic<uint64_t> demand_miss_micros_{0};

  Mutex store_mu_;
  CondVar store_cv_;
  std::deque<std::pair<FetchPtr, Result<std::vector<char>>>> store_q_ GUARDED_BY(store_mu_);
  bool store_stop_ GUARDED_BY(store_mu_) = false;
  std::vector<std::thread> storers_;

  metrics::Counter* hits_;
  metrics::Counter* misses_;
  metrics::Counter* hub_bytes_;
  metrics::Counter* cache_bytes_;
  metrics::Counter* put_failures_;
  metrics::Histogram* miss_latency_;
  uint64_t base_hits_, base_misses_, base_hub_bytes_, base_cache_bytes_;
};

}  // namespace spoke::agent
