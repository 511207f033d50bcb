// SessionIo: the /dev/fuse I/O under a libfuse session (fuse_session_custom_io), so that a FUSE
// connection can change hands between agent processes without the kernel noticing:
//
//   - new mount: records the kernel's FUSE_INIT request and libfuse's reply (the negotiated
//     protocol: minor version, flags, max_write, ...), to be kept next to the fd;
//   - takeover: serves a connection whose INIT was answered by an earlier process. The recorded
//     INIT request is replayed to libfuse (so its negotiated state matches the kernel's) and its
//     reply swallowed; then the kernel is asked to resend the requests the earlier process had
//     read but not answered (FUSE_NOTIFY_RESEND, Linux 6.9+);
//   - graceful hand-over: Drain() stops reading requests, waits (bounded) until every request
//     read was answered, and ends the session loop without unmounting.
//
// Requirements on the session: one /dev/fuse fd (no clone_fd) and no splice receive (libfuse
// uses splice only when the filesystem sets FUSE_CAP_SPLICE_READ; SessionIo provides no
// splice_receive, so libfuse reads through SessionIo). Any loop (fuse_session_loop or _mt) works.
//
// SessionIo reads and writes through its own duplicate of the session's fd: libfuse closes its
// fd in fuse_session_unmount while the loop's readers may still be inside poll(), and a reader
// must never poll a closed fd number that a later open() has reused (it would wait forever on
// an unrelated file). The session's fd number only finds the SessionIo (libfuse passes it to
// the custom io), until Detach().
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "common/fd_passing.h"
#include "common/status.h"
#include "common/thread_annotations.h"

struct fuse_session;
struct iovec;

namespace spoke::fuse {

// The FUSE_INIT exchange of a connection, as raw bytes on /dev/fuse.
struct InitRecord {
  std::string request;  // fuse_in_header + fuse_init_in, as the kernel sent it
  std::string reply;    // fuse_out_header + fuse_init_out, as libfuse answered

  // {"init_request":"<hex>","init_reply":"<hex>"}: fits the fd keeper's metadata.
  std::string ToJson() const;
  // kInvalidArgument naming the field when it is missing, not hex, or not a FUSE_INIT.
  static Result<InitRecord> FromJson(const std::string& json_text);
};

// What became of the request to resend in-flight requests after a takeover.
enum class ResendOutcome {
  kNotAttempted,  // new mount, or takeover not yet initialised
  kSent,          // the kernel accepted FUSE_NOTIFY_RESEND (6.9+)
  kUnsupported,   // EINVAL from the kernel: no FUSE_NOTIFY_RESEND (< 6.9); see resend_errno()
  kFailed,        // another error (e.g. ENODEV: connection already gone)
};
const char* ResendOutcomeName(ResendOutcome outcome);

class SessionIo {
 public:
  ~SessionIo();
  SessionIo(const SessionIo&) = delete;
  SessionIo& operator=(const SessionIo&) = delete;

  // New mount: call right after fuse_session_mount(se, ...) and before the session loop.
  // The session keeps its fd (closed by fuse_session_destroy). kInternal if libfuse refuses.
  static Result<std::unique_ptr<SessionIo>> AttachToMounted(fuse_session* se);

  // Takeover: `fd` is a duplicate of a live connection's /dev/fuse fd (from the keeper) and
  // `init` what AttachToMounted recorded for it. Ownership of `fd` passes to the session.
  // kInvalidArgument when `init` is not a FUSE_INIT exchange.
  static Result<std::unique_ptr<SessionIo>> Adopt(fuse_session* se, UniqueFd fd, InitRecord init);

  // Waits until INIT is done: for a new mount the kernel's INIT was answered; for a takeover the
  // replay was answered and the resend request written. kTimeout after `timeout`.
  Result<InitRecord> WaitForInit(std::chrono::milliseconds timeout);

  ResendOutcome resend_outcome() const;
  int resend_errno() const;
  // Takeover only: whether this process answered the replayed INIT byte for byte as the
  // original process did (a different answer means libfuse or the filesystem's init changed
  // between versions; the kernel keeps the original negotiation).
  bool init_reply_matches() const;

