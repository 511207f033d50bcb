#include "cache-agent/remote/nfs_connection.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

// libnfs-raw.h and libnfs-zdr.h need the definitions of libnfs.h first.
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-zdr.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/thread_name.h"

// Exported by libnfs 4.0.0 but not declared in its headers (see NfsConnection::RootHandle).
extern "C" struct nfs_fh* nfs_get_rootfh(struct nfs_context* nfs);

namespace spoke::agent {
namespace {

struct PendingCall {
  NfsConnection::Callback cb;
  int* outstanding;  // the connection's calls in flight (loop thread)
};

void Trampoline(int err, nfs_context* /*nfs*/, void* data, void* priv) {
  std::unique_ptr<PendingCall> p(static_cast<PendingCall*>(priv));
  --*p->outstanding;
  p->cb(err, data);
}

void NoopCb(int, nfs_context*, void*, void*) {}

struct PendingRpc {
  NfsConnection::RpcCallback cb;
  int* outstanding;
};

void RpcTrampoline(rpc_context* /*rpc*/, int status, void* data, void* priv) {
  std::unique_ptr<PendingRpc> p(static_cast<PendingRpc*>(priv));
  --*p->outstanding;
  p->cb(status, data);
}

// nfs_get_error may return null.
std::string ErrorOf(nfs_context* ctx) {
  const char* e = ctx != nullptr ? nfs_get_error(ctx) : nullptr;
  return e != nullptr ? e : "unknown libnfs error";
}

// Errors that say "the hub or the link", not "the request": worth a retry.
bool Transient(int err) {
  switch (-err) {
    case EINTR:   // libnfs: "Command timed out" / "Command was cancelled"
    case EFAULT:  // libnfs: RPC/socket failure
    case EAGAIN:
    case ECONNRESET:
    case ECONNREFUSED:
    case ENOTCONN:
    case EPIPE:
    case ETIMEDOUT:
    case ENOMEM:
    case ESTALE:  // handle dropped; the retry re-opens by path
      return true;
    default:
      return false;
  }
}

std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  if (ms.count() % 1000 == 0) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ms.count() / 1000));
  } else {
    std::snprintf(buf, sizeof buf, "%.1fs", ms.count() / 1000.0);
  }
  return buf;
}

}  // namespace

NfsConnection::NfsConnection(Options options) : options_(std::move(options)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] {
    NameThisThread("spoke-hub");
    Loop();
  });
}

NfsConnection::~NfsConnection() {
  stop_.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
}

