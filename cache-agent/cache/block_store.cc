#include "cache-agent/cache/block_store.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace spoke::agent {

Status BlockStore::Check(uint64_t slot, uint32_t offset, std::span<const iovec> segments) const {
  if (slot >= slot_count_) {
    return Fail(Code::kInternal, "block store: slot " + std::to_string(slot) + " out of range");
  }
  if (offset % kIoAlign != 0) {
    return Fail(Code::kInternal, "block store: misaligned offset " + std::to_string(offset));
  }
  if (segments.empty()) return Fail(Code::kInternal, "block store: empty transfer");
  uint64_t total = 0;
  for (const iovec& seg : segments) {
    if (reinterpret_cast<uintptr_t>(seg.iov_base) % kIoAlign != 0 || seg.iov_len % kIoAlign != 0 ||
        seg.iov_len == 0) {
      return Fail(Code::kInternal, "block store: misaligned buffer or length");
    }
    total += seg.iov_len;
  }
  if (uint64_t{offset} + total > slot_size_) {
    return Fail(Code::kInternal,
                "block store: transfer past the end of slot " + std::to_string(slot));
  }
  return Ok();
}

Status BlockStore::Count(Status s) {
  if (!s) io_errors_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status BlockStore::Read(uint64_t slot, uint32_t offset, std::span<const iovec> segments) {
  if (Status c = Check(slot, offset, segments); !c) return c;
  return Count(ReadImpl(slot * slot_size_ + offset, segments));
}

Status BlockStore::Write(uint64_t slot, uint32_t offset, std::span<const iovec> segments) {
  if (Status c = Check(slot, offset, segments); !c) return c;
  return Count(WriteImpl(slot * slot_size_ + offset, segments));
}

Status BlockStore::Punch(uint64_t slot, uint32_t offset, uint32_t length) {
  if (slot >= slot_count_) {
    return Fail(Code::kInternal, "block store: slot " + std::to_string(slot) + " out of range");
  }
  if (offset % kIoAlign != 0 || length % kIoAlign != 0 || length == 0 ||
      uint64_t{offset} + length > slot_size_) {
    return Fail(Code::kInternal, "block store: bad punch range in slot " + std::to_string(slot));
  }
  Status s = PunchImpl(slot * slot_size_ + offset, length);
  // A filesystem without hole punching is a capability, not a failing disk.
  if (!s && s.error().ToErrno() == EOPNOTSUPP) return s;
  return Count(std::move(s));
}

Status BlockStore::Sync() { return Count(SyncImpl()); }

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedBuffer AllocateAligned(size_t bytes) {
  bytes = AlignUp(bytes == 0 ? 1 : bytes, kIoAlign);
  void* p = nullptr;
  if (posix_memalign(&p, kIoAlign, bytes) != 0) return nullptr;
  std::memset(p, 0, bytes);
  return AlignedBuffer(static_cast<char*>(p));
}

}  // namespace spoke::agent
