// MemoryBudget: the agent's one byte budget for the memory that its inputs can make it hold,
// shared by every volume (config key `memoryBudgetBytes`).
//
// Uses (each accounted on its own, all against the one total):
//   kPrefetch   prefetch blocks queued or being read from the hub (held until stored/dropped)
//   kStoreQueue fetched blocks waiting for a store thread
//   kDemand     blocks readers (and warm-ups) wait for
//   kHints      queued hint lines
//   kMetadata   metadata cache entries (an estimate per entry)
//   kStaged     prefetched blocks held in memory until read (the fetcher's StagingBuffer:
//               blocks a full cache would have to evict for)
//   kWriteBack  scratch volumes' writes answered to the writer and not yet stable on the hub
//               (WriteBack); a writer waits for room, as for its volume's own bound
//
// Two levels. Background takers (prefetch, hints, a prefetched block entering the store
// queue) stop at `total - demand_reserve`: a refusal is their back-pressure (the prefetcher
// re-plans later; a hint line is rejected and counted). Demand never waits on the budget:
// the blocks a reader needs are always fetched (Charge: accounted even above the total), and a
// demand block is queued for the cache only while the whole total has room (TryMove with
// kDemandLevel), else it is served and not cached. Nothing here blocks except AcquireWait,
// which only background callers use, so a reader can never wait for prefetch memory.
//
// Resident memory: the owner may tell the budget how much memory the process holds over its
// start (SetResident; ResidentWatch measures it). Each level is then checked against the
// larger of what is accounted and what is resident, so buffers the accounting cannot see (the
// NFS client's reply buffers, FUSE request buffers, the allocator's free lists) stop
// background takers too, and the budget bounds the agent's memory, not only its accounts.
//
// Thread-safe; no method calls out while holding the lock.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke {

class MemoryBudget {
 public:
  enum class Use : int {
    kPrefetch = 0,
    kStoreQueue,
    kDemand,
    kHints,
    kMetadata,
    kStaged,
    kWriteBack
  };
  static constexpr int kUses = 7;
  static std::string_view UseName(Use use);

  // Who may take the bytes: background stops at total - reserve, demand at total.
  enum class Level { kBackground, kDemand };

  struct Config {
    uint64_t total_bytes = 512ull << 20;
    // Share of the total only demand may take (its blocks' store queue room).
    double demand_reserve_share = 0.25;
    Status Validate() const;
  };

  // `config` must be valid (Validate); an invalid one is a bug and aborts.
  explicit MemoryBudget(const Config& config);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Takes `bytes` for `use` when the level has room; otherwise counts a refusal of `use`
  // and takes nothing.
  bool TryAcquire(Use use, uint64_t bytes, Level level = Level::kBackground);
  // Background only: waits (bounded by `deadline`) for room. false at the deadline (a
  // refusal). For callers that may block, never for readers.
  bool AcquireWait(Use use, uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  // Accounts bytes that must be held whatever the level (a reader's block, metadata the
  // namespace needs): never refused; used() may then exceed total().
  void Charge(Use use, uint64_t bytes);
  void Release(Use use, uint64_t bytes);
  // Moves bytes already held from one use to another, when `level` has room for what is
  // held in total (nothing new is taken); otherwise counts a refusal of `to`, moves nothing.
  bool TryMove(Use from, Use to, uint64_t bytes, Level level);
  // Moves held bytes unconditionally (a prefetch promoted to demand).
  void Move(Use from, Use to, uint64_t bytes);

  uint64_t total() const { return config_.total_bytes; }
  // Where background takers stop.
  uint64_t background_limit() const { return background_limit_; }
  uint64_t used() const;
  uint64_t used(Use use) const;
  // The process's memory over its start, as last told (0 until SetResident).
  uint64_t resident() const;
  // Returns used() at the same moment (the watch compares the two without a second lock).
  uint64_t SetResident(uint64_t bytes);
  // Peak of used() since start.
  uint64_t peak() const;
  uint64_t refusals(Use use) const;

  // Publishes spoke_memory_budget_bytes, spoke_memory_used_bytes{use},
  // spoke_memory_peak_bytes and spoke_memory_refusals_total{use} in `registry` (which must
  // outlive the budget), kept current from then on.
  void ExportTo(metrics::Registry& registry);

 private:
  uint64_t LimitOf(Level level) const;
  // What the levels are checked against: the larger of accounted and resident.
  uint64_t HeldLocked() const REQUIRES(mu_) { return std::max(used_total_, resident_); }
  void TakeLocked(Use use, uint64_t bytes) REQUIRES(mu_);
  void RefuseLocked(Use use) REQUIRES(mu_);
  void PublishLocked(Use use) REQUIRES(mu_);

  const Config config_;
  const uint64_t background_limit_;
  mutable Mutex mu_;
  CondVar room_cv_;
  uint64_t used_total_ GUARDED_BY(mu_) = 0;
  uint64_t peak_ GUARDED_BY(mu_) = 0;
  uint64_t resident_ GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kUses> used_ GUARDED_BY(mu_){};
  std::array<uint64_t, kUses> refusals_ GUARDED_BY(mu_){};
  // Null until ExportTo.
  metrics::Gauge* peak_gauge_ GUARDED_BY(mu_) = nullptr;
  metrics::Gauge* resident_gauge_ GUARDED_BY(mu_) = nullptr;
  std::array<metrics::Gauge*, kUses> used_gauges_ GUARDED_BY(mu_){};
  std::array<metrics::Counter*, kUses> refusal_counters_ GUARDED_BY(mu_){};
};

// Default budget when `memoryBudgetBytes` is 0: what a 2 GiB agent container gets from the
// chart (75% of its limit).
inline constexpr uint64_t kDefaultMemoryBudgetBytes = 1536ull << 20;

}  // namespace spoke