void NfsConnection::Submit(std::shared_ptr<NfsJob> job) {
  load_.fetch_add(1);
  {
    MutexLock lock(mu_);
    mailbox_.push_back(std::move(job));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void NfsConnection::Invalidate(const std::string& path) {
  {
    MutexLock lock(mu_);
    invalidations_.push_back(path);
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

bool NfsConnection::WaitMounted(SteadyClock::time_point deadline) {
  MutexLock lock(mu_);
  return mount_cv_.wait_until(lock, deadline, [&] { return mounted_.load(); });
}

std::string NfsConnection::last_mount_error() const {
  MutexLock lock(mu_);
  return mount_error_;
}

void NfsConnection::Call(const StartFn& start, Callback cb) {
  if (ctx_ == nullptr || state_ != State::kUp) {
    cb(-ENOTCONN, const_cast<char*>("not connected"));
    return;
  }
  auto* p = new PendingCall{std::move(cb), &calls_out_};
  CallStarting();
  if (start(ctx_, &Trampoline, p) != 0) {
    std::unique_ptr<PendingCall> owned(p);
    --calls_out_;
    std::string msg = "could not queue the request: " + ErrorOf(ctx_);
    owned->cb(-EAGAIN, msg.data());
  }
}

void NfsConnection::CallRpc(const RpcStartFn& start, RpcCallback cb) {
  if (ctx_ == nullptr || state_ != State::kUp) {
    cb(RPC_STATUS_ERROR, const_cast<char*>("not connected"));
    return;
  }
  auto* p = new PendingRpc{std::move(cb), &calls_out_};
  CallStarting();
  if (start(nfs_get_rpc_context(ctx_), &RpcTrampoline, p) != 0) {
    std::unique_ptr<PendingRpc> owned(p);
    --calls_out_;
    std::string msg = "could not queue the request: " + ErrorOf(ctx_);
    owned->cb(RPC_STATUS_ERROR, msg.data());
  }
}

void NfsConnection::CallStarting() {
  // An idle connection is not a silent one: its silence counts from its first call.
  if (calls_out_++ == 0) quiet_since_ = SteadyClock::now();
}

void NfsConnection::CheckLiveness() {
  // A connection that received nothing for rpc_timeout while calls were out is dead (the hub
  // or the path went away without a reset): reconnect, and the calls are retried on the new
  // one. A connection still receiving is alive however slow its replies are: no call is
  // sent twice while its first reply may still be crossing the link.
  if (state_ != State::kUp || calls_out_ <= 0) return;
  const auto silent = SteadyClock::now() - quiet_since_;
  if (silent < options_.rpc_timeout / 4) return;  // receiving: no need to look closer
  // Sending counts too: a long WRITE crossing a slow link is acknowledged as it goes (the
  // bytes sent and not acknowledged shrink) long before its reply comes back.
  const int fd = ctx_ != nullptr ? nfs_get_fd(ctx_) : -1;
  int unacked = 0;
  if (fd >= 0 && ioctl(fd, SIOCOUTQ, &unacked) == 0) {
    const bool acked = unacked < unacked_;
    unacked_ = unacked;
    if (acked) {
      quiet_since_ = SteadyClock::now();
      return;
    }
  }
  if (silent < options_.rpc_timeout) return;
  Teardown("the hub sent nothing for " + Seconds(options_.rpc_timeout) + " with " +
           std::to_string(calls_out_) + " requests outstanding");
}

std::string NfsConnection::RootHandle() const {
  if (ctx_ == nullptr || state_ != State::kUp) return {};
  // libnfs 4.0.0 exports nfs_get_rootfh() without declaring it, and keeps struct nfs_fh
  // private; both are { int len; char *val; } as in its lib/libnfs-private.h, the layout of
  // the XDR handle the raw calls take.
  struct FhView {
    int len;
    char* val;
  };
  const auto* fh = reinterpret_cast<const FhView*>(nfs_get_rootfh(ctx_));
  if (fh == nullptr || fh->len <= 0 || fh->val == nullptr) return {};
  return std::string(fh->val, static_cast<size_t>(fh->len));
}

void NfsConnection::GetHandle(
    const std::string& path, bool write,
    std::function<void(int err, const char* msg, std::shared_ptr<NfsHandle>)> cb) {
  std::string key = (write ? "w:" : "r:") + path;
  auto it = handles_.find(key);
  if (it != handles_.end()) {
    it->second->refs++;
    it->second->last_use = ++use_clock_;
    cb(0, nullptr, it->second);
    return;
  }
  auto op = opening_.find(key);
  if (op != opening_.end()) {
    op->second->waiters.push_back(std::move(cb));
    return;
  }
  auto opening = std::make_shared<Opening>();
  opening->waiters.push_back(std::move(cb));
  opening_[key] = opening;
  uint64_t gen = generation_;
  std::string nfs_path = options_.root + "/" + path;
  int flags = write ? (O_RDWR | O_SYNC) : O_RDONLY;
  Call([&](nfs_context* ctx, auto tramp,
           void* p) { return nfs_open_async(ctx, nfs_path.c_str(), flags, tramp, p); },
       [this, key, opening, gen](int err, void* data) {
         auto cur = opening_.find(key);
         if (cur != opening_.end() && cur->second == opening) opening_.erase(cur);
         std::shared_ptr<NfsHandle> h;
         const char* msg = nullptr;
         if (err == 0 && gen == generation_) {
           h = std::make_shared<NfsHandle>();
           h->fh = static_cast<nfsfh*>(data);
           h->generation = gen;
           h->key = key;
           h->last_use = ++use_clock_;
           handles_[key] = h;
           TrimHandles();
         } else {
           if (err == 0) err = -ENOTCONN;  // opened on a context that is gone
           msg = data ? static_cast<const char*>(data) : "open failed";
         }
         std::string msg_copy = msg ? msg : "";
         for (auto& w : opening->waiters) {
           if (h) {
             h->refs++;
             w(0, nullptr, h);
           } else {
             w(err, msg_copy.c_str(), nullptr);
           }
         }
       });
}

void NfsConnection::ReleaseHandle(const std::shared_ptr<NfsHandle>& h) {
  if (!h) return;
  h->refs--;
  if (h->refs <= 0 && h->dropped) CloseHandle(*h);
}

void NfsConnection::CloseHandle(NfsHandle& h) {
  if (h.fh != nullptr && h.generation == generation_ && ctx_ != nullptr) {
    nfs_close_async(ctx_, h.fh, &NoopCb, nullptr);
  }
  // A handle of a destroyed context is leaked (libnfs frees no handles with the context,
  // and closing through another context is not allowed). Only happens on reconnects.
  h.fh = nullptr;
}

void NfsConnection::DropHandle(const std::string& path) {
  for (const char* prefix : {"r:", "w:"}) {
    auto it = handles_.find(prefix + path);
    if (it == handles_.end()) continue;
    auto h = it->second;
    handles_.erase(it);
    h->dropped = true;
    if (h->refs <= 0) CloseHandle(*h);
  }
}

void NfsConnection::TrimHandles() {
  if (handles_.size() <= options_.handle_cache_size) return;
  // Drop the least recently used unreferenced quarter in one pass.
  std::vector<std::pair<uint64_t, std::string>> idle;
  for (const auto& [key, h] : handles_) {
    if (h->refs == 0) idle.emplace_back(h->last_use, key);
  }
  std::sort(idle.begin(), idle.end());
  size_t drop = std::min(idle.size(), handles_.size() - options_.handle_cache_size * 3 / 4);
  for (size_t i = 0; i < drop; ++i) {
    auto it = handles_.find(idle[i].second);
    auto h = it->second;
    handles_.erase(it);
    h->dropped = true;
    CloseHandle(*h);
  }
}

bool NfsConnection::Finish(const std::shared_ptr<NfsJob>& job) {
  if (job->finished) return false;
  job->finished = true;
  running_.erase(job);
  load_.fetch_sub(1);
  double secs = std::chrono::duration<double>(SteadyClock::now() - job->start).count();
  if (options_.on_done) options_.on_done(job->op, secs, nullptr);
  return true;
}

void NfsConnection::FinishWithError(const std::shared_ptr<NfsJob>& job, const Error& e) {
  if (job->finished) return;
  job->finished = true;
  running_.erase(job);
  load_.fetch_sub(1);
  double secs = std::chrono::duration<double>(SteadyClock::now() - job->start).count();
  if (options_.on_done) options_.on_done(job->op, secs, &e);
  if (job->on_error) job->on_error(e);
}

void NfsConnection::AttemptFailed(const std::shared_ptr<NfsJob>& job, int err,
                                  const std::string& msg) {
  if (job->finished) return;
  if (err > 0) err = -err;
  bool transient = Transient(err);
  job->last_error = msg;
  job->last_was_timeout = (err == -EINTR || err == -ETIMEDOUT || err == -ENOTCONN);
  if (err == -ESTALE) DropHandle(job->path);
  auto now = SteadyClock::now();
  if (transient && job->idempotent && job->attempts <= options_.retries) {
    auto backoff = std::chrono::milliseconds(100) * (1 << std::min(job->attempts - 1, 4));
    if (err == -ESTALE) backoff = std::chrono::milliseconds(0);
    if (now + backoff < job->deadline) {
      After(backoff, [this, job] { RunAttempt(job); });
      return;
    }
  }
  std::string what = std::string(job->op) + " of " + (job->path.empty() ? "/" : job->path);
  if (transient) {
    if (job->last_was_timeout) {
      FinishWithError(job, Error(Code::kTimeout,
                                 "hub " + options_.hub + " did not answer " + what + " within " +
                                     Seconds(options_.request_timeout) + " (" + msg + ")"));
    } else {
      FinishWithError(job, Error(Code::kUnavailable,
                                 "hub " + options_.hub + " unreachable: " + what + ": " + msg));
    }
    return;
  }
  FinishWithError(job, Error::FromErrno(err, "hub " + options_.hub + ": " + what + ": " + msg));
}

void NfsConnection::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  timers_.emplace(SteadyClock::now() + delay, std::move(fn));
}

void NfsConnection::RunAttempt(const std::shared_ptr<NfsJob>& job) {
  if (job->finished) return;
  if (state_ != State::kUp) {
    // Lost the context between attempts: wait for the remount (or the deadline).
    job->last_was_timeout = true;
    After(std::chrono::milliseconds(50), [this, job] { RunAttempt(job); });
    return;
  }
  job->attempts++;
  job->attempt(*this, ctx_, job);
}

void NfsConnection::StartJobs() {
  while (state_ == State::kUp && !waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.inflight_limit) {
    auto job = std::move(waiting_.front());
    waiting_.pop_front();
    running_.insert(job);
    RunAttempt(job);
  }
}

void NfsConnection::ExpireJobs() {
  auto now = SteadyClock::now();
  auto timeout_error = [&](const std::shared_ptr<NfsJob>& job) {
    std::string what = std::string(job->op) + " of " + (job->path.empty() ? "/" : job->path);
    std::string detail = job->last_error;
    if (state_ != State::kUp) {
      std::string m = last_mount_error();
      detail = "not connected" + (m.empty() ? "" : ": " + m);
    }
    return Error(Code::kTimeout, "hub " + options_.hub + " did not answer " + what + " within " +
                                     Seconds(options_.request_timeout) +
                                     (detail.empty() ? "" : " (" + detail + ")"));
  };
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->deadline <= now) {
      auto job = *it;
      it = waiting_.erase(it);
      FinishWithError(job, timeout_error(job));
    } else {
      ++it;
    }
  }
  std::vector<std::shared_ptr<NfsJob>> expired;
  for (const auto& job : running_) {
    if (job->deadline <= now) expired.push_back(job);
  }
  for (const auto& job : expired) FinishWithError(job, timeout_error(job));
}

void NfsConnection::RunTimers() {
  auto now = SteadyClock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    auto fn = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    fn();
  }
}

