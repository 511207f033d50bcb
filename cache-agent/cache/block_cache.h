// BlockCache: fixed-size blocks of remote files on local NVMe.
//
// Every block on disk carries a header (key, length, checksum) verified on read: a bad
// block is dropped and counted, never served. The index is persisted on clean shutdown and
// rebuilt by scanning block headers after a crash. A cache-disk error degrades to "miss"
// (the caller reads from the hub), with a warning and a metric, never to a failed read.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <memory>
#include <string>

#include "cache-agent/cache/block_key.h"
#include "cache-agent/cache/eviction_policy.h"
#include "common/status.h"

namespace spoke::metrics {
class Registry;
}

namespace spoke::agent {

// Told when a prefetched block is first read, or evicted without being read.
class CacheListener {
 public:
  virtual ~CacheListener() = default;
  virtual void OnPrefetchUsed(const BlockKey& key, ExpertId expert) = 0;
  virtual void OnPrefetchWasted(const BlockKey& key, ExpertId expert) = 0;
};

struct BlockCacheStats {
  uint64_t capacity_bytes = 0;  // quota for block data
  uint64_t used_bytes = 0;      // block data held (sum of block lengths)
  // What the quota is enforced on: disk space charged to cached and in-flight blocks (a 4 KiB
  // header + the length rounded up to 4 KiB each; a whole slot each when the filesystem cannot
  // punch holes), kept <= disk_quota_bytes = capacity plus one header per block_size of it.
  uint64_t disk_bytes = 0;
  uint64_t disk_quota_bytes = 0;
  uint64_t blocks = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t checksum_failures = 0;
  uint64_t disk_errors = 0;
  uint64_t rejected_admissions = 0;
  bool degraded = false;  // the cache disk failed; every read goes to the hub
};

class BlockCache {
 public:
  struct Config {
    std::string dir;                        // cache directory (NVMe in production)
    uint64_t capacity_bytes = 10ull << 30;  // quota for block data
    uint32_t block_size = 1 << 20;          // 1 MiB = NFS rsize: one hub request per block
    unsigned io_depth = 64;                 // io_uring queue depth
    static constexpr uint32_t kMinBlockSize = 64u << 10;
    static constexpr uint32_t kMaxBlockSize = 16u << 20;
    Status Validate() const;
  };

  virtual ~BlockCache() = default;

  // Alignment of a Get buffer that the cache fills in place (its O_DIRECT read lands there,
  // no bounce buffer and copy): `out` aligned to it, `capacity` >= the block's length rounded
  // up to it. Other buffers work too, through a copy.
  static constexpr size_t kDirectAlign = 4096;

  // Copies the block into `out` (capacity >= its length) and returns its length. Only a
  // verified block's bytes are returned; on failure `out` holds anything.
  // kNotFound: not cached (or just dropped: bad checksum / disk error, counted).
  virtual Result<size_t> Get(const BlockKey& key, char* out, size_t capacity) = 0;
  // Stores a block (length <= block_size; short only for a file's last block). Returns
  // kNoSpace when the policy refused admission, kIo when the disk failed (degraded).
  virtual Status Put(const BlockKey& key, const char* data, size_t length,
                     const AdmissionHint& hint) = 0;
  virtual bool Contains(const BlockKey& key) const = 0;
  // Whether a Put of `key` with `hint` would be admitted now (cached already, free room, or
  // the eviction policy would find a victim); changes nothing. The prefetcher asks before a
  // block crosses the WAN. A later Put may still be refused: the cache moves on meanwhile.
  virtual bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const = 0;
  // Bytes Puts can still take without evicting anything (0 when degraded or full). Filling
  // free room costs the cache nothing, so the prefetcher may spend it on proven predictions.
  virtual uint64_t FreeBytes() const = 0;
  // Drops every block of a volume (file_id == 0) or of one file. Returns blocks dropped.
  virtual uint64_t Evict(uint64_t volume, uint64_t file_id) = 0;
  // Bytes held for one volume.
  virtual uint64_t VolumeBytes(uint64_t volume) const = 0;
  virtual BlockCacheStats Stats() const = 0;
  virtual uint32_t block_size() const = 0;
  // Persists the index (clean shutdown). The destructor calls it too.
  virtual Status Close() = 0;
  virtual void SetListener(CacheListener* listener) = 0;
};

// Opens (creating, resuming or recovering) the block cache in config.dir: slot files through
// io_uring (slot_file_block_cache.h, uring_block_store.h). `metrics` may be null; when given,
// the cache registers spoke_cache_* series in it (it must outlive the cache).
// kInvalidArgument: bad config (names the field) or unusable dir; kUnavailable: dir in use by
// another cache; kIo / kNoSpace: the data files could not be created.
Result<std::unique_ptr<BlockCache>> OpenBlockCache(const BlockCache::Config& config,
                                                   std::unique_ptr<EvictionPolicy> policy,
                                                   metrics::Registry* metrics);

}  // namespace spoke::agent
