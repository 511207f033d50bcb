// BlockStore: the cache device, an array of fixed-size slots on local disk.
//
// The device layer checks, the implementation does I/O (Navy's Device): the public
// non-virtual Read/Write/Sync check bounds and alignment and count errors, then call the
// protected *Impl methods that subclasses (UringBlockStore; test wrappers that inject faults)
// override. A slot is `slot_size()` bytes (a multiple of kIoAlign); every transfer starts at a
// kIoAlign-aligned offset inside one slot, and every buffer and length is kIoAlign-aligned so
// that O_DIRECT works. The store knows nothing about what a slot holds (see block_header.h).
// Punch releases the disk space under part of a slot (it then reads as zeros), so a store
// whose slots are mostly short blocks occupies only what they hold.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"

namespace spoke::agent {

// Alignment of every buffer, length and offset handed to a BlockStore (O_DIRECT on NVMe).
inline constexpr size_t kIoAlign = 4096;

class BlockStore {
 public:
  BlockStore(uint64_t slot_count, uint32_t slot_size)
      : slot_count_(slot_count), slot_size_(slot_size) {}
  virtual ~BlockStore() = default;
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  uint64_t slot_count() const { return slot_count_; }
  uint32_t slot_size() const { return slot_size_; }

  // Reads consecutive bytes of slot `slot`, starting `offset` bytes into it, into `segments`
  // (scatter). Returns kIo on a device error or short read, kInternal on a caller bug
  // (out-of-range slot, transfer past the slot's end, misaligned buffer or length).
  Status Read(uint64_t slot, uint32_t offset, std::span<const iovec> segments);
  // Writes `segments` (gather) to slot `slot` at `offset`. Same codes as Read (ENOSPC -> kNoSpace).
  Status Write(uint64_t slot, uint32_t offset, std::span<const iovec> segments);
  // Deallocates `length` bytes of slot `slot` from `offset` (both kIoAlign-aligned); they
  // read as zeros afterwards. kIo on a device error (errno EOPNOTSUPP when the filesystem
  // cannot punch holes: not counted as a device error), kInternal on a caller bug.
  Status Punch(uint64_t slot, uint32_t offset, uint32_t length);
  // Makes every completed write durable (fsync). kIo on failure.
  Status Sync();

  // True when the data files were just created (nothing to recover).
  virtual bool fresh() const = 0;
  // True when Punch gives the disk space back on this store (probed when it was opened);
  // false when it cannot (EOPNOTSUPP) or does not free anything (the cache then charges
  // every block a whole slot).
  virtual bool CanPunchHoles() const = 0;
  // Disk space the store occupies now (allocated blocks), or nullopt when it cannot tell.
  virtual std::optional<uint64_t> allocated_bytes() const { return std::nullopt; }
  // Device errors seen so far (every failed Read/Write/Sync).
  uint64_t io_errors() const { return io_errors_.load(std::memory_order_relaxed); }

 protected:
  // `offset_bytes` is the absolute byte position of the transfer in the store (slot * size +
  // offset); arguments are already checked.
  virtual Status ReadImpl(uint64_t offset_bytes, std::span<const iovec> segments) = 0;
  virtual Status WriteImpl(uint64_t offset_bytes, std::span<const iovec> segments) = 0;
  virtual Status PunchImpl(uint64_t offset_bytes, uint64_t length) = 0;
  virtual Status SyncImpl() = 0;

 private:
  Status Check(uint64_t slot, uint32_t offset, std::span<const iovec> segments) const;
  Status Count(Status s);

  const uint64_t slot_count_;
  const uint32_t slot_size_;
  std::atomic<uint64_t> io_errors_{0};
};

// Buffers the store accepts: kIoAlign-aligned, freed with free().
struct AlignedFree {
  void operator()(void* p) const;
};
using AlignedBuffer = std::unique_ptr<char[], AlignedFree>;
// Allocates `bytes` (rounded up to kIoAlign) aligned to kIoAlign, zero-filled. nullptr on ENOMEM.
AlignedBuffer AllocateAligned(size_t bytes);

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace spoke::agent
