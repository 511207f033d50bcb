#include "cache-agent/fuse/session_io.h"

#define FUSE_USE_VERSION 34
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "common/log.h"

namespace spoke::fuse {
namespace {

// From Linux 6.9's uapi fuse.h; the build host's headers may predate it.
constexpr int32_t kNotifyResend = 7;
// From Linux 6.9's: a resent request's unique has this bit set.
constexpr uint64_t kUniqueResend = 1ull << 63;
thread_local bool t_request_resent = false;
// From Linux 6.6's: INIT flag bit 36 (bit 4 of flags2), MAP_SHARED of FOPEN_DIRECT_IO files.
constexpr uint32_t kInitFlags2DirectIoAllowMmap = 1u << (36 - 32);

template <typename T>
bool ReadAt(const std::string& bytes, size_t at, T* out) {
  if (bytes.size() < at + sizeof(T)) return false;
  std::memcpy(out, bytes.data() + at, sizeof(T));
  return true;
}

// libfuse 3.14 does not know FUSE_DIRECT_IO_ALLOW_MMAP: the INIT answer gets it here when the
// kernel offers it, so files opened with direct_io (strict volumes) can be mapped shared
// (numpy.memmap, safetensors, LMDB). Without it such an mmap fails with ENODEV.
void AllowSharedMmapOfDirectIo(const std::string& request, std::string& reply) {
  constexpr size_t in_at = sizeof(fuse_in_header), out_at = sizeof(fuse_out_header);
  uint32_t in_flags = 0, in_flags2 = 0;
  if (!ReadAt(request, in_at + offsetof(fuse_init_in, flags), &in_flags) ||
      !(in_flags & FUSE_INIT_EXT) ||
      !ReadAt(request, in_at + offsetof(fuse_init_in, flags2), &in_flags2) ||
      !(in_flags2 & kInitFlags2DirectIoAllowMmap)) {
    return;  // a kernel before 6.6
  }
  fuse_out_header h;
  uint32_t out_flags = 0, out_flags2 = 0;
  if (!ReadAt(reply, 0, &h) || h.error != 0 ||
      !ReadAt(reply, out_at + offsetof(fuse_init_out, flags), &out_flags) ||
      !ReadAt(reply, out_at + offsetof(fuse_init_out, flags2), &out_flags2)) {
    return;
  }
  out_flags |= FUSE_INIT_EXT;
  out_flags2 |= kInitFlags2DirectIoAllowMmap;
  std::memcpy(reply.data() + out_at + offsetof(fuse_init_out, flags), &out_flags, 4);
  std::memcpy(reply.data() + out_at + offsetof(fuse_init_out, flags2), &out_flags2, 4);
}

// libfuse hands custom io its session userdata (the filesystem's), not ours: find the
// SessionIo by the fd it serves.
std::mutex g_registry_mu;
std::map<int, SessionIo*>& Registry() {
  static auto* registry = new std::map<int, SessionIo*>();
  return *registry;
}
SessionIo* Lookup(int fd) {
  std::lock_guard lock(g_registry_mu);
  auto it = Registry().find(fd);
  return it == Registry().end() ? nullptr : it->second;
}

Status CheckInitRequest(const std::string& request) {
  if (request.size() < sizeof(fuse_in_header)) {
    return Fail(Code::kInvalidArgument, "init_request is shorter than a fuse_in_header");
  }
  fuse_in_header h;
  std::memcpy(&h, request.data(), sizeof(h));
  if (h.opcode != FUSE_INIT || h.len != request.size()) {
    return Fail(Code::kInvalidArgument, "init_request is not a complete FUSE_INIT request");
  }
  return Ok();
}

// Requests libfuse never answers.
bool ExpectsReply(uint32_t opcode) {
  return opcode != FUSE_FORGET && opcode != FUSE_BATCH_FORGET && opcode != FUSE_INTERRUPT &&
         opcode != FUSE_NOTIFY_REPLY;
}

}  // namespace

std::string InitRecord::ToJson() const {
  return nlohmann::json{{"init_request", ToHex(request)}, {"init_reply", ToHex(reply)}}.dump();
}

Result<InitRecord> InitRecord::FromJson(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(Code::kInvalidArgument, "init record is not a JSON object");
  }
  InitRecord out;
  for (auto [field, dest] : {std::pair{"init_request", &out.request}, {"init_reply", &out.reply}}) {
    if (!j.contains(field) || !j[field].is_string()) {
      return Fail(Code::kInvalidArgument, std::string("init record lacks '") + field + "'");
    }
    SPOKE_TRY(*dest, FromHex(j[field].get<std::string>(), field));
  }
  SPOKE_RETURN_IF_ERROR(CheckInitRequest(out.request));
  return out;
}

