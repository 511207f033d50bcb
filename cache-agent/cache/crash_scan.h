// Crash recovery: rebuilding the block index from the slot headers when no clean index is
// there, and giving back disk space the files hold beyond the blocks found.
//
// ScanSlotHeaders reads every slot's header (several threads, strided slots, so the ring pool
// keeps the disk busy: a header read is latency-bound and a 1 TiB cache has a million);
// ResolveGenerations keeps the newest generation of each key and names the older copies, which
// still carry a valid header and must be cleared, or a crash after the newest is evicted would
// bring them back. PunchBeyondExtents punches every slot past the bytes it should hold.
//
// Locking: none of its own. The functions do device I/O and run without the cache's mutex;
// `on_io_error` is called from worker threads (it may lock the cache's mutex to count the
// error) and returns true to stop (the cache is degraded).
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <vector>

#include "cache-agent/cache/block_header.h"
#include "cache-agent/cache/block_store.h"
#include "cache-agent/cache/buffer_pool.h"

namespace spoke::agent {

struct FoundHeader {
  uint64_t slot = 0;
  BlockHeader header;
};

struct HeaderScan {
  std::vector<FoundHeader> found;  // valid headers, in no particular order
  uint64_t invalid = 0;            // torn or foreign headers (a never-written slot reads zeros)
};

using IoErrorHandler = std::function<bool(const Status& error)>;

// Reads and decodes every slot header of `store` (buffers from `buffers`, at least
// kHeaderBytes each).
HeaderScan ScanSlotHeaders(BlockStore& store, uint32_t block_size, BufferPool& buffers,
                           const IoErrorHandler& on_io_error);

struct ResolvedScan {
  std::vector<FoundHeader> blocks;    // newest copy of each key, oldest write (coldest) first
  std::vector<uint64_t> stale_slots;  // older copies of a key, to clear
  uint64_t max_seq = 0;               // highest generation seen (0 when none)
};
ResolvedScan ResolveGenerations(const std::vector<FoundHeader>& found);

// Punches slot s from keep[s] to its end for every slot with keep[s] < slot_size. Returns true
// when the filesystem refused (EOPNOTSUPP; the remaining slots are skipped).
bool PunchBeyondExtents(BlockStore& store, const std::vector<uint32_t>& keep,
                        const IoErrorHandler& on_io_error);

}  // namespace spoke::agent
