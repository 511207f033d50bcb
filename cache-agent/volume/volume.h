// Volume: one mounted volume's data stack, without the kernel. It owns, in build order,
// the hub client (RemoteFs) -> MetadataCache (+ background walk) -> BlockFetcher (over the
// agent's shared BlockCache) -> PrefetchDriver (the volume's prefetch mode) -> VolumeFs,
// and serves the control plane's operations on it: figures, warm-up, evict and hints.
// A FUSE session (fuse/) serves fs() to the kernel; tests drive it directly.
#pragma once

#if !__has_include("spoke_layer/volume.h")
#error "wrong-way include: cache-agent/volume/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/clock.h"
#include "cache-agent/fs/metadata_cache.h"
#include "cache-agent/fs/prefetch_driver.h"
#include "cache-agent/fs/volume_fs.h"
#include "cache-agent/remote/remote_fs.h"
#include "cache-agent/volume/volume_figures.h"
#include "common/memory_budget.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

class Volume {
 public:
  struct Config {
    std::string volume_id;
    VolumeContext context;
    bool read_only = true;  // the mount's; a read-only context makes it read-only too
    // Upper bound of the per-file sequential read-ahead window.
    uint64_t read_ahead_max_bytes = 64ull << 20;
    // Prefetch bytes queued or in flight (the rest of the pipe is for demand).
    uint64_t prefetch_bytes_max = 256ull << 20;
    // Hub reads in flight (the hub pool's connections x inflight).
    int max_hub_inflight = 256;
    // Reads are paced to the WAN link's rate so that they leave about this much queue delay
    // in it, which is what a reader's block waits behind (LinkPacer; readers first, warm-up
    // and prefetch in what they leave). 0 = no pacing: the in-flight bounds alone.
    std::chrono::milliseconds link_queue_target{200};
    // Bytes let on the hub before the first measure of the link: what a slow link queues at
    // the start (16 MiB: 2.3 s at 7.2 MB/s); a fast link's window grows up to 4x per two
    // round trips from it.
    uint64_t link_initial_window = 16ull << 20;
    // A reader's request gives kTimeout after this, queue time included (BlockFetcher).
    std::chrono::milliseconds read_deadline{20000};
    // Directories listed at once by the mount-time metadata walk.
    int walk_concurrency = 8;
    // Block size when there is no cache; otherwise the cache's.
    uint32_t block_size = 1 << 20;
    // The agent's memory budget, shared by all volumes (optional; must outlive the volume):
    // prefetch buffers, store queue, hints and metadata draw on it.
    MemoryBudget* memory = nullptr;
    // Prefetched blocks held in memory while the cache is full, until read (BlockFetcher's
    // staging); at most a quarter of the memory budget's background share. 0 = none.
    uint64_t staging_bytes_max = 256ull << 20;
    // Scratch volumes: writes answered and not yet stable on the hub, at most (WriteBack's
    // budget_bytes; they draw on `memory` too).
    uint64_t write_back_bytes = 64ull << 20;
    // This volume's hint queue bounds (lines, accounted bytes).
    size_t hints_max_lines = 1 << 20;
    uint64_t hints_max_bytes = 64ull << 20;
    // Asked before the hub for blocks to fetch (the cluster's peers); null = hub only. Must
    // outlive the volume.
    BlockSource* block_source = nullptr;
    // The mount's own directory in the agent's state directory: the openers of writable
    // handles (open-files/, OpenRecords), the root's attributes (root, kept_root.h) and the
    // inodes the kernel holds (inodes, kernel_inode_log.h) outlive the agent there. "" = nothing
    // kept. `adopted`: the mount is an earlier agent's connection taken over: its records are read,
    // and it starts from the kept root without a hub round trip (the hub may be down); otherwise
    // the directory starts empty.
    std::string state_dir;
    bool adopted = false;
    Status Validate() const;
  };

  // Builds the stack over `remote`: reads the volume's root (kUnavailable when the hub does
  // not answer within its timeout), starts the metadata walk. `cache` may be null (reads
  // pass through); `listeners` (may be null) routes the cache's prefetch verdicts to this
  // volume's scheduler. `registry` (may be null: the counters are kept privately) gets the
  // volume's series. `cache`, `registry` and `clock` must outlive the volume.
  static Result<std::unique_ptr<Volume>> Open(const Config& config,
                                              std::unique_ptr<RemoteFs> remote, BlockCache* cache,
                                              std::shared_ptr<CacheListenerFanout> listeners,
                                              metrics::Registry* registry, Clock& clock);
  ~Volume();
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  const std::string& volume_id() const { return config_.volume_id; }
  const VolumeContext& context() const { return config_.context; }
  bool read_only() const { return read_only_; }
  VolumeFs& fs() { return *fs_; }
  // The volume's fetcher: peers are served from it (cache, or one hub read).
  BlockFetcher& fetcher() { return *fetcher_; }
  // Its metadata: a peer's request is checked against it (the file at that path).
  MetadataCache& metadata() { return *metadata_; }

