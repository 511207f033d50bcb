// NfsConnection: one libnfs context (one TCP connection to the hub) and the event-loop
// thread that owns it. Internal to LibnfsRemote.
//
// Threading: Submit/Invalidate may be called from any thread; everything else (libnfs
// calls, the handle cache, job state) runs on the loop thread only.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"
#include "common/thread_annotations.h"

struct nfs_context;
struct nfsfh;
struct rpc_context;

namespace spoke::agent {

class NfsConnection;
using SteadyClock = std::chrono::steady_clock;

// One RemoteFs call as the loop runs it: attempts (retried with backoff while idempotent
// and inside the deadline), then exactly one delivery (success by the attempt's
// continuation, or an error through `on_error`).
struct NfsJob {
  const char* op = "";  // "READ", "GETATTR", ... for messages and metrics
  std::string path;     // for messages
  SteadyClock::time_point start{};
  SteadyClock::time_point deadline{};
  SteadyClock::duration timeout{};  // the bound `deadline` was set from (start + timeout)
  bool idempotent = true;
  // Starts one attempt on the loop thread. Its continuation calls conn.Finish(job) (and
  // delivers the result when that returns true) or conn.AttemptFailed(...).
  std::function<void(NfsConnection& conn, nfs_context* ctx, const std::shared_ptr<NfsJob>& job)>
      attempt;
  std::function<void(const Error&)> on_error;

  // Loop-thread state.
  int attempts = 0;
  bool finished = false;
  bool last_was_timeout = false;
  std::string last_error;
};

// A cached open file on one context.
struct NfsHandle {
  nfsfh* fh = nullptr;
  uint64_t generation = 0;  // the context it belongs to
  int refs = 0;
  uint64_t last_use = 0;
  bool dropped = false;  // removed from the cache; closed when refs reaches 0
  std::string key;
};

class NfsConnection {
 public:
  struct Options {
    std::string url;   // nfs://server/share?version=3&nfsport=..&mountport=..
    std::string hub;   // "server:port" for messages
    std::string root;  // prefix of handle paths: "" or "/volume/dir"
    int index = 0;
    int inflight_limit = 64;
    int retries = 3;
    std::chrono::milliseconds request_timeout{10000};
    // How long a connection with calls out may receive nothing before it is torn down (its
    // calls are retried on the new one); also the mount's bound.
    std::chrono::milliseconds rpc_timeout{5000};
    size_t handle_cache_size = 8192;
    // AUTH_SYS identity of every RPC on this context; unset: libnfs' default (the
    // process' own uid/gid).
    std::optional<Credentials> auth;
    // Without `auth`: the uid/gid of the context (nfs_set_uid/gid); -1 = libnfs' default.
    int64_t uid = -1;
    int64_t gid = -1;
    // Called (loop thread) when a job finishes: op, seconds, error or null.
    std::function<void(const char*, double, const Error*)> on_done;
  };

  explicit NfsConnection(Options options);
  ~NfsConnection();  // stops the loop; unfinished jobs get kCancelled
  NfsConnection(const NfsConnection&) = delete;
  NfsConnection& operator=(const NfsConnection&) = delete;

  // Any thread.
  void Submit(std::shared_ptr<NfsJob> job);
  void Invalidate(const std::string& path);  // drops cached handles of `path`
  bool mounted() const { return mounted_.load(); }
  // Waits until the context is mounted; false at the deadline.
  bool WaitMounted(SteadyClock::time_point deadline);
  int64_t load() const { return load_.load(); }
  std::string last_mount_error() const;
  uint64_t read_max() const { return read_max_.load(); }
  uint64_t write_max() const { return write_max_.load(); }

