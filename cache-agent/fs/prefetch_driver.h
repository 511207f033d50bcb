// PrefetchDriver: the one place where a volume's data path meets the prefetcher. It runs the
// volume's PrefetchScheduler according to the volume's prefetch mode:
//   off       = no scheduler (nothing is fetched ahead; hints are rejected),
//   readahead = SequentialPredictor only,
//   auto      = SequentialPredictor + directory-order, epoch-replay, epoch-working-set and
//               hint experts (fed the metadata walk's files directory by directory, as
//               the walk lists them).
// VolumeFs reports opens/reads/closes and demand-miss latencies; the scheduler's decisions
// go to the BlockFetcher (FetcherPrefetchSink). A small thread per volume calls Tick()
// every `tick_interval`, so background (working-set, hint) prefetch proceeds without reads;
// tests set tick_interval = 0 and call Tick() themselves.
//
// Threading: every method is thread-safe. No method may be called while holding the
// fetcher's or the cache's locks (the scheduler calls into the fetcher and the cache).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/clock.h"
#include "cache-agent/fs/metadata_cache.h"
#include "cache-agent/prefetch/hint_predictor.h"
#include "cache-agent/prefetch/prefetch_metrics.h"
#include "cache-agent/prefetch/prefetch_scheduler.h"
#include "common/metrics.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

namespace spoke::agent {

// PrefetchSink over a BlockFetcher: Submit = BlockFetcher::Prefetch (prefetch queue, behind
// demand reads), InFlightBytes = its prefetch bytes queued or in flight, Has = cached or
// being fetched or staged, WouldAdmit = BlockFetcher::WouldAdmit (free cache room or staging
// room; the cache's answer without staging), FreeCacheBytes = the cache's free room,
// Abandon = BlockFetcher::DropStaged (a staged set prediction's block given up).
class FetcherPrefetchSink final : public PrefetchSink {
 public:
  explicit FetcherPrefetchSink(BlockFetcher& fetcher) : fetcher_(fetcher) {}
  bool Submit(const PrefetchRequest& request) override { return fetcher_.Prefetch(request); }
  uint64_t InFlightBytes() const override { return fetcher_.PrefetchBytesInFlight(); }
  bool Has(const BlockKey& key) const override { return fetcher_.Has(key); }
  bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const override {
    return fetcher_.WouldAdmit(key, hint);
  }
  uint64_t FreeCacheBytes() const override { return fetcher_.CacheFreeBytes(); }
  void Abandon(const BlockKey& key) override { fetcher_.DropStaged(key); }

 private:
  BlockFetcher& fetcher_;
};

// The block cache has one listener for all volumes: this one routes each verdict to the
// listener of the block's volume (key.volume). Remove() returns only when no callback into
// the removed listener is running, so the listener may be destroyed right after.
class CacheListenerFanout final : public CacheListener {
 public:
  void Add(uint64_t volume_key, CacheListener* listener);
  void Remove(uint64_t volume_key, CacheListener* listener);
  void OnPrefetchUsed(const BlockKey& key, ExpertId expert) override;
  void OnPrefetchWasted(const BlockKey& key, ExpertId expert) override;

 private:
  Mutex mu_;  // taken under the cache's lock; never take the cache's lock under it
  std::unordered_map<uint64_t, CacheListener*> listeners_ GUARDED_BY(mu_);
};

class PrefetchDriver {
 public:
  struct Config {
    std::string volume_id;  // metric labels
    PrefetchMode mode = PrefetchMode::kAuto;
    // Upper bound of the per-file sequential read-ahead window.
    uint64_t read_ahead_max_bytes = 64ull << 20;
    // Unverified prefetched bytes this volume may hold in the cache (its share of the
    // cache); 0 = 4 x read_ahead_max_bytes.
    uint64_t space_budget_bytes = 0;
    // Prefetch bytes in flight: about bandwidth x RTT (see PrefetchScheduler::Config).
    uint64_t max_inflight_bytes = 64ull << 20;
    // Re-planning without reads (working set, hints). 25 ms: well under one 60 ms RTT, so
    // the WAN never idles for long; a Tick with nothing to do is a few map lookups.
    // 0 = no thread (the owner calls Tick()).
    std::chrono::milliseconds tick_interval{25};
    // PrefetchMetrics are refreshed every this many ticks (and on UpdateMetrics()).
    int metrics_every_ticks = 40;
    // The agent's memory budget (optional; must outlive the driver): the hint queue draws on
    // it, and the metadata cache's entries are accounted in it (kMetadataEntryBytes each,
    // refreshed with the metrics; the tick thread runs for this even when prefetch is off).
    MemoryBudget* memory = nullptr;
    // Per-volume bounds of the hint queue (lines, accounted bytes).
    size_t hints_max_lines = 1 << 20;
    uint64_t hints_max_bytes = 64ull << 20;
  };
  // Estimated memory of one metadata entry: the inode with its name, listing slot and NFS
  // handle, and the walked file's copy in the access tracker.
  static constexpr uint64_t kMetadataEntryBytes = 512;