void NfsConnection::MountDone(int err, nfs_context* /*nfs*/, void* data, void* priv) {
  auto* self = static_cast<NfsConnection*>(priv);
  if (self->state_ != State::kMounting) return;
  if (err == 0) {
    self->state_ = State::kUp;
    self->mount_backoff_ = std::chrono::milliseconds(100);
    // libnfs leaves Nagle on: with calls already out, a new small request would wait for
    // the hub's ACK of the one before it (a round trip, plus the hub's delayed ACK), so
    // pipelined requests would go out a round trip apart.
    int one = 1;
    if (::setsockopt(nfs_get_fd(self->ctx_), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
      log::Warn("hub connection: cannot turn off Nagle (TCP_NODELAY); pipelined calls will wait",
                {{"hub", self->options_.hub}, {"error", std::strerror(errno)}});
    }
    self->read_max_.store(std::max<uint64_t>(4096, nfs_get_readmax(self->ctx_)));
    self->write_max_.store(std::max<uint64_t>(4096, nfs_get_writemax(self->ctx_)));
    {
      MutexLock lock(self->mu_);
      self->mounted_.store(true);
      self->mount_error_.clear();
    }
    self->mount_cv_.notify_all();
    log::Debug("hub connection mounted",
               {{"hub", self->options_.hub}, {"connection", self->options_.index}});
  } else {
    self->teardown_requested_ = true;
    self->teardown_reason_ = data ? static_cast<const char*>(data) : "mount failed";
  }
}

void NfsConnection::StartMount() {
  ctx_ = nfs_init_context();
  if (ctx_ == nullptr) {
    Teardown("nfs_init_context failed");
    return;
  }
  generation_++;
  if (options_.auth) {
    // The context's credential: every RPC it encodes from now on (mount included) carries
    // it. One identity per context keeps multi-RPC calls (path lookups) consistent.
    const Credentials& who = *options_.auth;
    std::vector<uint32_t> groups(who.groups.begin(),
                                 who.groups.begin() + std::min<size_t>(who.groups.size(), 16));
    struct AUTH* auth = libnfs_authunix_create("spoke", who.uid, who.gid,
                                               static_cast<uint32_t>(groups.size()), groups.data());
    if (auth == nullptr) {
      Teardown("could not create AUTH_SYS credential");
      return;
    }
    rpc_set_auth(nfs_get_rpc_context(ctx_), auth);
  }
  // libnfs' own per-call bound only frees a call whose job is over anyway: a call is not
  // timed out and sent again on a live connection (CheckLiveness watches the connection).
  const auto libnfs_bound =
      std::max(options_.request_timeout, options_.rpc_timeout) + std::chrono::seconds(1);
  nfs_set_timeout(ctx_, static_cast<int>(libnfs_bound.count()));
  nfs_set_dircache(ctx_, 0);
  // This loop replaces a failed connection itself (Teardown, then a new mount). libnfs' own
  // reconnect would keep the calls queued on a context that is no longer connected, where
  // only destroying it ends them, with the file handles they hold still referenced.
  nfs_set_autoreconnect(ctx_, 0);
  nfs_set_version(ctx_, NFS_V3);
  if (!options_.auth) {  // nfs_set_uid would replace a caller's credential (and its groups)
    if (options_.uid >= 0) nfs_set_uid(ctx_, static_cast<int>(options_.uid));
    if (options_.gid >= 0) nfs_set_gid(ctx_, static_cast<int>(options_.gid));
  }
  nfs_url* url = nfs_parse_url_dir(ctx_, options_.url.c_str());
  if (url == nullptr) {
    Teardown("bad URL: " + ErrorOf(ctx_));
    return;
  }
  state_ = State::kMounting;
  mount_deadline_ = SteadyClock::now() + options_.rpc_timeout + std::chrono::seconds(1);
  int rc = nfs_mount_async(ctx_, url->server, url->path, &MountDone, this);
  nfs_destroy_url(url);
  if (rc != 0) Teardown("mount: " + ErrorOf(ctx_));
}

void NfsConnection::Teardown(const std::string& why) {
  bool was_up = state_ == State::kUp;
  {
    MutexLock lock(mu_);
    mounted_.store(false);
    mount_error_ = why;
  }
  if (was_up) {
    log::Warn("hub connection lost; reconnecting",
              {{"hub", options_.hub}, {"connection", options_.index}, {"error", why}});
  }
  state_ = State::kDown;  // callbacks run below start no new call on this context
  FailCallsInFlight(why);
  // Close the handles while the context still exists: the calls that held them were called
  // back above, so none is referenced (libnfs frees no handle with its context).
  for (auto& [key, h] : handles_) {
    h->dropped = true;
    if (h->refs <= 0) CloseHandle(*h);
  }
  handles_.clear();
  if (ctx_ != nullptr) {
    nfs_context* ctx = ctx_;
    // Outstanding calls are cancelled inside destroy; their callbacks must see a dead state
    // and schedule retries rather than touch the context.
    generation_++;
    nfs_destroy_context(ctx);
    ctx_ = nullptr;
    calls_out_ = 0;  // every call was called back (cancelled) above
    unacked_ = 0;
  }
  // Callbacks of cancelled opens ran above (or never will): forget pending opens.
  for (auto& [key, op] : opening_) {
    for (auto& w : op->waiters) w(-ENOTCONN, why.c_str(), nullptr);
  }
  opening_.clear();
  next_mount_ = SteadyClock::now() + mount_backoff_;
  mount_backoff_ = std::min(mount_backoff_ * 2, std::chrono::milliseconds(2000));
  teardown_requested_ = false;
}

void NfsConnection::FailCallsInFlight(const std::string& why) {
  // Disconnecting calls every call in flight back with an error on a context that still
  // exists, so each releases its handle and retries; destroying the context would cancel
  // them with their handles still referenced, and those handles would leak.
  if (ctx_ == nullptr || calls_out_ <= 0) return;
  rpc_disconnect(nfs_get_rpc_context(ctx_), why.c_str());
}

void NfsConnection::Loop() {
  // A write to a socket the hub closed must give EPIPE, not kill the process.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  while (!stop_.load()) {
    auto now = SteadyClock::now();
    if (state_ == State::kDown && now >= next_mount_) StartMount();
    if (state_ == State::kMounting && now >= mount_deadline_) {
      Teardown("mount did not complete within " + Seconds(options_.rpc_timeout));
    }

    pollfd fds[2];
    int nfds = 1;
    fds[0] = {wake_fd_, POLLIN, 0};
    int nfs_fd = ctx_ != nullptr ? nfs_get_fd(ctx_) : -1;
    if (nfs_fd >= 0) {
      fds[1] = {nfs_fd, static_cast<short>(nfs_which_events(ctx_)), 0};
      nfds = 2;
    }
    int timeout_ms = 50;
    if (!timers_.empty()) {
      auto until = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.begin()->first -
                                                                         SteadyClock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(until.count(), 0, 50));
    }
    ::poll(fds, nfds, timeout_ms);

    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof v);
    }
    std::vector<std::shared_ptr<NfsJob>> incoming;
    std::vector<std::string> invalidations;
    {
      MutexLock lock(mu_);
      incoming.swap(mailbox_);
      invalidations.swap(invalidations_);
    }
    for (const auto& p : invalidations) DropHandle(p);
    for (auto& j : incoming) waiting_.push_back(std::move(j));

    if (nfds == 2 && (fds[1].revents & POLLIN) != 0) quiet_since_ = SteadyClock::now();
    if (ctx_ != nullptr) {
      int revents = nfds == 2 ? fds[1].revents : 0;
      // Service with 0 too: libnfs only checks its timeouts inside nfs_service.
      if (nfs_service(ctx_, revents) < 0) {
        teardown_requested_ = true;
        teardown_reason_ = ErrorOf(ctx_);
      }
    }
    if (teardown_requested_) Teardown(teardown_reason_);
    RunTimers();
    StartJobs();
    ExpireJobs();
    CheckLiveness();
  }
  // Shutting down: nothing may hang on us.
  Error cancelled(Code::kCancelled, "hub " + options_.hub + ": connection closed");
  {
    MutexLock lock(mu_);  // a late Submit may still be pushing
    for (auto& j : mailbox_) waiting_.push_back(std::move(j));
    mailbox_.clear();
  }
  while (!waiting_.empty()) {
    auto job = waiting_.front();
    waiting_.pop_front();
    FinishWithError(job, cancelled);
  }
  std::vector<std::shared_ptr<NfsJob>> running(running_.begin(), running_.end());
  for (auto& j : running) FinishWithError(j, cancelled);
  timers_.clear();
  if (state_ == State::kUp) state_ = State::kDown;
  Teardown("shutting down");
}

}  // namespace spoke::agent
