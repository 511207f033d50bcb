// FuseAdapter's session: mounting (or taking over a kept connection), the session loop and its
// workers, the kernel read-ahead window, hand-over and unmount. The request handlers are in
// fuse_adapter.cc.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "cache-agent/fuse/fuse_adapter.h"
#include "cache-agent/fuse/fuse_ops.h"
#include "cache-agent/fuse/orphan_check.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace spoke::agent {

using fuse_ops::Ops;
using fuse_ops::SessionOptions;

// Widens the mount's kernel read-ahead window (its bdi's read_ahead_kb). Must run after INIT:
// the INIT reply lowers the window to max_readahead. Our own workers answer the stat. A
// failure costs only speed, so it is logged, not returned.
static void SetKernelReadAhead(const std::string& mountpoint, uint64_t bytes) {
  if (bytes == 0) return;
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    log::Warn("cannot stat the mount to set its read-ahead",
              {{"target", mountpoint}, {"error", std::strerror(errno)}});
    return;
  }
  std::string path = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                     std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
  std::ofstream out(path);
  out << bytes / 1024 << "\n";
  out.close();
  if (!out) {
    log::Warn("cannot set the mount's kernel read-ahead (sequential reads stay slower)",
              {{"target", mountpoint}, {"file", path}});
    return;
  }
  log::Debug("kernel read-ahead set", {{"target", mountpoint}, {"kib", bytes / 1024}});
}

Status FuseAdapter::NewSession() {
  std::string opts = SessionOptions(options_);
  // Read-only volumes are not mounted "ro": the hint control file (.spoke-hints) must stay
  // writable; VolumeFs answers EROFS to every other change.
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_opt_add_arg(&args, "spoke");
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, opts.c_str());
  session_ = fuse_session_new(&args, &Ops(), sizeof(fuse_lowlevel_ops), this);
  fuse_opt_free_args(&args);
  if (session_ == nullptr) return Fail(Code::kIo, "fuse_session_new failed");
  return Ok();
}

Result<std::unique_ptr<FuseAdapter>> FuseAdapter::Mount(VolumeFs& fs, const Options& options) {
  struct stat st {};
  if (options.mountpoint.empty() || ::stat(options.mountpoint.c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode)) {
    return Fail(Code::kInvalidArgument,
                "mount point '" + options.mountpoint + "' is not an existing directory");
  }
  std::unique_ptr<FuseAdapter> a(new FuseAdapter(fs, options));
  SPOKE_RETURN_IF_ERROR(a->NewSession());
  if (fuse_session_mount(a->session_, options.mountpoint.c_str()) != 0) {
    fuse_session_destroy(a->session_);
    a->session_ = nullptr;
    return Fail(Code::kIo, "FUSE mount at " + options.mountpoint +
                               " failed (is /dev/fuse available and are we root?)");
  }
  auto io = fuse::SessionIo::AttachToMounted(a->session_);
  if (!io) {
    fuse_session_unmount(a->session_);
    fuse_session_destroy(a->session_);
    a->session_ = nullptr;
    return std::unexpected(io.error().Wrap("FUSE session I/O"));
  }
  if (auto s = a->StartSession(std::move(*io)); !s) {
    (void)a->Unmount();
    return std::unexpected(s.error());
  }
  SetKernelReadAhead(options.mountpoint, options.kernel_read_ahead_bytes);
  log::Info("volume mounted", {{"target", options.mountpoint}, {"read_only", options.read_only}});
  return a;
}

// The kernel's INIT must be answered before the connection can be handed to the keeper.
constexpr auto kInitTimeout = std::chrono::seconds(10);