  // `metadata` (optional) is the volume's metadata cache: its walk feeds the tracker
  // (auto mode). `registry` (optional) gets the volume's spoke_prefetch_* series.
  // `fetcher`, `clock`, `metadata` and `registry` must outlive the driver.
  PrefetchDriver(const Config& config, BlockFetcher& fetcher, const Clock& clock,
                 MetadataCache* metadata, metrics::Registry* registry);
  ~PrefetchDriver();  // stops the tick thread
  PrefetchDriver(const PrefetchDriver&) = delete;
  PrefetchDriver& operator=(const PrefetchDriver&) = delete;

  // A driver for `mode` with a system clock, no walk feed, no metrics and no tick thread.
  static std::unique_ptr<PrefetchDriver> ForMode(PrefetchMode mode, BlockFetcher& fetcher,
                                                 uint64_t read_ahead_max_bytes);

  // True when prefetch is off (no scheduler): the events are ignored.
  bool empty() const { return scheduler_ == nullptr; }
  PrefetchMode mode() const { return config_.mode; }
  // The scheduler's CacheListener (null when off), for CacheListenerFanout.
  CacheListener* listener() { return scheduler_.get(); }

  void OnOpen(const OpenEvent& e);
  // Call right after the cache lookup, before waiting for missed blocks.
  void OnRead(const ReadEvent& e);
  void OnClose(const CloseEvent& e);
  // A file left the volume through the mount (unlinked, renamed, replaced by a rename): the
  // prefetcher forgets it (PrefetchScheduler::ForgetFile). Path relative to the volume root.
  void ForgetFile(std::string_view path);
  // Feeds the directories the metadata walk listed since the last call to the tracker
  // (auto), forgets the files the metadata cache found removed on the hub since the last
  // call (MetadataCache::TakeRemovedFiles: removed or renamed away by other clients), then
  // re-plans.
  void Tick();

  // Hints (HintPredictor; all rejected unless the mode is auto).
  HintCounts AddHints(std::string_view text);
  HintCounts FlushHints();
  HintCounts AddHintPaths(std::span<const std::string> paths);

  PrefetchStats Stats() const;
  // Refreshes the prefetch metrics and the metadata estimate in the memory budget.
  void UpdateMetrics();
  bool tree_fed() const { return tree_fed_.load(); }

 private:
  void FeedTreeIfReady();
  void ForgetRemovedOnHub();
  void TickLoop();
  void AccountMetadata();

  const Config config_;
  MetadataCache* metadata_;
  FetcherPrefetchSink sink_;
  std::unique_ptr<PrefetchScheduler> scheduler_;  // null when off

  Mutex feed_mu_;                                // one feeder at a time
  std::atomic<bool> tree_fed_{false};            // the whole walk was fed
  size_t walk_cursor_ GUARDED_BY(feed_mu_) = 0;  // MetadataCache::WalkedSince
  uint64_t walk_files_fed_ GUARDED_BY(feed_mu_) = 0;

  Mutex metrics_mu_;
  std::unique_ptr<PrefetchMetrics> metrics_ GUARDED_BY(metrics_mu_);
  uint64_t metadata_charged_ GUARDED_BY(metrics_mu_) = 0;  // bytes in the budget
  int ticks_ GUARDED_BY(metrics_mu_) = 0;

  Mutex tick_mu_;
  CondVar tick_cv_;
  bool stop_ GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
};

}  // namespace spoke::agent
