#include "cache-agent/cache/uring_block_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "common/log.h"

namespace spoke::agent {
namespace {

std::string DataPath(const std::string& dir, size_t i) {
  return dir + "/data." + std::to_string(i);
}

Error ErrnoError(int err, const std::string& what) {
  if (err == ENOSPC) return Error(Code::kNoSpace, what + ": " + std::strerror(err));
  return Error::FromErrno(err, what + ": " + std::strerror(err));
}

// Sizes an open data file to exactly `bytes`. Growing leaves a hole: slots take disk space
// only when written.
Status SizeFile(int fd, uint64_t bytes, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::unexpected(ErrnoError(errno, "stat " + path));
  if (static_cast<uint64_t>(st.st_size) == bytes) return Ok();
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return std::unexpected(ErrnoError(errno, "size " + path));
  }
  return Ok();
}

}  // namespace

// Exclusive use of one ring for the duration of a transfer. Which ring is chosen at run time,
// beyond what the analysis can name: the user asserts the ring's lock (Ring::mu.AssertHeld).
class UringBlockStore::RingLease {
 public:
  explicit RingLease(UringBlockStore& store) NO_THREAD_SAFETY_ANALYSIS {
    auto& rings = store.rings_;
    size_t home = std::hash<std::thread::id>{}(std::this_thread::get_id()) % rings.size();
    for (size_t i = 0; i < rings.size(); ++i) {
      Ring& r = *rings[(home + i) % rings.size()];
      if (r.mu.try_lock()) {
        ring_ = &r;
        return;
      }
    }
    ring_ = rings[home].get();
    ring_->mu.lock();
  }
  ~RingLease() NO_THREAD_SAFETY_ANALYSIS { ring_->mu.unlock(); }
  Ring& ring() { return *ring_; }

 private:
  Ring* ring_ = nullptr;
};

UringBlockStore::UringBlockStore(uint64_t slot_count, uint32_t slot_size, const Options& options)
    : BlockStore(slot_count, slot_size), options_(options) {}

UringBlockStore::~UringBlockStore() {
  for (auto& r : rings_) {
    MutexLock lock(r->mu);
    if (r->ready) io_uring_queue_exit(&r->ring);
    r->ready = false;
  }
  for (int fd : fds_) close(fd);
}

Result<std::unique_ptr<UringBlockStore>> UringBlockStore::Open(const std::string& dir,
                                                               uint64_t slot_count,
                                                               uint32_t slot_size,
                                                               const Options& options) {
  if (slot_count == 0 || slot_size == 0 || slot_size % kIoAlign != 0) {
    return Fail(Code::kInvalidArgument, "block store: slot_size must be a non-zero multiple of " +
                                            std::to_string(kIoAlign) + " and slot_count > 0");
  }
  if (options.rings == 0 || options.ring_entries == 0 || options.chunk_bytes == 0 ||
      options.chunk_bytes % kIoAlign != 0) {
    return Fail(Code::kInvalidArgument, "block store: bad ring options");
  }
  std::unique_ptr<UringBlockStore> store(new UringBlockStore(slot_count, slot_size, options));
  store->slots_per_file_ = std::max<uint64_t>(1, options.max_file_bytes / slot_size);
  const uint64_t files = (slot_count + store->slots_per_file_ - 1) / store->slots_per_file_;

  bool direct = options.allow_direct;
  bool any_existed = false;
  for (uint64_t i = 0; i < files; ++i) {
    const std::string path = DataPath(dir, i);
    struct stat st {};
    any_existed |= stat(path.c_str(), &st) == 0;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && direct && errno == EINVAL) {
      log::Info("cache filesystem does not support O_DIRECT; using buffered I/O", {{"dir", dir}});
      direct = false;
      fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    if (fd < 0) return std::unexpected(ErrnoError(errno, "open " + path));
    store->fds_.push_back(fd);
    const uint64_t slots =
        std::min(store->slots_per_file_, slot_count - i * store->slots_per_file_);
    SPOKE_RETURN_IF_ERROR(SizeFile(fd, slots * slot_size, path));
  }
  // Files of a bigger previous geometry.
  for (uint64_t i = files;; ++i) {
    const std::string path = DataPath(dir, i);
    if (unlink(path.c_str()) != 0) break;
  }
  // Some filesystems accept O_DIRECT at open and refuse it at I/O time.
  if (direct) {
    AlignedBuffer probe = AllocateAligned(kIoAlign);
    if (!probe) return Fail(Code::kIo, "block store: out of memory");
    if (pread(store->fds_[0], probe.get(), kIoAlign, 0) < 0 && errno == EINVAL) {
      log::Info("cache filesystem refuses O_DIRECT reads; using buffered I/O", {{"dir", dir}});
      direct = false;
      for (size_t i = 0; i < store->fds_.size(); ++i) {
        int fd = open(DataPath(dir, i).c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) return std::unexpected(ErrnoError(errno, "reopen " + DataPath(dir, i)));
        close(store->fds_[i]);
        store->fds_[i] = fd;
      }
    }
  }
  store->direct_io_ = direct;
  store->fresh_ = !any_existed;
  store->can_punch_holes_ = ProbeHolePunching(dir);

  for (unsigned i = 0; i < options.rings; ++i) store->rings_.push_back(std::make_unique<Ring>());
  {
    // Probe io_uring now: a kernel without it fails the open, not the first read.
    Ring& r = *store->rings_[0];
    MutexLock lock(r.mu);
    SPOKE_RETURN_IF_ERROR(store->InitRing(r));
  }
  log::Info("block store open", {{"dir", dir},
                                 {"files", files},
                                 {"slots", slot_count},
                                 {"slot_size", slot_size},
                                 {"direct_io", direct},
                                 {"punch_holes", store->can_punch_holes_},
                                 {"fresh", store->fresh_}});
  return store;
}

