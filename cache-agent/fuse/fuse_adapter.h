// FuseAdapter: a libfuse3 low-level session serving one VolumeFs at a mount point. It only
// translates callbacks to VolumeFs calls and Results to errno; semantics live in VolumeFs.
//
// Mounted with fsname=spoke,subtype=spoke,allow_other,default_permissions,max_read=1 MiB.
// Read-only volumes are mounted read-write at the kernel level so that the hint control
// file stays writable; VolumeFs refuses every other change with EROFS. Immutable volumes keep the
// kernel page cache and long attribute/entry timeouts; ttl volumes use the ttl; strict volumes use
// direct I/O and no kernel attribute caching.
//
// FUSE INTERRUPT (the kernel's word that a process waiting on the mount got a signal) is
// honoured by the operations that change nothing: lookup, getattr, opendir and readdir, open for
// reading, read and readlink answer EINTR at once instead of at the hub's bound
// (common/interrupt.h). Changes run to their bound: one already sent may still be made on the
// hub. Reads through the page cache mostly wait on kernel read-ahead, which is sent without
// INTERRUPT; a fatal signal ends such a wait in the kernel at once all the same.
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cache-agent/fs/volume_fs.h"
#include "cache-agent/fuse/fuse_op_errors.h"
#include "cache-agent/fuse/session_io.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

struct fuse_session;

namespace spoke::agent {

class FuseAdapter {
 public:
  struct Options {
    std::string mountpoint;
    bool read_only = true;
    Consistency consistency = Consistency::kImmutable;
    uint32_t ttl_seconds = 30;
    bool allow_other = true;    // pods run as other users
    int max_idle_threads = 32;  // libfuse worker threads kept around
    // Requests served at once. Each read waiting on the hub holds a worker, so this must
    // exceed the hub's in-flight depth, or a burst of cold reads freezes the mount (cached
    // reads, getattr and statfs included). libfuse's own default is 10.
    int max_threads = 64;
    // Where spoke_fuse_op_errors_total{op,errno} is counted (null: not counted). Must
    // outlive the session.
    metrics::Registry* registry = nullptr;
    // Kernels without FUSE_NOTIFY_RESEND: how long requests an earlier agent read may stay
    // unanswered after a takeover before the connection is aborted (never an unbounded hang).
    std::chrono::milliseconds orphan_grace{10000};
    // Then the connection is sampled this often until it was seen idle often enough to tell
    // (OrphanCheck). A connection with orphans goes idle soon: their callers wait.
    std::chrono::milliseconds orphan_sample_every{250};
    // Set as the mount's kernel read-ahead window once INIT is answered (INIT caps it at
    // max_readahead; /sys/class/bdi/<dev>/read_ahead_kb raises it). 0 = the kernel's default.
    uint64_t kernel_read_ahead_bytes = 0;
  };

  // Mounts and starts the session loop on its own thread. kInvalidArgument (bad mount
  // point), kIo (mount failed; message says why).
  static Result<std::unique_ptr<FuseAdapter>> Mount(VolumeFs& fs, const Options& options);
  // Takes over a live connection whose INIT an earlier agent answered: `fd` is the keeper's
  // duplicate of its /dev/fuse fd, `init_json` the InitRecord kept with it. The kernel then
  // resends what the earlier agent had read but not answered (Linux 6.9+; resend_outcome()).
  // kInvalidArgument for a bad record, kTimeout if the replayed INIT is not answered.
  static Result<std::unique_ptr<FuseAdapter>> Adopt(VolumeFs& fs, const Options& options,
                                                    UniqueFd fd, const std::string& init_json);
  ~FuseAdapter();  // Unmount() unless handed over
  FuseAdapter(const FuseAdapter&) = delete;
  FuseAdapter& operator=(const FuseAdapter&) = delete;

  // Ends the session and unmounts (lazily when busy: the kernel aborts the connection once
  // its last /dev/fuse fd closes, so users of a busy mount get errors, not a hang). Idempotent.
  Status Unmount() EXCLUDES(mu_, watch_mu_);
  // Hand-over to a successor agent: stops reading requests, answers those read (bounded by
  // `timeout`), ends the session loop. Never unmounts: requests wait in the kernel for the
  // next agent. kTimeout names the requests left unanswered (a successor's resend covers them).
  Status HandOver(std::chrono::milliseconds timeout) EXCLUDES(mu_, watch_mu_);

  // The /dev/fuse fd (for the keeper) and the recorded INIT exchange (InitRecord JSON).
  int session_fd() const { return io_ ? io_->fd() : -1; }
  const std::string& init_json() const { return init_json_; }
  // An adopted connection on a kernel without FUSE_NOTIFY_RESEND whose requests read by the
  // dead agent stayed unanswered past the grace period was aborted: the mount must be
  // re-created (docs/agent-restarts.md).
  bool connection_lost() const { return lost_.load(); }
  // False while the session loop may still call into the VolumeFs (Unmount/HandOver could not
  // end it): the VolumeFs and this adapter must then stay alive.
  bool session_ended() const { return !left_running_.load(); }
  fuse::ResendOutcome resend_outcome() const {
    return io_ ? io_->resend_outcome() : fuse::ResendOutcome::kNotAttempted;
  }

  VolumeFs& fs() { return fs_; }
  const Options& options() const { return options_; }
  // Has the kernel drop its cached attributes of `ino` (FUSE_NOTIFY_INVAL_INODE without
  // pages: it takes no page lock, so a request handler may call it); its next use asks again.
  void InvalidateKernelAttrs(uint64_t ino);
  double entry_timeout() const { return entry_timeout_; }
  FuseOpErrors& op_errors() { return op_errors_; }

 private:
  FuseAdapter(VolumeFs& fs, const Options& options);
  // The libfuse session on this adapter's ops, from options_ (Mount and Adopt).
  Status NewSession();
  Status StartSession(std::unique_ptr<fuse::SessionIo> io);

  VolumeFs& fs_;
  Options options_;
  double entry_timeout_ = 0;
  FuseOpErrors op_errors_;
  fuse_session* session_ = nullptr;
  std::thread loop_;
  std::atomic<bool> loop_done_{false};
  std::atomic<bool> left_running_{false};  // Unmount/HandOver gave up on the loop
  Mutex mu_;
  bool unmounted_ GUARDED_BY(mu_) = false;
  bool adopted_ = false;  // libfuse did not mount it: Unmount() detaches the target itself
  std::unique_ptr<fuse::SessionIo> io_;
  std::string init_json_;
  // The orphan watch (kernels without FUSE_NOTIFY_RESEND, adopted sessions only).
  void WatchOrphans() EXCLUDES(watch_mu_);
  void StopWatch() EXCLUDES(watch_mu_);
  // Ends the session loop (fuse_session_exit was called) and frees the session; on a loop that
  // does not end, leaves it running (left_running_) instead.
  void EndLoop(const char* why) REQUIRES(mu_);
  std::atomic<bool> lost_{false};
  Mutex watch_mu_;
  CondVar watch_cv_;
  bool watch_stop_ GUARDED_BY(watch_mu_) = false;
  std::thread watch_;

 public:
  // Directory listings by opendir fh. Ids are never reused across agent processes (they start
  // at the wall clock in microseconds), so an fh issued by an earlier agent is unknown here and
  // its listing is rebuilt instead of being mistaken for another.
  struct DirListings;
  std::unique_ptr<DirListings> dirs_;
};

}  // namespace spoke::agent