const char* ResendOutcomeName(ResendOutcome outcome) {
  switch (outcome) {
    case ResendOutcome::kNotAttempted:
      return "not-attempted";
    case ResendOutcome::kSent:
      return "sent";
    case ResendOutcome::kUnsupported:
      return "unsupported";
    case ResendOutcome::kFailed:
      return "failed";
  }
  return "?";
}

SessionIo::SessionIo(Mode mode, int fd) : mode_(mode), key_fd_(fd) {
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

SessionIo::~SessionIo() { Detach(); }

void SessionIo::Detach() {
  std::lock_guard lock(g_registry_mu);
  auto it = Registry().find(key_fd_);
  if (it != Registry().end() && it->second == this) Registry().erase(it);
}

Status SessionIo::Install(fuse_session* se) {
  if (!wake_fd_.valid()) return Fail(Code::kIo, std::string("eventfd: ") + std::strerror(errno));
  io_fd_.Reset(::fcntl(key_fd_, F_DUPFD_CLOEXEC, 0));
  if (!io_fd_.valid()) {
    return Fail(Code::kIo, std::string("dup(/dev/fuse): ") + std::strerror(errno));
  }
  // A reader waits in poll() (so Drain and Stop can wake it) and then reads without blocking.
  // The flag lives on the open file shared with the keeper's duplicate, which never reads.
  int flags = ::fcntl(io_fd_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(io_fd_.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Fail(Code::kIo, std::string("fcntl(/dev/fuse, O_NONBLOCK): ") + std::strerror(errno));
  }
  {
    std::lock_guard lock(g_registry_mu);
    if (Registry().contains(key_fd_)) {
      return Fail(Code::kInternal, "fd " + std::to_string(key_fd_) + " already has a SessionIo");
    }
    Registry()[key_fd_] = this;
  }
  fuse_custom_io io{};
  io.read = &SessionIo::ReadThunk;
  io.writev = &SessionIo::WritevThunk;
  if (int rc = fuse_session_custom_io(se, &io, key_fd_); rc != 0) {
    Detach();
    return Fail(Code::kInternal, "fuse_session_custom_io failed: " + std::to_string(rc));
  }
  return Ok();
}

Result<std::unique_ptr<SessionIo>> SessionIo::AttachToMounted(fuse_session* se) {
  int fd = fuse_session_fd(se);
  if (fd < 0) return Fail(Code::kInvalidArgument, "session is not mounted (no /dev/fuse fd)");
  std::unique_ptr<SessionIo> io(new SessionIo(Mode::kNewMount, fd));
  SPOKE_RETURN_IF_ERROR(io->Install(se));
  return io;
}

Result<std::unique_ptr<SessionIo>> SessionIo::Adopt(fuse_session* se, UniqueFd fd,
                                                    InitRecord init) {
  if (!fd.valid()) return Fail(Code::kInvalidArgument, "takeover fd is not valid");
  SPOKE_RETURN_IF_ERROR(CheckInitRequest(init.request));
  std::unique_ptr<SessionIo> io(new SessionIo(Mode::kTakeover, fd.get()));
  fuse_in_header h;
  std::memcpy(&h, init.request.data(), sizeof(h));
  {
    MutexLock lock(io->mu_);  // not shared yet; the lock keeps the analysis exact
    io->init_unique_ = h.unique;
    io->init_ = std::move(init);
  }
  SPOKE_RETURN_IF_ERROR(io->Install(se));
  fd.Release();  // the session owns it now (closed by fuse_session_destroy)
  return io;
}

Result<InitRecord> SessionIo::WaitForInit(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&]() REQUIRES(mu_) { return init_done_; })) {
    return Fail(Code::kTimeout,
                "FUSE_INIT not answered within " + std::to_string(timeout.count()) + " ms");
  }
  return init_;
}

ResendOutcome SessionIo::resend_outcome() const {
  MutexLock lock(mu_);
  return resend_;
}
int SessionIo::resend_errno() const {
  MutexLock lock(mu_);
  return resend_errno_;
}
bool SessionIo::init_reply_matches() const {
  MutexLock lock(mu_);
  return init_matches_;
}
size_t SessionIo::in_flight() const {
  MutexLock lock(mu_);
  return in_flight_.size();
}

