// BufferPool: reusable kIoAlign-aligned bounce buffers of one size (a slot: header + block), so
// Get/Put/scan do not allocate a megabyte per call.
//
// Locking: its own mutex, held only to push or pop a buffer (never across I/O); safe to call
// from any thread, with or without the cache's mutex held.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <mutex>
#include <vector>

#include "cache-agent/cache/block_store.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class BufferPool {
 public:
  // Buffers of `buffer_bytes`; at most `spare` kept for reuse (the rest are freed on Give).
  BufferPool(size_t buffer_bytes, size_t spare) : buffer_bytes_(buffer_bytes), spare_(spare) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A spare buffer, or a new zero-filled one; nullptr when out of memory. Contents of a reused
  // buffer are whatever its last user left.
  AlignedBuffer Take();
  // Returns a buffer from Take (nullptr is ignored).
  void Give(AlignedBuffer buf);
  size_t spare_count() const;

 private:
  const size_t buffer_bytes_;
  const size_t spare_;
  mutable Mutex mu_;
  std::vector<AlignedBuffer> buffers_ GUARDED_BY(mu_);
};

}  // namespace spoke::agent
