// Slot I/O: one block with its header written to, or read and verified from, a store slot.
// Zero-copy when the caller's buffer takes O_DIRECT (aligned, padded length); otherwise
// through a bounce buffer from the pool.
//
// Locking: none of its own; runs without the cache's mutex, on a slot the caller owns (being
// written) or pinned (being read). The store and the pool are thread-safe.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdint>
#include <string>

#include "cache-agent/cache/block_header.h"
#include "cache-agent/cache/block_store.h"
#include "cache-agent/cache/buffer_pool.h"

namespace spoke::agent {

// Writes header `h` (its data_checksum is computed here) and `h.length` bytes of `data` at the
// start of `slot`, zero-padded to kIoAlign. kIo on a device error or no bounce buffer.
Status WriteBlock(BlockStore& store, BufferPool& buffers, uint64_t slot, BlockHeader h,
                  const char* data);

struct BlockRead {
  Status io = Ok();  // the device read (kIo: device error or no bounce buffer)
  // Why the block read is not the block expected (empty when it is): bad header, another
  // key, another generation or length, data checksum mismatch.
  std::string bad;
  bool ok() const { return io && bad.empty(); }
};
// Reads the block expected in `slot` (key, generation `seq`, `length` bytes) into `out`
// (capacity >= length) and verifies its header and data checksum. `out` holds the block only
// when the result is ok().
BlockRead ReadBlock(BlockStore& store, BufferPool& buffers, uint64_t slot, uint32_t block_size,
                    const BlockKey& key, uint64_t seq, uint32_t length, char* out, size_t capacity);

}  // namespace spoke::agent