ssize_t SessionIo::ReadThunk(int fd, void* buf, size_t len, void*) {
  SessionIo* self = Lookup(fd);
  if (self == nullptr) {
    errno = ENODEV;
    return -1;
  }
  return self->Read(buf, len);
}

ssize_t SessionIo::WritevThunk(int fd, struct iovec* iov, int count, void*) {
  SessionIo* self = Lookup(fd);
  if (self == nullptr) {
    errno = ENODEV;  // detached: the connection is being given up
    return -1;
  }
  return self->Writev(iov, count);
}

namespace {
// libfuse cancels idle workers when its loop ends; a reader here must leave through Stop()
// instead, never unwind from inside a wait.
class NoCancel {
 public:
  NoCancel() { ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_); }
  ~NoCancel() { ::pthread_setcancelstate(old_, nullptr); }
  NoCancel(const NoCancel&) = delete;
  NoCancel& operator=(const NoCancel&) = delete;

 private:
  int old_ = PTHREAD_CANCEL_ENABLE;
};
}  // namespace

void SessionIo::Stop() {
  MutexLock lock(mu_);
  ended_ = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  cv_.notify_all();
}

std::optional<ssize_t> SessionIo::BeforeKernelReads(void* buf, size_t len) {
  MutexLock lock(mu_);
  if (ended_) {
    errno = ENODEV;
    return -1;
  }
  if (mode_ == Mode::kTakeover && !init_replayed_) {
    // The first read of a takeover is the recorded INIT: libfuse negotiates exactly what the
    // kernel agreed with the first process.
    init_replayed_ = true;
    if (init_.request.size() > len) {
      errno = EIO;
      return -1;
    }
    std::memcpy(buf, init_.request.data(), init_.request.size());
    return static_cast<ssize_t>(init_.request.size());
  }
  // Until libfuse has answered INIT it rejects every other request with EIO; on a takeover
  // the kernel has requests queued already, so other readers wait here. (On a new mount the
  // kernel itself sends nothing else before INIT is answered.)
  if (mode_ == Mode::kTakeover) {
    cv_.wait(lock, [&]() REQUIRES(mu_) { return init_done_ || draining_ || ended_; });
  }
  return std::nullopt;
}

void SessionIo::NoteRequestRead(const void* buf, size_t got) {
  fuse_in_header h;
  std::memcpy(&h, buf, sizeof(h));
  MutexLock lock(mu_);
  if (mode_ == Mode::kNewMount && h.opcode == FUSE_INIT && !init_done_) {
    init_.request.assign(static_cast<const char*>(buf), got);
    init_unique_ = h.unique;
  }
  if (ExpectsReply(h.opcode)) in_flight_.insert(h.unique);
  t_request_resent = (h.unique & kUniqueResend) != 0;
  --active_reads_;
  cv_.notify_all();
}

ssize_t SessionIo::Read(void* buf, size_t len) {
  NoCancel no_cancel;
  if (auto early = BeforeKernelReads(buf, len)) return *early;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (draining_ || ended_) {
        cv_.wait(lock, [&]() REQUIRES(mu_) { return stopped_ || ended_; });
        errno = ENODEV;  // libfuse ends the session loop on ENODEV, without an error
        return -1;
      }
      ++active_reads_;
    }
    auto leave = [&] {
      MutexLock lock(mu_);
      --active_reads_;
      cv_.notify_all();
    };
    std::unique_lock<std::mutex> poller(poll_mu_);
    pollfd p[2] = {{io_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (n < 0 && errno != EINTR) {
      int err = errno;
      poller.unlock();
      leave();
      errno = err;
      return -1;
    }
    if (n <= 0 || (p[1].revents & POLLIN) || !(p[0].revents & (POLLIN | POLLERR | POLLHUP))) {
      poller.unlock();
      leave();
      continue;  // woken for a drain (or EINTR): re-check the gate
    }
    ssize_t got = ::read(io_fd_.get(), buf, len);
    poller.unlock();
    if (got < 0) {
      int err = errno;
      leave();
      if (err == EAGAIN || err == EINTR) continue;  // another thread took the request
      errno = err;                                  // ENODEV: unmounted or aborted
      return -1;
    }
    if (static_cast<size_t>(got) >= sizeof(fuse_in_header)) {
      NoteRequestRead(buf, static_cast<size_t>(got));
    } else {
      leave();
    }
    return got;
  }
}

