// The libnfs plumbing LibnfsRemote's files share: conversions from libnfs and NFSv3 types,
// and the shapes of a call (a job run to completion on a connection, a path call, a stat, a
// namespace change followed by its LSTAT). Internal to cache-agent/remote/.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <fcntl.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
// After libnfs.h, which defines the EXTERN it uses.
#include <nfsc/libnfs-raw.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cache-agent/remote/nfs_connection.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/interrupt.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent::libnfs_calls {

inline constexpr uint32_t kMaxRead = 1u << 20;

inline FileAttr FromStat(const nfs_stat_64& st) {
  FileAttr a;
  a.file_id = st.nfs_ino;
  a.fsid = st.nfs_dev;  // libnfs: fattr3.fsid
  a.mode = static_cast<uint32_t>(st.nfs_mode);
  a.nlink = static_cast<uint32_t>(st.nfs_nlink);
  a.uid = static_cast<uint32_t>(st.nfs_uid);
  a.gid = static_cast<uint32_t>(st.nfs_gid);
  a.size = st.nfs_size;
  a.used = st.nfs_used;
  a.rdev = st.nfs_rdev;
  a.atime = {static_cast<time_t>(st.nfs_atime), static_cast<long>(st.nfs_atime_nsec)};
  a.mtime = {static_cast<time_t>(st.nfs_mtime), static_cast<long>(st.nfs_mtime_nsec)};
  a.ctime = {static_cast<time_t>(st.nfs_ctime), static_cast<long>(st.nfs_ctime_nsec)};
  return a;
}

inline uint32_t TypeBits(uint32_t nf3_type) {
  switch (nf3_type) {
    case NF3REG:
      return S_IFREG;
    case NF3DIR:
      return S_IFDIR;
    case NF3BLK:
      return S_IFBLK;
    case NF3CHR:
      return S_IFCHR;
    case NF3LNK:
      return S_IFLNK;
    case NF3SOCK:
      return S_IFSOCK;
    case NF3FIFO:
      return S_IFIFO;
    default:
      return 0;
  }
}

inline FileAttr FromDirent(const nfsdirent& e) {
  FileAttr a;
  a.file_id = e.inode;
  a.fsid = e.dev;  // libnfs: fattr3.fsid
  a.mode = e.mode;
  if ((a.mode & S_IFMT) == 0) a.mode |= TypeBits(e.type);
  a.nlink = e.nlink;
  a.uid = e.uid;
  a.gid = e.gid;
  a.size = e.size;
  a.used = e.used;
  a.rdev = e.rdev;
  a.atime = {e.atime.tv_sec, static_cast<long>(e.atime_nsec)};
  a.mtime = {e.mtime.tv_sec, static_cast<long>(e.mtime_nsec)};
  a.ctime = {e.ctime.tv_sec, static_cast<long>(e.ctime_nsec)};
  return a;
}

inline const char* Msg(void* data) { return data ? static_cast<const char*>(data) : "error"; }

inline FileAttr FromFattr3(const fattr3& f) {
  FileAttr a;
  a.file_id = f.fileid;
  a.fsid = f.fsid;
  a.mode = TypeBits(f.type) | (f.mode & 07777);
  a.nlink = f.nlink;
  a.uid = f.uid;
  a.gid = f.gid;
  a.size = f.size;
  a.used = f.used;
  a.rdev = makedev(f.rdev.specdata1, f.rdev.specdata2);
  a.atime = {static_cast<time_t>(f.atime.seconds), static_cast<long>(f.atime.nseconds)};
  a.mtime = {static_cast<time_t>(f.mtime.seconds), static_cast<long>(f.mtime.nseconds)};
  a.ctime = {static_cast<time_t>(f.ctime.seconds), static_cast<long>(f.ctime.nseconds)};
  return a;
}

// The errno of an NFSv3 status (RFC 1813 names them after the errno they stand for).
inline int ErrnoOf(nfsstat3 s) {
  switch (s) {
    case NFS3ERR_PERM:
      return EPERM;
    case NFS3ERR_NOENT:
      return ENOENT;
    case NFS3ERR_IO:
      return EIO;
    case NFS3ERR_NXIO:
      return ENXIO;
    case NFS3ERR_ACCES:
      return EACCES;
    case NFS3ERR_EXIST:
      return EEXIST;
    case NFS3ERR_XDEV:
      return EXDEV;
    case NFS3ERR_FBIG:
      return EFBIG;
    case NFS3ERR_NOSPC:
      return ENOSPC;
    case NFS3ERR_ROFS:
      return EROFS;
    case NFS3ERR_MLINK:
      return EMLINK;
    case NFS3ERR_NAMETOOLONG:
      return ENAMETOOLONG;
    case NFS3ERR_NOTEMPTY:
      return ENOTEMPTY;
    case NFS3ERR_DQUOT:
      return EDQUOT;
    case NFS3ERR_NOTDIR:
      return ENOTDIR;
    case NFS3ERR_ISDIR:
      return EISDIR;
    case NFS3ERR_INVAL:
      return EINVAL;
    case NFS3ERR_STALE:
      return ESTALE;
    case NFS3ERR_BADHANDLE:
      return ESTALE;
    case NFS3ERR_JUKEBOX:
      return EAGAIN;  // the hub asks to retry later
    case NFS3ERR_SERVERFAULT:
      return EIO;
    default:
      return EIO;
  }
}

// A raw call's failure as the errno AttemptFailed classifies: the RPC layer's failures are
// transient (EFAULT: socket failure, EINTR: timed out or cancelled, as libnfs reports them
// through its high-level calls).
inline int RpcErrno(int rpc_status) { return rpc_status == RPC_STATUS_ERROR ? -EFAULT : -EINTR; }

