#include "cache-agent/cache/buffer_pool.h"

namespace spoke::agent {

AlignedBuffer BufferPool::Take() {
  {
    MutexLock lock(mu_);
    if (!buffers_.empty()) {
      AlignedBuffer b = std::move(buffers_.back());
      buffers_.pop_back();
      return b;
    }
  }
  return AllocateAligned(buffer_bytes_);
}

void BufferPool::Give(AlignedBuffer buf) {
  if (!buf) return;
  MutexLock lock(mu_);
  if (buffers_.size() < spare_) buffers_.push_back(std::move(buf));
}

size_t BufferPool::spare_count() const {
  MutexLock lock(mu_);
  return buffers_.size();
}

}  // namespace spoke::agent