bool UringBlockStore::ProbeHolePunching(const std::string& dir) {
  const std::string path = dir + "/punch-probe";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  constexpr size_t kProbe = 16 * kIoAlign;
  std::string bytes(kProbe, 'p');
  bool ok = pwrite(fd, bytes.data(), kProbe, 0) == static_cast<ssize_t>(kProbe) && fsync(fd) == 0;
  struct stat before {
  }, after{};
  ok = ok && fstat(fd, &before) == 0 &&
       fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kProbe) == 0 &&
       fstat(fd, &after) == 0 && after.st_blocks < before.st_blocks &&
       static_cast<uint64_t>(after.st_size) == kProbe;
  close(fd);
  unlink(path.c_str());
  return ok;
}

Status UringBlockStore::InitRing(Ring& r) {
  if (r.ready) return Ok();
  int rc = io_uring_queue_init(options_.ring_entries, &r.ring, 0);
  if (rc < 0) return std::unexpected(ErrnoError(-rc, "io_uring_queue_init"));
  r.ready = true;
  return Ok();
}

Status UringBlockStore::ReadImpl(uint64_t offset_bytes, std::span<const iovec> segments) {
  return Transfer(false, offset_bytes, segments);
}

Status UringBlockStore::WriteImpl(uint64_t offset_bytes, std::span<const iovec> segments) {
  return Transfer(true, offset_bytes, segments);
}

std::optional<uint64_t> UringBlockStore::allocated_bytes() const {
  uint64_t total = 0;
  for (int fd : fds_) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return std::nullopt;
    total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

Status UringBlockStore::PunchImpl(uint64_t offset_bytes, uint64_t length) {
  // A slot never spans two files (slots_per_file_ whole slots per file).
  const uint64_t file_bytes = slots_per_file_ * slot_size();
  const int fd = fds_[offset_bytes / file_bytes];
  const auto off = static_cast<off_t>(offset_bytes % file_bytes);
  for (;;) {
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                  static_cast<off_t>(length)) == 0) {
      return Ok();
    }
    if (errno != EINTR) break;
  }
  const int err = errno == ENOSYS ? EOPNOTSUPP : errno;
  return std::unexpected(ErrnoError(err, "punch cache slot"));
}

Status UringBlockStore::SyncImpl() {
  for (int fd : fds_) {
    if (fsync(fd) != 0) return std::unexpected(ErrnoError(errno, "fsync cache data"));
  }
  return Ok();
}

