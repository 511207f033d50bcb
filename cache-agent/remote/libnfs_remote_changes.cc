// LibnfsRemote: changes to the hub (writes, creates, removals, renames, attributes, links),
// as the agent or as a caller.
#include <cstring>

#include "cache-agent/remote/libnfs_calls.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "cache-agent/remote/nfs_connection.h"
#include "common/log.h"

namespace spoke::agent {

using namespace libnfs_calls;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {

// libnfs 4.0 reports a WRITE the hub refused (NFS3ERR_NOSPC, _DQUOT, _ACCES, ...) as EFAULT,
// its code for a socket failure, and keeps the hub's status in the context's error text:
// "NFS: Write failed with NFS3ERR_NOSPC(-28)". That errno is the one to answer, not a retry.
int HubRefusal(nfs_context* ctx, int err, std::string* why) {
  if (err != -EFAULT || ctx == nullptr) return err;
  const char* text = nfs_get_error(ctx);
  if (text == nullptr) return err;
  std::string_view t(text);
  size_t at = t.find("NFS3ERR_");
  if (at == std::string_view::npos) return err;
  size_t open = t.find("(-", at);
  if (open == std::string_view::npos) return err;
  int code = std::atoi(text + open + 2);
  if (code <= 0) return err;
  *why = std::string(t);
  return -code;
}

}  // namespace

Result<size_t> LibnfsRemote::Write(const std::string& path, uint64_t offset, const char* data,
                                   size_t length) {
  return WriteOn(Writer(), path, offset, data, length);
}

Result<size_t> LibnfsRemote::WriteOn(NfsConnection& conn, const std::string& path, uint64_t offset,
                                     const char* data, size_t length) {
  auto job = NewJob("WRITE", path, false, config_.request_timeout_seconds);
  // The job owns its payload: after a timeout the caller's buffer may be reused while
  // chunks are still queued on the loop.
  auto payload = std::make_shared<const std::vector<char>>(data, data + length);
  return RunBlocking<size_t>(conn, in_flight_, job, WriteChunks(path, offset, payload));
}

void LibnfsRemote::WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                                std::shared_ptr<const std::vector<char>> data, WriteDone done) {
  // Overlapping writes never race across lanes: WriteBack holds one until the other's reply.
  auto conn = ForIdentity(who, LaneFor(path, offset));
  auto job = NewJob("WRITE", path, false, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<WriteDone>(std::move(done));
  // The job holds no reference to its connection (ForIdentity keeps a busy one open): the
  // last one dropped on the connection's own thread would join that thread from itself.
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  auto attempt = WriteChunks(path, offset, std::move(data));
  std::function<void(size_t)> deliver = [shared_done](size_t n) { (*shared_done)(n); };
  job->attempt = [attempt, deliver](NfsConnection& c, nfs_context* ctx,
                                    const std::shared_ptr<NfsJob>& j) {
    attempt(c, ctx, j, deliver);
  };
  in_flight_->Add(1);
  conn->Submit(std::move(job));
}

LibnfsRemote::WriteAttempt LibnfsRemote::WriteChunks(
    const std::string& path, uint64_t offset, std::shared_ptr<const std::vector<char>> payload) {
  std::string key = path;
  return
      [key, offset, payload](NfsConnection& c, nfs_context* ctx, const std::shared_ptr<NfsJob>& j,
                             const std::function<void(size_t)>& deliver) {
        c.GetHandle(key, true,
                    [&c, ctx, j, offset, payload, deliver](int err, const char* msg,
                                                           std::shared_ptr<NfsHandle> h) {
                      if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
                      auto done = std::make_shared<size_t>(0);
                      auto step = std::make_shared<std::function<void()>>();
                      *step = [&c, ctx, j, h, offset, payload, deliver, done, step]() {
                        size_t want = std::min<size_t>(payload->size() - *done, c.write_max());
                        c.Call(
                            [&](nfs_context* ctx, auto tramp, void* priv) {
                              return nfs_pwrite_async(ctx, h->fh, offset + *done, want,
                                                      payload->data() + *done, tramp, priv);
                            },
                            [&c, ctx, j, h, payload, deliver, done, step](int err, void* d) {
                              if (err < 0) {
                                c.ReleaseHandle(h);
                                *step = nullptr;
                                std::string why = Msg(d);
                                err = HubRefusal(ctx, err, &why);
                                return c.AttemptFailed(j, err, why);
                              }
                              *done += static_cast<size_t>(err);
                              // A job that already failed (deadline) issues no further chunk.
                              if (!j->finished && err > 0 && *done < payload->size()) {
                                (*step)();
                                return;
                              }
                              c.ReleaseHandle(h);
                              auto keep = *step;
                              *step = nullptr;
                              if (*done < payload->size() && err == 0 && !j->finished) {
                                return c.AttemptFailed(j, -EIO, "hub accepted 0 bytes of a WRITE");
                              }
                              if (c.Finish(j)) deliver(*done);
                            });
                      };
                      if (payload->empty()) {
                        c.ReleaseHandle(h);
                        if (c.Finish(j)) deliver(0);
                        return;
                      }
                      (*step)();
                    });
      };
}

Result<FileAttr> LibnfsRemote::Create(const std::string& path, uint32_t mode) {
  return CreateOn(Writer(), path, mode, CreateMode::kUnchecked);
}

Result<FileAttr> LibnfsRemote::CreateOn(NfsConnection& conn, const std::string& path, uint32_t mode,
                                        CreateMode how) {
  auto job = NewJob("CREATE", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  // O_EXCL makes libnfs send CREATE3 GUARDED: the hub refuses an existing name (NFS3ERR_EXIST).
  int flags = O_CREAT | O_RDWR | O_SYNC | (how == CreateMode::kExclusive ? O_EXCL : 0);
  // By path: libnfs looks the directory up, creates, then the LSTAT looks the file up again.
  auto create_by_path = [p, mode, flags](NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                         const std::function<void(FileAttr)>& deliver) {
    c.Call(
        [&](nfs_context* ctx, auto tramp, void* priv) {
          return nfs_create_async(ctx, p.c_str(), flags, static_cast<int>(mode & 07777), tramp,
                                  priv);
        },
        [&c, j, p, deliver](int err, void* data) {
          if (err < 0) return c.AttemptFailed(j, err, Msg(data));
          // The create handle is not kept: writes open their own O_SYNC handle.
          c.Call(
              [&](nfs_context* ctx, auto tramp, void* priv) {
                return nfs_close_async(ctx, static_cast<nfsfh*>(data), tramp, priv);
              },
              [](int, void*) {});
          StatThenFinish(c, j, p, deliver);
        });
  };
  auto r = RunBlocking<FileAttr>(
      conn, in_flight_, job,
      [this, path, mode, how, create_by_path](NfsConnection& c, nfs_context*,
                                              const std::shared_ptr<NfsJob>& j,
                                              const std::function<void(FileAttr)>& deliver) {
        auto by_path = [create_by_path, &c, j, deliver]() { create_by_path(c, j, deliver); };
        // One CREATE by the directory's handle; its reply carries the new file's attributes.
        ParentHandle(
            c, path,
            [this, &c, j, path, mode, how, deliver, by_path](std::string fh, std::string name) {
              if (fh.empty()) return by_path();
              CreateByHandle(c, j, path, fh, name, mode, how, deliver, by_path);
            });
      });
  InvalidateEverywhere(path);
  return r;
}

Result<FileAttr> LibnfsRemote::Mkdir(const std::string& path, uint32_t mode) {
  return MkdirOn(Writer(), path, mode);
}

Result<FileAttr> LibnfsRemote::MkdirOn(NfsConnection& conn, const std::string& path,
                                       uint32_t mode) {
  auto job = NewJob("MKDIR", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<FileAttr>(
      conn, in_flight_, job,
      ChangeThenStat(
          [p, mode](nfs_context* ctx, auto tramp, void* priv) {
            return nfs_mkdir2_async(ctx, p.c_str(), static_cast<int>(mode & 07777), tramp, priv);
          },
          p));
}

Status LibnfsRemote::Unlink(const std::string& path) { return UnlinkOn(Writer(), path); }

Status LibnfsRemote::UnlinkOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("REMOVE", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  InvalidateEverywhere(path);
  auto remove_by_path = PathCall([p](nfs_context* ctx, auto tramp, void* priv) {
    return nfs_unlink_async(ctx, p.c_str(), tramp, priv);
  });
  auto r = RunBlocking<Unit>(
      conn, in_flight_, job,
      [this, path, remove_by_path](NfsConnection& c, nfs_context* ctx,
                                   const std::shared_ptr<NfsJob>& j,
                                   const std::function<void(Unit)>& deliver) {
        auto by_path = [remove_by_path, &c, ctx, j, deliver]() {
          remove_by_path(c, ctx, j, deliver);
        };
        ParentHandle(c, path,
                     [this, &c, j, path, deliver, by_path](std::string fh, std::string name) {
                       if (fh.empty()) return by_path();
                       RemoveByHandle(
                           c, j, path, fh, name, [deliver] { deliver(Unit{}); }, by_path);
                     });
      });
  InvalidateEverywhere(path);
  return ToStatus(r);
}

Status LibnfsRemote::Rmdir(const std::string& path) { return RmdirOn(Writer(), path); }

Status LibnfsRemote::RmdirOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("RMDIR", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  return ToStatus(RunBlocking<Unit>(conn, in_flight_, job,
                                    PathCall([p](nfs_context* ctx, auto tramp, void* priv) {
                                      return nfs_rmdir_async(ctx, p.c_str(), tramp, priv);
                                    })));
}

Status LibnfsRemote::Rename(const std::string& from, const std::string& to) {
  return RenameOn(Writer(), from, to);
}

Status LibnfsRemote::RenameOn(NfsConnection& conn, const std::string& from, const std::string& to) {
  auto job = NewJob("RENAME", from, false, config_.request_timeout_seconds);
  std::string a = Full(from), b = Full(to);
  InvalidateEverywhere(from);
  InvalidateEverywhere(to);
  auto r = RunBlocking<Unit>(conn, in_flight_, job,
                             PathCall([a, b](nfs_context* ctx, auto tramp, void* priv) {
                               return nfs_rename_async(ctx, a.c_str(), b.c_str(), tramp, priv);
                             }));
  // Handles opened for the old names between the invalidation and the rename are dropped
  // again now that the rename is done.
  InvalidateEverywhere(from);
  InvalidateEverywhere(to);
  return ToStatus(r);
}

Result<FileAttr> LibnfsRemote::SetAttr(const std::string& path, const SetAttrRequest& req) {
  return SetAttrOn(Writer(), path, req);
}

// The l* calls: a symbolic link's own attributes change (FUSE resolved any link already).
Result<FileAttr> LibnfsRemote::SetAttrOn(NfsConnection& conn, const std::string& path,
                                         const SetAttrRequest& req) {
  std::string p = Full(path);
  auto run = [&](const char* op, auto start) -> Status {
    auto job = NewJob(op, path, false, config_.request_timeout_seconds);
    return ToStatus(RunBlocking<Unit>(conn, in_flight_, job, PathCall(start)));
  };
  if (req.mode) {
    int mode = static_cast<int>(*req.mode & 07777);
    SPOKE_RETURN_IF_ERROR(run("SETATTR", [p, mode](nfs_context* ctx, auto tramp, void* priv) {
      return nfs_lchmod_async(ctx, p.c_str(), mode, tramp, priv);
    }));
  }
  if (req.uid || req.gid) {
    int uid = req.uid ? static_cast<int>(*req.uid) : -1;
    int gid = req.gid ? static_cast<int>(*req.gid) : -1;
    SPOKE_RETURN_IF_ERROR(run("SETATTR", [p, uid, gid](nfs_context* ctx, auto tramp, void* priv) {
      return nfs_lchown_async(ctx, p.c_str(), uid, gid, tramp, priv);
    }));
  }
  if (req.size) {
    uint64_t size = *req.size;
    auto st = run("SETATTR", [p, size](nfs_context* ctx, auto tramp, void* priv) {
      return nfs_truncate_async(ctx, p.c_str(), size, tramp, priv);
    });
    InvalidateEverywhere(path);
    SPOKE_RETURN_IF_ERROR(st);
  }
  auto given = [](const std::optional<struct timespec>& t) {
    return t && t->tv_nsec != UTIME_OMIT;
  };
  auto now = [](const std::optional<struct timespec>& t) { return t && t->tv_nsec == UTIME_NOW; };
  if (given(req.atime) || given(req.mtime)) {
    std::shared_ptr<std::array<struct timeval, 2>> times;  // null: both to the hub's clock
    if (!(now(req.atime) && now(req.mtime))) {
      // libnfs sets both times at once, from the client: an omitted one is re-sent as it
      // is, a UTIME_NOW one next to an explicit one takes this node's clock.
      struct timespec at {
      }, mt{};
      if (!given(req.atime) || !given(req.mtime)) {
        SPOKE_TRY(auto cur, StatOn(conn, path));
        at = cur.atime;
        mt = cur.mtime;
      }
      struct timespec clock {};
      clock_gettime(CLOCK_REALTIME, &clock);
      if (given(req.atime)) at = now(req.atime) ? clock : *req.atime;
      if (given(req.mtime)) mt = now(req.mtime) ? clock : *req.mtime;
      times = std::make_shared<std::array<struct timeval, 2>>();
      (*times)[0] = {at.tv_sec, at.tv_nsec / 1000};
      (*times)[1] = {mt.tv_sec, mt.tv_nsec / 1000};
    }
    SPOKE_RETURN_IF_ERROR(run("SETATTR", [p, times](nfs_context* ctx, auto tramp, void* priv) {
      return nfs_lutimes_async(ctx, p.c_str(), times ? times->data() : nullptr, tramp, priv);
    }));
  }
  return StatOn(conn, path);
}

// Calls made for a caller: the same bodies on the caller's identity connection.

Result<FileAttr> LibnfsRemote::CreateAs(const Credentials& who, const std::string& path,
                                        uint32_t mode, CreateMode how) {
  auto conn = ForIdentity(who);
  return CreateOn(*conn, path, mode, how);
}

Result<FileAttr> LibnfsRemote::MkdirAs(const Credentials& who, const std::string& path,
                                       uint32_t mode) {
  auto conn = ForIdentity(who);
  return MkdirOn(*conn, path, mode);
}

Result<size_t> LibnfsRemote::WriteAs(const Credentials& who, const std::string& path,
                                     uint64_t offset, const char* data, size_t length) {
  auto conn = ForIdentity(who);
  return WriteOn(*conn, path, offset, data, length);
}

Result<uint64_t> LibnfsRemote::AppendAs(const Credentials& who, const std::string& path,
                                        const char* data, size_t length) {
  auto conn = ForIdentity(who);
  SPOKE_TRY(auto cur, StatOn(*conn, path));
  SPOKE_TRY(auto w, WriteOn(*conn, path, cur.size, data, length));
  return cur.size + w;
}

Result<FileAttr> LibnfsRemote::SymlinkAs(const Credentials& who, const std::string& target,
                                         const std::string& path) {
  auto conn = ForIdentity(who);
  auto job = NewJob("SYMLINK", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  auto r = RunBlocking<FileAttr>(*conn, in_flight_, job,
                                 ChangeThenStat(
                                     [target, p](nfs_context* ctx, auto tramp, void* priv) {
                                       return nfs_symlink_async(ctx, target.c_str(), p.c_str(),
                                                                tramp, priv);
                                     },
                                     p));
  InvalidateEverywhere(path);
  return r;
}

Result<std::string> LibnfsRemote::ReadLink(const std::string& path) {
  return ReadLinkOn(LeastLoaded(), path);
}

Result<std::string> LibnfsRemote::ReadLinkAs(const Credentials& who, const std::string& path) {
  if (AsPool(who)) return ReadLink(path);
  auto conn = ForIdentity(who);
  return ReadLinkOn(*conn, path);
}

Result<std::string> LibnfsRemote::ReadLinkOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("READLINK", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<std::string>(
      conn, in_flight_, job,
      [p](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
          const std::function<void(std::string)>& deliver) {
        c.Call([&](nfs_context* ctx, auto tramp,
                   void* priv) { return nfs_readlink_async(ctx, p.c_str(), tramp, priv); },
               [&c, j, deliver](int err, void* data) {
                 if (err < 0) return c.AttemptFailed(j, err, Msg(data));
                 std::string target = data ? static_cast<const char*>(data) : "";
                 if (c.Finish(j)) deliver(std::move(target));
               });
      });
}

Result<FileAttr> LibnfsRemote::LinkAs(const Credentials& who, const std::string& existing,
                                      const std::string& path) {
  auto conn = ForIdentity(who);
  auto job = NewJob("LINK", path, false, config_.request_timeout_seconds);
  std::string from = Full(existing), p = Full(path);
  auto r =
      RunBlocking<FileAttr>(*conn, in_flight_, job,
                            ChangeThenStat(
                                [from, p](nfs_context* ctx, auto tramp, void* priv) {
                                  return nfs_link_async(ctx, from.c_str(), p.c_str(), tramp, priv);
                                },
                                p));
  InvalidateEverywhere(path);
  return r;
}

Result<FileAttr> LibnfsRemote::MknodAs(const Credentials& who, const std::string& path,
                                       uint32_t mode, uint64_t rdev) {
  auto conn = ForIdentity(who);
  auto job = NewJob("MKNOD", path, false, config_.request_timeout_seconds);
  std::string p = Full(path);
  int m = static_cast<int>(mode);
  int dev = static_cast<int>(rdev);
  auto r = RunBlocking<FileAttr>(*conn, in_flight_, job,
                                 ChangeThenStat(
                                     [p, m, dev](nfs_context* ctx, auto tramp, void* priv) {
                                       return nfs_mknod_async(ctx, p.c_str(), m, dev, tramp, priv);
                                     },
                                     p));
  InvalidateEverywhere(path);
  return r;
}

Result<FileAttr> LibnfsRemote::SetAttrAs(const Credentials& who, const std::string& path,
                                         const SetAttrRequest& request) {
  auto conn = ForIdentity(who);
  return SetAttrOn(*conn, path, request);
}

Status LibnfsRemote::UnlinkAs(const Credentials& who, const std::string& path) {
  auto conn = ForIdentity(who);
  return UnlinkOn(*conn, path);
}

Status LibnfsRemote::RmdirAs(const Credentials& who, const std::string& path) {
  auto conn = ForIdentity(who);
  return RmdirOn(*conn, path);
}

Status LibnfsRemote::RenameAs(const Credentials& who, const std::string& from,
                              const std::string& to) {
  auto conn = ForIdentity(who);
  return RenameOn(*conn, from, to);
}

}  // namespace spoke::agent
