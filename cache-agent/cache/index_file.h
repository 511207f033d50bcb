// IndexFile: the block index persisted at clean shutdown, <dir>/index (valid only while the
// clean marker, cache_dir.h, says so).
//
// Layout (little-endian): a 48-byte header (magic, version, block_size, slot_count, next_seq,
// entry count, flags), entry_count 56-byte entries (key, slot, seq, length, origin, read), and
// an XXH3-64 of every byte before it. Written to index.tmp, fsynced, renamed over index, so a
// crash leaves either the old file or the new one; a torn or foreign file fails the checksum.
//
// Locking: none; pure functions over files. The cache calls them with its mutex released.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <string>
#include <vector>

#include "cache-agent/cache/block_key.h"
#include "cache-agent/cache/eviction_policy.h"
#include "common/status.h"

namespace spoke::agent {

struct IndexRecord {
  BlockKey key;
  uint64_t slot = 0;
  uint64_t seq = 0;  // write generation; also in the slot's header
  uint32_t length = 0;
  ExpertId origin = kDemand;
  bool read = false;  // a prefetched block was read at least once
};

struct IndexContents {
  uint32_t block_size = 0;
  uint64_t slot_count = 0;
  uint64_t next_seq = 1;             // greater than every record's seq
  bool punched = false;              // free slots and block tails were punched (charged by bytes)
  std::vector<IndexRecord> records;  // coldest first
};

// Writes `contents` to <dir>/index atomically (tmp + fsync + rename). kIo on failure.
Status WriteIndexFile(const std::string& dir, const IndexContents& contents);

// Reads <dir>/index and checks it against the geometry the cache opened with. The error
// (kNotFound: missing or unreadable; kChecksum: anything else) says why it was rejected: truncated,
// checksum, format, geometry changed, hole punching changed, size, inconsistent entry (slot
// out of range or used twice, bad length, duplicate key, seq >= next_seq).
Result<IndexContents> ReadIndexFile(const std::string& dir, uint32_t block_size,
                                    uint64_t slot_count, bool punched);

// Removes <dir>/index (a stale index must not be loaded after a crash).
void RemoveIndexFile(const std::string& dir);

}  // namespace spoke::agent
