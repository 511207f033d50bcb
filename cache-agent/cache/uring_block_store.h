// UringBlockStore: BlockStore on one or a few sparse data files, I/O through io_uring.
//
// Files: <dir>/data.0, data.1, ... each holding at most Options::max_file_bytes of whole slots,
// sized with ftruncate, so they are sparse: a slot occupies disk only where it was written, and
// Punch (fallocate PUNCH_HOLE | KEEP_SIZE) gives space back. The cache keeps the allocated
// bytes under its quota (slot_file_block_cache.h); not preallocating means a disk shared with
// others can fill up under us (ENOSPC -> kNoSpace on a write, which the cache counts as a disk
// error), so the cache warns at open when the filesystem cannot hold its quota. Opened with
// O_DIRECT when the filesystem supports it (probed at open: open + one aligned read); tmpfs
// and some others refuse it (EINVAL) and get buffered I/O with an info log.
//
// Threading: a pool of rings, each used by one thread at a time (its own mutex). A caller
// takes an idle ring (try_lock sweep from a per-thread home ring) or waits on its home ring.
// Each transfer is split into chunks of Options::chunk_bytes submitted together with one
// io_uring_submit_and_wait, so even one thread keeps several requests in flight on the device.
// Why not one shared ring: Get/Put are synchronous, so a shared ring needs a completion
// dispatcher (an extra thread hop per I/O) or a lock held across the device wait; why not a
// ring per thread: rings would outlive the store in thread_locals of FUSE threads. The pool
// bounds in-flight I/O (rings x chunks) and costs no lock contention while threads <= rings.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <liburing.h>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache-agent/cache/block_store.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class UringBlockStore final : public BlockStore {
 public:
  struct Options {
    unsigned rings = 8;                     // concurrent transfers (~FUSE + prefetch threads)
    unsigned ring_entries = 16;             // chunks in flight per transfer
    uint32_t chunk_bytes = 256 << 10;       // 1 MiB block = 4 parallel requests
    uint64_t max_file_bytes = 64ull << 30;  // a few big files, not one per block
    bool allow_direct = true;               // tests may force buffered I/O
  };

  // Creates or reopens the data files under `dir` (which must exist) for `slot_count` slots of
  // `slot_size` bytes (a multiple of kIoAlign). Returns kIo (files, io_uring setup), kNoSpace
  // (preallocation), kInvalidArgument (geometry).
  static Result<std::unique_ptr<UringBlockStore>> Open(const std::string& dir, uint64_t slot_count,
                                                       uint32_t slot_size, const Options& options);
  ~UringBlockStore() override;

  // True when files in `dir` can have holes punched in them and that gives the space back
  // (probed on a scratch file, removed again). False on ramfs, some network filesystems, and
  // when the probe cannot tell (st_blocks not maintained). Open runs it for CanPunchHoles().
  static bool ProbeHolePunching(const std::string& dir);

  bool fresh() const override { return fresh_; }
  bool CanPunchHoles() const override { return can_punch_holes_; }
  std::optional<uint64_t> allocated_bytes() const override;
  bool direct_io() const { return direct_io_; }
  size_t file_count() const { return fds_.size(); }

 protected:
  Status ReadImpl(uint64_t offset_bytes, std::span<const iovec> segments) override;
  Status WriteImpl(uint64_t offset_bytes, std::span<const iovec> segments) override;
  Status PunchImpl(uint64_t offset_bytes, uint64_t length) override;
  Status SyncImpl() override;

 private:
  struct Ring {
    Mutex mu;
    bool ready GUARDED_BY(mu) = false;
    io_uring ring GUARDED_BY(mu){};
  };
  class RingLease;

  UringBlockStore(uint64_t slot_count, uint32_t slot_size, const Options& options);
  Status Transfer(bool write, uint64_t offset_bytes, std::span<const iovec> segments);
  // One io_uring request of a Transfer: at most chunk_bytes at `off` in the slot's file.
  struct Piece {
    char* data;
    uint32_t len;
    uint64_t off;
  };
  std::vector<Piece> SplitIntoPieces(uint64_t file_off, std::span<const iovec> segments) const;
  // Queues pieces [first, first + n) on the ring, submits them and reaps what the kernel took.
  Status TransferBatch(Ring& r, bool write, int fd, std::span<const Piece> pieces, size_t first,
                       size_t n) REQUIRES(r.mu);
  // Submits the n queued entries; returns how many the kernel took, the error in `submit_err`.
  size_t SubmitQueued(Ring& r, size_t n, int& submit_err) REQUIRES(r.mu);
  // Waits for `submitted` completions; the first failed or short one is the error.
  std::optional<Error> ReapCompleted(Ring& r, bool write, std::span<const Piece> pieces,
                                     size_t submitted) REQUIRES(r.mu);
  Status InitRing(Ring& r) REQUIRES(r.mu);

  Options options_;
  uint64_t slots_per_file_ = 0;
  std::vector<int> fds_;
  bool fresh_ = false;
  bool direct_io_ = false;
  bool can_punch_holes_ = false;
  std::vector<std::unique_ptr<Ring>> rings_;
};

}  // namespace spoke::agent
