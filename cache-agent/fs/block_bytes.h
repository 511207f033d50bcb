// BlockBytes: the bytes of one block as readers, the staging buffer and the cache's store
// queue share them (BlockData). Immutable once made.
//
// Two owners, so that neither path copies: a hub or peer reply keeps the vector it arrived in;
// a cache hit is read into a buffer of its own that BlockCache::Get fills in place (aligned
// and padded to BlockCache::kDirectAlign: the cache's O_DIRECT read lands there, with no bounce
// buffer and copy, and nothing is zero-filled first).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/block_store.h"  // AlignUp
#include "common/spare_vectors.h"

namespace spoke::agent {

class BlockBytes {
 public:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  using ReadBuffer = std::unique_ptr<char[], Free>;
  // Bytes to allocate for a block of `length` that BlockCache::Get is to fill in place.
  static constexpr size_t ReadCapacity(size_t length) {
    return AlignUp(length, BlockCache::kDirectAlign);
  }
  // ReadCapacity(length) bytes aligned to kDirectAlign, not zero-filled (the read fills
  // them); nullptr when out of memory.
  static ReadBuffer AllocateForRead(size_t length) {
    void* p = nullptr;
    if (posix_memalign(&p, BlockCache::kDirectAlign, ReadCapacity(length == 0 ? 1 : length)) != 0) {
      return nullptr;
    }
    return ReadBuffer(static_cast<char*>(p));
  }

  BlockBytes() = default;
  explicit BlockBytes(std::vector<char> bytes)
      : vec_(std::move(bytes)), data_(vec_.data()), size_(vec_.size()) {}
  // `size`: the block's length, not the padding read with it.
  BlockBytes(ReadBuffer buf, size_t size) : buf_(std::move(buf)), data_(buf_.get()), size_(size) {}
  // data_ points into vec_ or buf_: the bytes stay in place (behind a shared_ptr).
  // A hub reply's vector is kept for the next one (common/spare_vectors.h).
  ~BlockBytes() { GiveSpareVector(std::move(vec_)); }
  BlockBytes(const BlockBytes&) = delete;
  BlockBytes& operator=(const BlockBytes&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const char* begin() const { return data_; }
  const char* end() const { return data_ + size_; }
  char operator[](size_t i) const { return data_[i]; }

 private:
  std::vector<char> vec_;
  ReadBuffer buf_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

using BlockData = std::shared_ptr<const BlockBytes>;

}  // namespace spoke::agent