  // Graceful hand-over: stop reading new requests (they wait in the kernel for the next
  // process), wait until every request read has been answered, then make the session loop
  // return (readers see ENODEV, which libfuse treats as the end of the session). Never
  // unmounts. kTimeout (naming how many requests were unanswered) if `timeout` passes first;
  // the loop is stopped either way, and a successor's FUSE_NOTIFY_RESEND covers the rest.
  Status Drain(std::chrono::milliseconds timeout);

  // Ends the session's reads for good: readers return ENODEV at once (those blocked in poll()
  // are woken), which ends the session loop once fuse_session_exit() was called. Requests
  // being answered are not affected. Call before joining the loop: readers do not act on
  // pthread_cancel (libfuse cancels idle workers when the loop ends), so nothing unwinds
  // through a wait.
  void Stop();

  // Forgets the session's fd number (libfuse's calls with it get ENODEV from now on), so that
  // a new session may get the same number once libfuse closed it. Call before
  // fuse_session_unmount / fuse_session_destroy. Idempotent; the destructor does it too.
  void Detach();

  // Requests read and not yet answered.
  size_t in_flight() const;
  // A request is queued for this process's readers now (poll, no wait).
  bool Readable() const;
  // Whether the request this thread read last is one the kernel resent after a takeover
  // (FUSE_NOTIFY_RESEND marks its unique): an earlier agent may have carried it out on the
  // hub before it died. libfuse serves a request on the thread that read it, so an operation
  // handler asks this about its own request.
  static bool CurrentRequestIsResent();
  // SessionIo's own duplicate of the connection (valid while it lives): what the keeper keeps.
  int fd() const { return io_fd_.get(); }

 private:
  enum class Mode { kNewMount, kTakeover };
  SessionIo(Mode mode, int fd);
  Status Install(fuse_session* se);

  static ssize_t ReadThunk(int fd, void* buf, size_t len, void* userdata);
  static ssize_t WritevThunk(int fd, struct iovec* iov, int count, void* userdata);
  ssize_t Read(void* buf, size_t len);
  // Read's start: ended, the replayed INIT of a takeover, or the wait for INIT's answer.
  // A value when Read returns it without reading the kernel.
  std::optional<ssize_t> BeforeKernelReads(void* buf, size_t len);
  // A request just read (`got` bytes, a whole header): INIT kept, in-flight count, resend bit.
  void NoteRequestRead(const void* buf, size_t got);
  ssize_t Writev(struct iovec* iov, int count);
  void SendResendLocked() REQUIRES(mu_);

  const Mode mode_;
  const int key_fd_;  // the session's fd number: the registry key, never read or written
  UniqueFd io_fd_;    // our duplicate of the connection: every poll, read and write
  UniqueFd wake_fd_;  // eventfd, readable once draining or stopped: wakes readers in poll
  // One reader at a time waits in poll() and reads; the others queue on this lock, because
  // every poller of /dev/fuse wakes for every request (poll wake-ups are not exclusive) and a
  // herd of idle workers racing for each request costs more than serving it. Guards no data.
  std::mutex poll_mu_;

  mutable Mutex mu_;
  CondVar cv_;
  InitRecord init_ GUARDED_BY(mu_);
  uint64_t init_unique_ GUARDED_BY(mu_) = 0;
  bool init_replayed_ GUARDED_BY(mu_) = false;  // takeover, INIT handed to libfuse
  bool init_done_ GUARDED_BY(mu_) = false;
  bool init_matches_ GUARDED_BY(mu_) = false;
  ResendOutcome resend_ GUARDED_BY(mu_) = ResendOutcome::kNotAttempted;
  int resend_errno_ GUARDED_BY(mu_) = 0;
  bool draining_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  bool ended_ GUARDED_BY(mu_) = false;                      // Stop() called
  size_t active_reads_ GUARDED_BY(mu_) = 0;                 // readers past the drain gate
  std::unordered_set<uint64_t> in_flight_ GUARDED_BY(mu_);  // uniques awaiting a reply
};

// /sys/fs/fuse/connections/<id> of the FUSE mount at `mountpoint` (id = the minor device
// number of the mount). Its "abort" file ends every request of the connection with an error,
// and "waiting" counts requests not yet answered: the bound for kernels without
// FUSE_NOTIFY_RESEND. Mounts fusectl there first when it is not mounted. kNotFound when
// `mountpoint` is not a FUSE mount.
Result<std::string> FuseConnectionDir(const std::string& mountpoint);

}  // namespace spoke::fuse