Status UringBlockStore::Transfer(bool write, uint64_t offset_bytes,
                                 std::span<const iovec> segments) {
  const uint64_t file_bytes = slots_per_file_ * slot_size();
  const int fd = fds_[offset_bytes / file_bytes];
  const std::vector<Piece> pieces = SplitIntoPieces(offset_bytes % file_bytes, segments);

  RingLease lease(*this);
  Ring& r = lease.ring();
  r.mu.AssertHeld();
  if (Status s = InitRing(r); !s) return s;
  for (size_t first = 0; first < pieces.size(); first += options_.ring_entries) {
    const size_t n = std::min<size_t>(options_.ring_entries, pieces.size() - first);
    SPOKE_RETURN_IF_ERROR(TransferBatch(r, write, fd, pieces, first, n));
  }
  return Ok();
}

std::vector<UringBlockStore::Piece> UringBlockStore::SplitIntoPieces(
    uint64_t file_off, std::span<const iovec> segments) const {
  // A transfer is at most one slot: a handful of chunks (16 MiB / 256 KiB = 64 at most).
  std::vector<Piece> pieces;
  for (const iovec& seg : segments) {
    char* p = static_cast<char*>(seg.iov_base);
    for (size_t done = 0; done < seg.iov_len;) {
      uint32_t len =
          static_cast<uint32_t>(std::min<size_t>(options_.chunk_bytes, seg.iov_len - done));
      pieces.push_back({p + done, len, file_off});
      done += len;
      file_off += len;
    }
  }
  return pieces;
}

Status UringBlockStore::TransferBatch(Ring& r, bool write, int fd, std::span<const Piece> pieces,
                                      size_t first, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Piece& pc = pieces[first + i];
    io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
    if (sqe == nullptr) return Fail(Code::kInternal, "io_uring: no free submission entry");
    if (write) {
      io_uring_prep_write(sqe, fd, pc.data, pc.len, pc.off);
    } else {
      io_uring_prep_read(sqe, fd, pc.data, pc.len, pc.off);
    }
    io_uring_sqe_set_data64(sqe, first + i);
  }
  // Submit everything, then reap exactly what the kernel took, so the ring is clean for the
  // next user whatever happens.
  int submit_err = 0;
  const size_t submitted = SubmitQueued(r, n, submit_err);
  std::optional<Error> failure = ReapCompleted(r, write, pieces, submitted);
  if (submit_err != 0) {
    // Unsubmitted entries would leak into the next user's batch: start a fresh ring.
    io_uring_queue_exit(&r.ring);
    r.ready = false;
    if (!failure) failure = ErrnoError(submit_err, "io_uring_submit");
  }
  if (failure) return std::unexpected(*failure);
  return Ok();
}

size_t UringBlockStore::SubmitQueued(Ring& r, size_t n, int& submit_err) {
  size_t submitted = 0;
  for (int attempt = 0; submitted < n; ++attempt) {
    int rc = io_uring_submit(&r.ring);
    if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && attempt < 1000) {
      std::this_thread::yield();
      continue;
    }
    if (rc <= 0) {
      submit_err = rc < 0 ? -rc : EIO;
      break;
    }
    submitted += static_cast<size_t>(rc);
  }
  return submitted;
}

std::optional<Error> UringBlockStore::ReapCompleted(Ring& r, bool write,
                                                    std::span<const Piece> pieces,
                                                    size_t submitted) {
  std::optional<Error> failure;
  for (size_t reaped = 0; reaped < submitted;) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&r.ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      // The ring itself is broken; nothing sane left to do with in-flight buffers.
      log::Error("io_uring_wait_cqe failed", {{"error", std::strerror(-rc)}});
      std::abort();
    }
    const Piece& pc = pieces[io_uring_cqe_get_data64(cqe)];
    if (!failure) {
      if (cqe->res < 0) {
        failure = ErrnoError(-cqe->res, write ? "cache write" : "cache read");
      } else if (static_cast<uint32_t>(cqe->res) != pc.len) {
        failure = Error(Code::kIo, std::string(write ? "short cache write" : "short cache read") +
                                       " at offset " + std::to_string(pc.off));
      }
    }
    io_uring_cqe_seen(&r.ring, cqe);
    ++reaped;
  }
  return failure;
}

}  // namespace spoke::agent