inline nfs_fh3 Fh3(const std::string& fh) {
  nfs_fh3 h{};
  h.data.data_len = static_cast<u_int>(fh.size());
  h.data.data_val = const_cast<char*>(fh.data());
  return h;
}

inline std::string Joined(const std::string& dir, const char* name) {
  return dir.empty() ? std::string(name) : dir + "/" + name;
}

// Blocking wrapper: the job's delivery (success) or on_error fills it. Shared with the job, so
// a caller that stops waiting (interrupted) leaves it to the job, which ends on its own bound.
template <typename T>
struct Waiter {
  Mutex mu;
  CondVar cv;
  std::optional<Result<T>> result GUARDED_BY(mu);
  void Set(Result<T> r) EXCLUDES(mu) {
    MutexLock lock(mu);
    result = std::move(r);
    cv.notify_all();
  }
  // The result, or nothing when `waker` fired first.
  std::optional<Result<T>> Wait(const Interrupt::Waker& waker) EXCLUDES(mu) {
    MutexLock lock(mu);
    cv.wait(lock, [&]() REQUIRES(mu) { return result.has_value() || waker.fired(); });
    return std::move(result);
  }
};

inline std::shared_ptr<NfsJob> NewJob(const char* op, const std::string& path, bool idempotent,
                                      double timeout_s) {
  auto j = std::make_shared<NfsJob>();
  j->op = op;
  j->path = path;
  j->idempotent = idempotent;
  j->start = SteadyClock::now();
  j->timeout = std::chrono::milliseconds(std::llround(timeout_s * 1000));
  j->deadline = j->start + j->timeout;
  return j;
}

// Runs `job` on `conn` and waits for its delivery (the job's own timeouts bound the wait), or
// until the thread's request is interrupted (InterruptScope): kInterrupted, the job goes on.
template <typename T>
Result<T> RunBlocking(
    NfsConnection& conn, metrics::Gauge* in_flight, std::shared_ptr<NfsJob> job,
    std::function<void(NfsConnection&, nfs_context*, const std::shared_ptr<NfsJob>&,
                       const std::function<void(T)>& deliver)>
        attempt) {
  auto waiter = std::make_shared<Waiter<T>>();
  auto deliver = [waiter](T v) { waiter->Set(std::move(v)); };
  job->attempt = [attempt, deliver](NfsConnection& c, nfs_context* ctx,
                                    const std::shared_ptr<NfsJob>& j) {
    attempt(c, ctx, j, deliver);
  };
  job->on_error = [waiter](const Error& e) { waiter->Set(std::unexpected(e)); };
  in_flight->Add(1);
  Interrupt::Waker waker(InterruptScope::Current(), [&waiter] {
    MutexLock lock(waiter->mu);
    waiter->cv.notify_all();
  });
  const std::string what =
      std::string(job->op) + " of " + (job->path.empty() ? "/" : job->path) + " from the hub";
  conn.Submit(std::move(job));
  std::optional<Result<T>> result = waiter->Wait(waker);
  if (!result) return std::unexpected(Interrupted(what));
  return std::move(*result);
}

struct Unit {};

// A single path-based libnfs call whose success carries no data.
template <typename Start>
auto PathCall(Start start) {
  return [start](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                 const std::function<void(Unit)>& deliver) {
    c.Call([&](nfs_context* ctx, auto tramp, void* p) { return start(ctx, tramp, p); },
           [&c, j, deliver](int err, void* data) {
             if (err < 0) return c.AttemptFailed(j, err, Msg(data));
             if (c.Finish(j)) deliver(Unit{});
           });
  };
}

// A libnfs call producing an nfs_stat_64 (stat/lstat), delivered as FileAttr.
template <typename Start>
auto StatCall(Start start) {
  return [start](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                 const std::function<void(FileAttr)>& deliver) {
    c.Call([&](nfs_context* ctx, auto tramp, void* p) { return start(ctx, tramp, p); },
           [&c, j, deliver](int err, void* data) {
             if (err < 0) return c.AttemptFailed(j, err, Msg(data));
             FileAttr a = FromStat(*static_cast<nfs_stat_64*>(data));
             if (c.Finish(j)) deliver(a);
           });
  };
}

// Loop thread: LSTAT of the libnfs path `full`; its attributes finish the job.
inline void StatThenFinish(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                           const std::string& full, std::function<void(FileAttr)> deliver) {
  c.Call([&](nfs_context* ctx, auto tramp,
             void* p) { return nfs_lstat64_async(ctx, full.c_str(), tramp, p); },
         [&c, j, deliver](int err, void* data) {
           if (err < 0) return c.AttemptFailed(j, err, Msg(data));
           FileAttr a = FromStat(*static_cast<nfs_stat_64*>(data));
           if (c.Finish(j)) deliver(a);
         });
}

// A namespace change by path, then LSTAT of `stat_path` for the attributes it delivers.
template <typename Start>
auto ChangeThenStat(Start start, std::string stat_path) {
  return [start, stat_path](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                            const std::function<void(FileAttr)>& deliver) {
    c.Call([&](nfs_context* ctx, auto tramp, void* p) { return start(ctx, tramp, p); },
           [&c, j, stat_path, deliver](int err, void* data) {
             if (err < 0) return c.AttemptFailed(j, err, Msg(data));
             StatThenFinish(c, j, stat_path, deliver);
           });
  };
}

inline Status ToStatus(const Result<Unit>& r) {
  SPOKE_RETURN_IF_ERROR(r);
  return Ok();
}

}  // namespace spoke::agent::libnfs_calls