Status FuseAdapter::StartSession(std::unique_ptr<fuse::SessionIo> io) {
  io_ = std::move(io);
  FuseAdapter* self = this;
  loop_ = std::thread([self] {
    NameThisThread("spoke-fuse");  // its workers take the name
    fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, 0);  // SessionIo serves the one /dev/fuse fd the keeper holds
    fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(self->options_.max_idle_threads));
    fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(self->options_.max_threads));
    int rc = fuse_session_loop_mt(self->session_, cfg);
    fuse_loop_cfg_destroy(cfg);
    if (rc != 0) log::Debug("fuse session loop ended", {{"rc", rc}});
    self->loop_done_.store(true);
  });
  SPOKE_TRY_WRAP(auto init, io_->WaitForInit(kInitTimeout), "FUSE INIT at " + options_.mountpoint);
  init_json_ = init.ToJson();
  return Ok();
}

void FuseAdapter::InvalidateKernelAttrs(uint64_t ino) {
  // ENOENT: the kernel holds no such inode (nothing to drop).
  const int rc = fuse_lowlevel_notify_inval_inode(session_, ino, -1, 0);
  if (rc != 0 && rc != -ENOENT) {
    log::Warn("could not invalidate the kernel's attributes",
              {{"target", options_.mountpoint}, {"ino", ino}, {"error", std::strerror(-rc)}});
  }
}

Result<std::unique_ptr<FuseAdapter>> FuseAdapter::Adopt(VolumeFs& fs, const Options& options,
                                                        UniqueFd fd, const std::string& init_json) {
  SPOKE_TRY(auto init, fuse::InitRecord::FromJson(init_json));
  std::unique_ptr<FuseAdapter> a(new FuseAdapter(fs, options));
  a->adopted_ = true;
  SPOKE_RETURN_IF_ERROR(a->NewSession());
  auto io = fuse::SessionIo::Adopt(a->session_, std::move(fd), std::move(init));
  if (!io) {
    fuse_session_destroy(a->session_);
    a->session_ = nullptr;
    return std::unexpected(io.error());
  }
  if (auto s = a->StartSession(std::move(*io)); !s) {
    (void)a->HandOver(std::chrono::milliseconds(0));  // leave the mount to the keeper
    return std::unexpected(s.error());
  }
  // A window the previous agent set stays with the mount; this one's setting wins.
  SetKernelReadAhead(options.mountpoint, options.kernel_read_ahead_bytes);
  if (a->io_->resend_outcome() == fuse::ResendOutcome::kUnsupported) {
    log::Warn(
        "the kernel cannot resend requests the previous agent had read (Linux < 6.9); "
        "they are aborted after the grace period",
        {{"target", options.mountpoint}, {"grace_ms", options.orphan_grace.count()}});
    FuseAdapter* self = a.get();
    a->watch_ = std::thread([self] { self->WatchOrphans(); });
  }
  log::Info("FUSE connection taken over",
            {{"target", options.mountpoint},
             {"resend", std::string(fuse::ResendOutcomeName(a->io_->resend_outcome()))},
             {"init_reply_matches", a->io_->init_reply_matches()}});
  return a;
}

// Requests the dead agent read are on the connection's processing list forever (no resend).
// After the grace period the connection is sampled (OrphanCheck: only moments when this agent
// is idle count) until it is known to hold orphans, then aborted (ECONNABORTED to their
// callers), or known to hold none.
void FuseAdapter::WatchOrphans() {
  MutexLock wl(watch_mu_);
  const auto stopped = [&]() REQUIRES(watch_mu_) { return watch_stop_; };
  if (watch_cv_.wait_for(wl, options_.orphan_grace, stopped)) return;
  auto dir = fuse::FuseConnectionDir(options_.mountpoint);
  if (!dir) {
    log::Warn("cannot find the FUSE connection to check for orphaned requests",
              {{"target", options_.mountpoint}, {"error", dir.error().message()}});
    return;
  }
  OrphanCheck check;
  auto verdict = OrphanCheck::Verdict::kUndecided;
  while (verdict == OrphanCheck::Verdict::kUndecided) {
    if (watch_cv_.wait_for(wl, options_.orphan_sample_every, stopped)) return;
    if (!io_) return;
    // Idle on both sides of the read of `waiting`: nothing was read or queued meanwhile.
    OrphanCheck::Sample s;
    s.in_flight = io_->in_flight();
    s.readable = io_->Readable();
    std::ifstream(*dir + "/waiting") >> s.waiting;
    s.in_flight += io_->in_flight();
    s.readable = s.readable || io_->Readable();
    verdict = check.Add(s);
  }
  if (verdict == OrphanCheck::Verdict::kNone) {
    log::Info("no orphaned FUSE requests after the takeover", {{"target", options_.mountpoint}});
    return;
  }
  std::ofstream(*dir + "/abort") << "1";
  lost_.store(true);
  log::Error(
      "requests read by the previous agent were never answered (no FUSE_NOTIFY_RESEND); "
      "connection aborted, the mount is re-created",
      {{"target", options_.mountpoint}, {"connection", *dir}});
}