  // Loop thread only ---------------------------------------------------------------------
  using Callback = std::function<void(int err, void* data)>;
  using StartFn =
      std::function<int(nfs_context*, void (*)(int, nfs_context*, void*, void*), void*)>;
  // Starts one libnfs call; `cb` runs exactly once on the loop thread (also when queueing
  // fails, with -EAGAIN and the error string as data).
  void Call(const StartFn& start, Callback cb);
  // The same for one raw NFSv3 call (rpc_nfs3_*_async) on this context's socket and
  // credentials: `cb` gets the RPC status (RPC_STATUS_SUCCESS: `data` is the call's result
  // struct, valid during the callback only; otherwise an error string or null).
  using RpcCallback = std::function<void(int status, void* data)>;
  using RpcStartFn =
      std::function<int(rpc_context*, void (*)(rpc_context*, int, void*, void*), void*)>;
  void CallRpc(const RpcStartFn& start, RpcCallback cb);
  // The share's root handle from the MOUNT reply (empty when not mounted).
  std::string RootHandle() const;
  // Opens (or reuses) a handle for path; write handles are O_RDWR|O_SYNC (FILE_SYNC).
  // The callback gets err=0 and a referenced handle, or a negative errno + message.
  void GetHandle(const std::string& path, bool write,
                 std::function<void(int err, const char* msg, std::shared_ptr<NfsHandle>)> cb);
  void ReleaseHandle(const std::shared_ptr<NfsHandle>& h);
  void DropHandle(const std::string& path);
  // Marks the job done; false when it already finished (timed out): then do not deliver.
  bool Finish(const std::shared_ptr<NfsJob>& job);
  // Finishes the job with `e` now (no retry); nothing when it already finished.
  void FinishWithError(const std::shared_ptr<NfsJob>& job, const Error& e);
  // One attempt failed with a negative errno: retries (transient errors, idempotent job,
  // inside the deadline) or finishes the job with an error.
  void AttemptFailed(const std::shared_ptr<NfsJob>& job, int err, const std::string& msg);
  // Runs fn on the loop after `delay`.
  void After(std::chrono::milliseconds delay, std::function<void()> fn);
  const std::string& hub() const { return options_.hub; }
  nfs_context* context() const { return ctx_; }

 private:
  enum class State { kDown, kMounting, kUp };
  void Loop();
  void StartMount();
  void Teardown(const std::string& why);
  void StartJobs();
  void ExpireJobs();
  void CallStarting();
  void CheckLiveness();
  // Calls back every call in flight with an error, on the context that still exists.
  void FailCallsInFlight(const std::string& why);
  void RunTimers();
  void RunAttempt(const std::shared_ptr<NfsJob>& job);
  void TrimHandles();
  void CloseHandle(NfsHandle& h);
  static void MountDone(int err, nfs_context* nfs, void* data, void* priv);

  Options options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> mounted_{false};
  std::atomic<int64_t> load_{0};
  std::atomic<uint64_t> read_max_{1 << 20};
  std::atomic<uint64_t> write_max_{1 << 20};
  int wake_fd_ = -1;

  mutable Mutex mu_;
  CondVar mount_cv_;  // waited on with mu_ held: mounted_ changed
  std::vector<std::shared_ptr<NfsJob>> mailbox_ GUARDED_BY(mu_);
  std::vector<std::string> invalidations_ GUARDED_BY(mu_);
  std::string mount_error_ GUARDED_BY(mu_);

  // Loop thread.
  nfs_context* ctx_ = nullptr;
  State state_ = State::kDown;
  uint64_t generation_ = 0;
  SteadyClock::time_point next_mount_{};
  SteadyClock::time_point mount_deadline_{};
  std::chrono::milliseconds mount_backoff_{100};
  int calls_out_ = 0;  // libnfs calls started and not yet called back
  // Last byte received or acknowledged, or the first call out.
  SteadyClock::time_point quiet_since_{};
  int unacked_ = 0;  // bytes sent and not yet acknowledged, at the last look
  bool teardown_requested_ = false;
  std::string teardown_reason_;
  std::deque<std::shared_ptr<NfsJob>> waiting_;
  std::unordered_set<std::shared_ptr<NfsJob>> running_;
  std::multimap<SteadyClock::time_point, std::function<void()>> timers_;
  std::unordered_map<std::string, std::shared_ptr<NfsHandle>> handles_;
  struct Opening {
    std::vector<std::function<void(int, const char*, std::shared_ptr<NfsHandle>)>> waiters;
  };
  std::unordered_map<std::string, std::shared_ptr<Opening>> opening_;
  uint64_t use_clock_ = 0;

  std::thread thread_;
};

}  // namespace spoke::agent