  // Figures for VolumeStats; asks the hub for FSSTAT (bounded by the hub timeout; on
  // failure hub_reachable=false and the error is kept, the call still succeeds).
  VolumeFigures Figures();
  // Fetches every block under `path_prefix` (relative; "" = all) into the cache, calling
  // `progress` now and then. Stops early when `cancelled` becomes true. `options`: a rate
  // limit on what it fetches, a verify pass after it (volume_figures.h).
  Status Warmup(const std::string& path_prefix,
                const std::function<void(const WarmupFigures&)>& progress,
                const std::atomic<bool>& cancelled);
  Status Warmup(const std::string& path_prefix, const WarmupOptions& options,
                const std::function<void(const WarmupFigures&)>& progress,
                const std::atomic<bool>& cancelled);
  // Drops cached blocks under `path_prefix` ("" = the whole volume). Returns blocks dropped.
  Result<uint64_t> Evict(const std::string& path_prefix);
  // The hint expert (auto mode) fetches the named files ahead, in order, as the budget
  // allows. Paths naming no regular file are rejected; other modes reject every path.
  HintFigures Hint(const std::vector<std::string>& paths);

 private:
  Volume(const Config& config, BlockCache* cache, std::shared_ptr<CacheListenerFanout> listeners);
  // Warmup's work, reporting to `progress` (which feeds the warm-up series).
  Status WarmupFiles(const std::string& path_prefix, WarmRateLimiter* rate,
                     const std::function<void(const WarmupFigures&)>& progress,
                     const std::atomic<bool>& cancelled, WarmupFigures* last);
  // The verify pass over the files under `prefix` (after WarmupFiles): adds its counts to
  // `figures` and reports them. The first error of a file (the others go on).
  Status VerifyFiles(const std::string& prefix, WarmRateLimiter* rate,
                     const std::function<void(const WarmupFigures&)>& progress,
                     const std::atomic<bool>& cancelled, WarmupFigures& figures);
  // Gives the volume's root the pod's fsGroup on the hub (VolumeContext::mount_group).
  void ApplyMountGroup(uint32_t group, const std::string& root_file);
  // Open's steps up to the metadata walk: the metadata cache, the records of open handles,
  // the root (its group), the kernel's inodes.
  Status OpenMetadata(Clock& clock);
  Status OpenRecordsInStateDir();
  // Reads the root: the kept one when adopted (no hub round trip), else the hub's (and keeps
  // it). Returns whether the kept root was used.
  Result<bool> InitRoot(const std::string& root_file);
  void KeepKernelInodes();

  // Warm-up progress for dashboards and alerts: counters of what warm-ups cached (rate() is
  // their speed) and the bytes the running ones still have to go (remaining / rate = ETA).
  struct WarmupSeries {
    metrics::Gauge* running = nullptr;
    metrics::Gauge* remaining_bytes = nullptr;
    metrics::Counter* bytes = nullptr;
    metrics::Counter* files = nullptr;
    metrics::Counter* ok = nullptr;
    metrics::Counter* failed = nullptr;
    metrics::Counter* cancelled = nullptr;
  };
  void RegisterWarmupSeries(metrics::Registry& reg, const metrics::Labels& labels);
  class WarmupRun;  // one warm-up's share of the series

  Config config_;
  bool read_only_;
  BlockCache* cache_;
  std::shared_ptr<CacheListenerFanout> listeners_;
  metrics::Registry own_registry_;  // when the caller gives none
  WarmupSeries warmup_series_;
  // Built in this order, destroyed in the reverse one.
  std::unique_ptr<RemoteFs> remote_;
  std::unique_ptr<MetadataCache> metadata_;
  std::unique_ptr<BlockFetcher> fetcher_;
  std::unique_ptr<PrefetchDriver> driver_;
  std::unique_ptr<OpenRecords> open_records_;  // outlives fs_
  std::unique_ptr<VolumeFs> fs_;
};

}  // namespace spoke::agent