void FuseAdapter::StopWatch() {
  {
    MutexLock wl(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
}

Status FuseAdapter::HandOver(std::chrono::milliseconds timeout) {
  StopWatch();
  MutexLock lock(mu_);
  if (unmounted_ || session_ == nullptr) return Ok();
  unmounted_ = true;
  Status drained = io_ ? io_->Drain(timeout) : Ok();
  fuse_session_exit(session_);
  // Our fds close; the keeper's duplicate keeps the connection and the mount.
  EndLoop("handed over");
  log::Info("FUSE session handed over", {{"target", options_.mountpoint}});
  return drained;
}

// Requests being answered when the loop is told to end may wait on the hub: each such wait is
// bounded by its own deadline, so this bound is only a guard against a bug.
constexpr auto kLoopEndTimeout = std::chrono::seconds(15);

void FuseAdapter::EndLoop(const char* why) {
  if (io_) {
    io_->Detach();  // libfuse closes its fd now or soon; the number may be reused at once
    io_->Stop();    // readers blocked in poll() return: the loop ends
  }
  auto deadline = std::chrono::steady_clock::now() + kLoopEndTimeout;
  while (!loop_done_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (loop_done_.load()) {
    loop_.join();
    fuse_session_destroy(session_);
    io_.reset();  // our duplicate: the last fd of the connection unless the keeper holds one
  } else {
    // A request handler that outlived every deadline: keep the session (and, through the
    // caller, its volume) rather than free it under that thread or hang the caller.
    log::Error("FUSE session loop did not end; leaving it",
               {{"target", options_.mountpoint}, {"why", std::string(why)}});
    left_running_ = true;
    loop_.detach();
  }
  session_ = nullptr;
}

Status FuseAdapter::Unmount() {
  StopWatch();
  MutexLock lock(mu_);
  if (unmounted_ || session_ == nullptr) return Ok();
  unmounted_ = true;
  fuse_session_exit(session_);
  // As root the mount is detached lazily (umount2 MNT_DETACH): a busy mount leaves the
  // namespace at once. An adopted session was mounted by an earlier agent, so libfuse does not
  // know the mount point: detach it here. Once the session's last /dev/fuse fd closes (ours in
  // EndLoop; the keeper's when the agent releases it) the kernel aborts the connection, so the
  // users of a busy mount get an error, never a wait for a daemon that stopped serving.
  if (io_) io_->Detach();
  if (adopted_) {
    if (::umount2(options_.mountpoint.c_str(), MNT_DETACH) != 0 && errno != EINVAL &&
        errno != ENOENT) {
      log::Warn("cannot detach the FUSE mount",
                {{"target", options_.mountpoint}, {"error", std::strerror(errno)}});
    }
  } else {
    fuse_session_unmount(session_);  // closes libfuse's fd; SessionIo reads through its own
  }
  EndLoop("unmounted");
  log::Info("volume unmounted", {{"target", options_.mountpoint}});
  return Ok();
}

}  // namespace spoke::agent