bool SessionIo::CurrentRequestIsResent() { return t_request_resent; }

bool SessionIo::Readable() const {
  pollfd p{io_fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

ssize_t SessionIo::Writev(struct iovec* iov, int count) {
  fuse_out_header h{};
  if (count > 0 && iov[0].iov_len >= sizeof(h)) std::memcpy(&h, iov[0].iov_base, sizeof(h));
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  MutexLock lock(mu_);
  if (!init_done_ && h.unique != 0 && h.unique == init_unique_) {
    std::string reply;
    for (int i = 0; i < count; ++i) {
      reply.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    }
    ssize_t rc = static_cast<ssize_t>(total);
    AllowSharedMmapOfDirectIo(init_.request, reply);
    if (mode_ == Mode::kNewMount) {
      rc = ::write(io_fd_.get(), reply.data(), reply.size());
      if (rc == static_cast<ssize_t>(reply.size())) rc = static_cast<ssize_t>(total);
      init_.reply = std::move(reply);
    } else {
      // The kernel finished this INIT long ago: swallow the answer, and compare it.
      init_matches_ = (reply == init_.reply);
      if (!init_matches_) {
        log::Warn("FUSE takeover: this process answers INIT differently than the original",
                  {{"fd", key_fd_}});
      }
      SendResendLocked();
    }
    in_flight_.erase(h.unique);
    init_done_ = true;
    cv_.notify_all();
    return rc;
  }
  lock.unlock();
  ssize_t rc = ::writev(io_fd_.get(), iov, count);
  int err = errno;
  if (h.unique != 0) {
    lock.lock();
    // Answered, or the kernel no longer wants it (ENOENT: interrupted): no longer in flight.
    if (in_flight_.erase(h.unique) > 0 && draining_) cv_.notify_all();
    lock.unlock();
  }
  errno = err;
  return rc;
}

void SessionIo::SendResendLocked() {
  fuse_out_header notify{};
  notify.len = sizeof(notify);
  notify.error = kNotifyResend;
  notify.unique = 0;
  ssize_t rc = ::write(io_fd_.get(), &notify, sizeof(notify));
  if (rc == static_cast<ssize_t>(sizeof(notify))) {
    resend_ = ResendOutcome::kSent;
    log::Info("FUSE takeover: kernel resends requests in flight", {{"fd", key_fd_}});
    return;
  }
  resend_errno_ = rc < 0 ? errno : EIO;
  // fuse_notify() answers an unknown notification code with EINVAL (kernels before 6.9).
  resend_ = resend_errno_ == EINVAL ? ResendOutcome::kUnsupported : ResendOutcome::kFailed;
  log::Warn("FUSE takeover: requests read by the previous process cannot be resent",
            {{"fd", key_fd_}, {"error", std::strerror(resend_errno_)}});
}

Status SessionIo::Drain(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  draining_ = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  cv_.notify_all();
  bool drained = cv_.wait_for(
      lock, timeout, [&]() REQUIRES(mu_) { return active_reads_ == 0 && in_flight_.empty(); });
  size_t left = in_flight_.size();
  stopped_ = true;
  cv_.notify_all();
  if (!drained) {
    return Fail(Code::kTimeout, std::to_string(left) + " FUSE request(s) still unanswered after " +
                                    std::to_string(timeout.count()) + " ms");
  }
  return Ok();
}

Result<std::string> FuseConnectionDir(const std::string& mountpoint) {
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return Fail(Code::kNotFound, "cannot stat '" + mountpoint + "': " + std::strerror(errno));
  }
  std::string dir = "/sys/fs/fuse/connections/" + std::to_string(minor(st.st_dev));
  if (::access(dir.c_str(), F_OK) != 0 && ::access("/sys/fs/fuse/connections", F_OK) == 0) {
    // fusectl is not mounted everywhere (containers, minimal hosts): mount it (EBUSY when
    // it is there already).
    ::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);
  }
  if (::access(dir.c_str(), F_OK) != 0) {
    return Fail(Code::kNotFound, "'" + mountpoint + "' is not a FUSE mount (no " + dir + ")");
  }
  return dir;
}

}  // namespace spoke::fuse
