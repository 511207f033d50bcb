// StagingBuffer: prefetched blocks held in memory until a reader takes them, for a cache that
// is full. A prefetched block could only enter a full cache by evicting a block a later read
// then misses; served from here on its first read and then offered to the cache as if the
// reader had fetched it, it leaves the cache as it would be without prefetching. Entries are
// keyed by BlockKey (file id and version), taken once, bounded by `max_bytes` and the agent's
// MemoryBudget (a refusal drops the block, never makes a reader wait). Why `held` blocks have
// no ttl, and the metrics: docs/design.md, "Staging".
//
// Thread-safe; a leaf lock: no method calls out while holding it (the budget's lock is a
// leaf too and is taken after it).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache-agent/cache/block_key.h"
#include "cache-agent/fs/block_bytes.h"
#include "cache-agent/fs/clock.h"
#include "common/memory_budget.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class StagingBuffer {
 public:
  using Data = BlockData;

  struct Config {
    // Bytes of staged blocks held at most (0 = no staging).
    uint64_t max_bytes = 256ull << 20;
    // A staged block not read within this long is dropped: the prediction did not come true
    // (as the prefetcher's idle release).
    std::chrono::milliseconds ttl{std::chrono::minutes(2)};
    // The ttl of a held block: only a backstop for one whose prediction was never given up
    // (Drop), e.g. it arrived after the prefetcher had released it; an epoch is shorter.
    std::chrono::milliseconds held_ttl{std::chrono::minutes(30)};
    // The agent's memory budget (optional; must outlive the buffer).
    MemoryBudget* memory = nullptr;
    Status Validate() const;
  };

  struct Stats {
    uint64_t blocks = 0;  // held now
    uint64_t bytes = 0;   // held now
    uint64_t staged = 0;  // blocks put in since start
    uint64_t hits = 0;    // blocks taken by a reader
    uint64_t dropped_full = 0;
    uint64_t expired = 0;
    uint64_t evicted = 0;         // DropFile / Clear
    uint64_t memory_refused = 0;  // the memory budget had no room
  };

  // `clock` and `registry` must outlive the buffer.
  StagingBuffer(const Config& config, const Clock& clock, metrics::Registry& registry,
                const metrics::Labels& labels);
  ~StagingBuffer();  // Clear()
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // Holds `data` (the checked bytes of block `key`) until it is taken, for at most ttl unless
  // `held` (see above). Makes room by dropping the oldest blocks, unheld ones first; false
  // (nothing held) when the block is larger than max_bytes or the memory budget refuses it.
  bool Put(const BlockKey& key, Data data, bool held = false);
  // The block's bytes, removed from the buffer; nullopt when it is not held (or expired).
  std::optional<Data> Take(const BlockKey& key);
  bool Contains(const BlockKey& key) const;
  // Whether `length` more bytes fit without dropping anything, counting `reserved` bytes
  // that are on their way in (prefetches in flight).
  bool HasRoom(uint64_t length, uint64_t reserved) const;
  // Drops the blocks of file `file_id` of volume `volume` (file_id 0 = every file of it).
  // Returns the blocks dropped.
  uint64_t DropFile(uint64_t volume, uint64_t file_id);
  // Drops block `key` unread because its prediction was given up (counted as expired).
  // Returns whether it was held.
  bool Drop(const BlockKey& key);
  void Clear();
  // Drops the blocks older than ttl; Put and Take do it too.
  void Expire();
  Stats GetStats() const;
  uint64_t max_bytes() const { return config_.max_bytes; }

 private:
  struct Entry {
    BlockKey key;
    Data data;
    SteadyTime staged_at;
  };
  using List = std::list<Entry>;
  struct Where {
    List::iterator it;
    bool held;  // in held_, else in order_
  };
  // Removes the entry and gives its bytes back to the budget.
  void EraseLocked(Where w) REQUIRES(mu_);
  // The oldest entry, unheld ones first (the one to drop for room); nullopt when empty.
  std::optional<Where> OldestLocked() REQUIRES(mu_);
  void ExpireLocked(SteadyTime now) REQUIRES(mu_);

  const Config config_;
  const Clock& clock_;

  mutable Mutex mu_;
  List order_ GUARDED_BY(mu_);  // blocks under the ttl, oldest first
  List held_ GUARDED_BY(mu_);   // held blocks (no ttl), oldest first
  std::unordered_map<BlockKey, Where, BlockKeyHash> index_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);

  metrics::Counter* staged_;
  metrics::Counter* hits_;
  metrics::Counter* dropped_full_;
  metrics::Counter* expired_;
  metrics::Counter* evicted_;
  metrics::Counter* memory_refused_;
  metrics::Gauge* bytes_gauge_;
};

}  // namespace spoke::agent
