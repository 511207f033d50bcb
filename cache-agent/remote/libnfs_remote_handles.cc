// LibnfsRemote: calls by NFS file handle: listings (READDIRPLUS), reads (READ), and stats,
// creates and removals by the directory's handle (LOOKUP, CREATE, REMOVE).
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "cache-agent/remote/libnfs_calls.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "cache-agent/remote/nfs_connection.h"
#include "common/log.h"
#include "common/spare_vectors.h"

namespace spoke::agent {

using namespace libnfs_calls;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t at = 0; at < path.size();) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

// Loop thread of `c`: LOOKUPs `parts` one after the other from the directory `from`; k gets
// the last handle and 0, or an empty one and why a LOOKUP failed (a negative errno: the
// network's, or the hub's answer).
void LookupChain(NfsConnection& c, std::string from, std::vector<std::string> parts,
                 std::function<void(std::string, int)> k) {
  if (parts.empty()) return k(std::move(from), 0);
  auto step = std::make_shared<std::function<void(size_t, std::string)>>();
  *step = [&c, parts = std::move(parts), k, step](size_t i, std::string fh) {
    // The end is reached in a copy (`keep` below; `parts` is not empty), never in *step
    // itself: clearing *step frees nothing this call still uses.
    if (i == parts.size()) {
      *step = nullptr;
      return k(fh, 0);
    }
    LOOKUP3args a{};
    a.what.dir = Fh3(fh);
    a.what.name = const_cast<char*>(parts[i].c_str());
    c.CallRpc(
        [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_lookup_async(rpc, cb, &a, p); },
        [step, i, k](int status, void* data) {
          auto keep = *step;
          *step = nullptr;
          auto* r = static_cast<LOOKUP3res*>(data);
          if (status != RPC_STATUS_SUCCESS) return k({}, RpcErrno(status));
          if (r->status != NFS3_OK) return k({}, -ErrnoOf(r->status));
          const auto& h = r->LOOKUP3res_u.resok.object.data;
          *step = keep;
          keep(i + 1, std::string(h.data_val, h.data_len));
        });
  };
  (*step)(0, std::move(from));
}

}  // namespace

void LibnfsRemote::DirHandle(NfsConnection& c, const std::string& path,
                             std::function<void(std::string)> k) {
  if (auto e = FindHandle(path)) return k(e->fh);
  if (!path.empty()) return k({});
  std::string share_root = c.RootHandle();
  if (root_.empty() || share_root.empty()) return k(share_root);
  // The volume's directory inside the share: one LOOKUP per component, once per table.
  LookupChain(c, share_root, Components(root_), [this, k](std::string fh, int) {
    if (!fh.empty()) {
      MutexLock lock(store_mu_);
      root_fh_ = fh;
    }
    k(std::move(fh));
  });
}

void LibnfsRemote::FreshDirHandle(NfsConnection& c, const std::string& path,
                                  std::function<void(std::string)> k) {
  std::string share_root = c.RootHandle();
  if (share_root.empty()) return k({});
  LookupChain(c, share_root, Components(root_ + "/" + path),
              [k](std::string fh, int) { k(std::move(fh)); });
}

namespace {

// A volume-relative path's directory ("" = the volume root) and last name.
std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}
std::string NameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool StaleHandle(nfsstat3 s) { return s == NFS3ERR_STALE || s == NFS3ERR_BADHANDLE; }

// The attributes a by-handle reply carries, when this path can deliver them.
std::optional<FileAttr> ReplyAttr(const post_op_attr& a) {
  if (!a.attributes_follow) return std::nullopt;
  const fattr3& f = a.post_op_attr_u.attributes;
  if (f.type == NF3CHR || f.type == NF3BLK) return std::nullopt;
  return FromFattr3(f);
}

// The start shared by the by-handle replies: the result to act on, or nullptr when the job
// is over, the attempt failed, or the directory's handle was stale (`on_stale` then runs:
// nothing was changed on the hub, the call can go by path).
template <typename Res>
Res* NameReply(NfsConnection& c, const std::shared_ptr<NfsJob>& j, int status, void* data,
               const char* op, const std::function<void()>& on_stale) {
  if (j->finished) return nullptr;
  if (status != RPC_STATUS_SUCCESS) {
    c.AttemptFailed(j, RpcErrno(status), Msg(data));
    return nullptr;
  }
  auto* r = static_cast<Res*>(data);
  if (StaleHandle(r->status)) {
    on_stale();
    return nullptr;
  }
  if (r->status != NFS3_OK) {
    c.AttemptFailed(j, -ErrnoOf(r->status),
                    std::string(op) + ": " + std::strerror(ErrnoOf(r->status)));
    return nullptr;
  }
  return r;
}

}  // namespace

void LibnfsRemote::ParentHandle(NfsConnection& c, const std::string& path,
                                std::function<void(std::string, std::string)> k) {
  if (path.empty()) return k({}, {});
  DirHandle(c, DirOf(path), [k, name = NameOf(path)](std::string fh) { k(std::move(fh), name); });
}

void LibnfsRemote::StatByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                const std::string& path, const std::string& dir_fh,
                                const std::string& name, std::function<void(FileAttr)> deliver,
                                std::function<void()> by_path) {
  LOOKUP3args a{};
  a.what.dir = Fh3(dir_fh);
  a.what.name = const_cast<char*>(name.c_str());
  c.CallRpc(
      [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_lookup_async(rpc, cb, &a, p); },
      [this, &c, j, path, deliver, by_path](int status, void* data) {
        auto* r = NameReply<LOOKUP3res>(c, j, status, data, "LOOKUP", [&] {
          DropHandles(DirOf(path));
          by_path();
        });
        if (r == nullptr) return;
        auto attr = ReplyAttr(r->LOOKUP3res_u.resok.obj_attributes);
        if (!attr) return by_path();
        names_by_handle_++;
        if (c.Finish(j)) deliver(*attr);
      });
}

void LibnfsRemote::CreateByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                  const std::string& path, const std::string& dir_fh,
                                  const std::string& name, uint32_t mode, CreateMode how,
                                  std::function<void(FileAttr)> deliver,
                                  std::function<void()> by_path) {
  CREATE3args a{};
  a.where.dir = Fh3(dir_fh);
  a.where.name = const_cast<char*>(name.c_str());
  // GUARDED: the hub refuses an existing name (NFS3ERR_EXIST), as libnfs does for O_EXCL.
  a.how.mode = how == CreateMode::kExclusive ? GUARDED : UNCHECKED;
  sattr3& s = a.how.createhow3_u.obj_attributes;
  s.mode.set_it = 1;
  s.mode.set_mode3_u.mode = mode & 07777;
  c.CallRpc(
      [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_create_async(rpc, cb, &a, p); },
      [this, &c, j, path, deliver, by_path](int status, void* data) {
        auto* r = NameReply<CREATE3res>(c, j, status, data, "CREATE", [&] {
          DropHandles(DirOf(path));
          by_path();
        });
        if (r == nullptr) return;
        names_by_handle_++;
        if (auto attr = ReplyAttr(r->CREATE3res_u.resok.obj_attributes)) {
          if (c.Finish(j)) deliver(*attr);
          return;
        }
        // Created, but the reply has no attributes: they come from an LSTAT by path.
        StatThenFinish(c, j, Full(path), deliver);
      });
}

void LibnfsRemote::RemoveByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                  const std::string& path, const std::string& dir_fh,
                                  const std::string& name, std::function<void()> deliver,
                                  std::function<void()> by_path) {
  REMOVE3args a{};
  a.object.dir = Fh3(dir_fh);
  a.object.name = const_cast<char*>(name.c_str());
  c.CallRpc(
      [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_remove_async(rpc, cb, &a, p); },
      [this, &c, j, path, deliver, by_path](int status, void* data) {
        auto* r = NameReply<REMOVE3res>(c, j, status, data, "REMOVE", [&] {
          DropHandles(DirOf(path));
          by_path();
        });
        if (r == nullptr) return;
        names_by_handle_++;
        if (c.Finish(j)) deliver();
      });
}

namespace {

// One READDIRPLUS page's entries appended to `out` (without "." and ".."), `cookie` at the
// last one. False when the page must be listed by path instead: entries without attributes,
// and device numbers (kept in libnfs' encoding on the other path).
bool AppendPlusEntries(const entryplus3* entries, bool keep_handles, cookie3* cookie,
                       std::vector<DirEntry>* out) {
  for (const entryplus3* next = entries; next != nullptr;) {
    // libnfs' decoder lays entries out at 4-byte alignment; entryplus3 needs 8: each is
    // copied out before a field is read (UBSan: misaligned member access).
    entryplus3 e;
    std::memcpy(&e, next, sizeof e);
    next = e.nextentry;
    *cookie = e.cookie;
    if (std::strcmp(e.name, ".") == 0 || std::strcmp(e.name, "..") == 0) continue;
    if (!e.name_attributes.attributes_follow) return false;
    const fattr3& f = e.name_attributes.post_op_attr_u.attributes;
    if (f.type == NF3CHR || f.type == NF3BLK) return false;
    out->push_back(DirEntry{e.name, FromFattr3(f), {}});
    if (keep_handles && e.name_handle.handle_follows && (f.type == NF3REG || f.type == NF3DIR)) {
      const auto& h = e.name_handle.post_op_fh3_u.handle.data;
      out->back().fh.assign(h.data_val, h.data_len);
    }
  }
  return true;
}

}  // namespace

// The remote's own table records a listing's handles; an attached store (the metadata
// cache) takes them from the entries it applies.
void LibnfsRemote::RecordListedHandles(const std::string& path,
                                       const std::vector<DirEntry>& entries) {
  MutexLock lock(store_mu_);
  if (store_ != &fh_table_) return;
  for (const auto& e : entries) {
    if (!e.fh.empty()) fh_table_.Put(Joined(path, e.name.c_str()), e.fh, e.attr.file_id);
  }
}

void LibnfsRemote::ReadDirByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                   const std::string& path, const std::string& fh,
                                   std::function<void(std::vector<DirEntry>)> deliver,
                                   std::function<void()> by_path, bool keep_handles) {
  struct State {
    std::string fh;
    cookie3 cookie = 0;
    cookieverf3 verf{};
    std::vector<DirEntry> out;
  };
  auto st = std::make_shared<State>();
  st->fh = fh;
  auto page = std::make_shared<std::function<void()>>();
  *page = [this, &c, j, path, st, page, deliver, by_path, keep_handles]() {
    READDIRPLUS3args a{};
    a.dir = Fh3(st->fh);
    a.cookie = st->cookie;
    std::memcpy(a.cookieverf, st->verf, NFS3_COOKIEVERFSIZE);
    a.dircount = 64u << 10;  // name bytes per page
    a.maxcount = kMaxRead;   // reply bytes per page: the hub caps it to its own limit
    c.CallRpc(
        [&](rpc_context* rpc, auto cb, void* p) {
          return rpc_nfs3_readdirplus_async(rpc, cb, &a, p);
        },
        [this, &c, j, path, st, page, deliver, by_path, keep_handles](int status, void* data) {
          auto keep = *page;  // the chain ends unless re-armed below
          *page = nullptr;
          if (j->finished) return;
          if (status != RPC_STATUS_SUCCESS) return c.AttemptFailed(j, RpcErrno(status), Msg(data));
          auto* r = static_cast<READDIRPLUS3res*>(data);
          if (r->status == NFS3ERR_STALE || r->status == NFS3ERR_BADHANDLE ||
              r->status == NFS3ERR_BAD_COOKIE) {
            DropHandles(path);  // renamed away or replaced: its name is looked up again
            return by_path();
          }
          if (r->status != NFS3_OK) {
            return c.AttemptFailed(
                j, -ErrnoOf(r->status),
                std::string("READDIRPLUS: ") + std::strerror(ErrnoOf(r->status)));
          }
          const auto& ok = r->READDIRPLUS3res_u.resok;
          std::memcpy(st->verf, ok.cookieverf, NFS3_COOKIEVERFSIZE);
          if (!AppendPlusEntries(ok.reply.entries, keep_handles, &st->cookie, &st->out)) {
            return by_path();
          }
          if (!ok.reply.eof) {
            if (ok.reply.entries == nullptr) return by_path();  // no progress: never loop
            // Each page that arrives gives the next a whole request timeout: a directory
            // too big to list within one (200,000 entries behind a WAN) is still listed,
            // while a hub that stops answering fails the listing one timeout later.
            j->deadline = std::max(j->deadline, SteadyClock::now() + j->timeout);
            *page = keep;
            return keep();
          }
          RecordListedHandles(path, st->out);
          if (c.Finish(j)) deliver(std::move(st->out));
        });
  };
  (*page)();
}

void LibnfsRemote::ReadByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                const std::string& path, const std::string& fh, uint64_t file_id,
                                uint64_t offset, uint32_t length,
                                std::shared_ptr<CheckedReadDone> done) {
  struct State {
    std::string fh;
    std::vector<char> buf;
    FileAttr attr;
  };
  auto st = std::make_shared<State>();
  st->fh = fh;
  st->buf = TakeSpareVector(length);
  auto step = std::make_shared<std::function<void()>>();
  *step = [this, &c, j, path, file_id, offset, length, st, step, done]() {
    READ3args a{};
    a.file = Fh3(st->fh);
    a.offset = offset + st->buf.size();
    a.count = static_cast<count3>(std::min<uint64_t>(length - st->buf.size(), c.read_max()));
    c.CallRpc(
        [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_read_async(rpc, cb, &a, p); },
        [this, &c, j, path, file_id, length, st, step, done](int status, void* data) {
          auto keep = *step;  // the chain ends unless re-armed below
          *step = nullptr;
          auto* r = status == RPC_STATUS_SUCCESS ? static_cast<READ3res*>(data) : nullptr;
          if (r != nullptr && r->status == NFS3_OK) {
            read_reply_bytes_->Inc(r->READ3res_u.resok.data.data_len);
          }
          if (j->finished) return;
          if (r == nullptr) return c.AttemptFailed(j, RpcErrno(status), Msg(data));
          // A handle the hub no longer knows, or one that turns out to be another file: the
          // retry goes by path (which re-checks the name) and never delivers these bytes.
          const auto by_path = [&](const std::string& why) {
            DropHandles(path);
            c.AttemptFailed(j, -ESTALE, "READ by handle: " + why);
          };
          if (r->status == NFS3ERR_STALE || r->status == NFS3ERR_BADHANDLE) {
            return by_path("stale handle");
          }
          if (r->status != NFS3_OK) {
            return c.AttemptFailed(j, -ErrnoOf(r->status),
                                   std::string("READ: ") + std::strerror(ErrnoOf(r->status)));
          }
          const auto& ok = r->READ3res_u.resok;
          if (!ok.file_attributes.attributes_follow) return by_path("no attributes in the reply");
          st->attr = FromFattr3(ok.file_attributes.post_op_attr_u.attributes);
          if (st->attr.file_id != file_id) return by_path("another file");
          const size_t n = std::min<size_t>(ok.data.data_len, length - st->buf.size());
          st->buf.insert(st->buf.end(), ok.data.data_val, ok.data.data_val + n);
          // Short replies mid-file are continued; an empty one or EOF is the end.
          if (!ok.eof && n > 0 && st->buf.size() < length) {
            *step = keep;
            return keep();
          }
          if (!c.Finish(j)) return;
          reads_by_handle_++;
          (*done)(CheckedRead{std::move(st->buf), st->attr});
        });
  };
  (*step)();
}

}  // namespace spoke::agent

namespace spoke::agent {

namespace {

uint64_t VerifierOf(const writeverf3& v) {
  uint64_t out = 0;
  std::memcpy(&out, v, sizeof(out));
  return out;
}

}  // namespace

void LibnfsRemote::ForgetWriteHandles(const std::string& path) {
  MutexLock lock(write_fh_mu_);
  // The path and everything under it (a renamed or removed directory).
  auto it = write_fhs_.lower_bound(path);
  while (it != write_fhs_.end() && it->first.starts_with(path) &&
         (it->first.size() == path.size() || it->first[path.size()] == '/' || path.empty())) {
    it = write_fhs_.erase(it);
  }
}

void LibnfsRemote::FileHandleForWrite(NfsConnection& c, const std::string& path,
                                      std::function<void(std::string, int)> k) {
  {
    MutexLock lock(write_fh_mu_);
    if (auto it = write_fhs_.find(path); it != write_fhs_.end()) return k(it->second, 0);
  }
  auto remember = [this, path, k](std::string fh, int err) {
    if (!fh.empty()) {
      MutexLock lock(write_fh_mu_);
      if (write_fhs_.size() >= 4096) write_fhs_.clear();  // files being written: few at once
      write_fhs_[path] = fh;
    } else if (err == -ESTALE) {
      DropHandles(DirOf(path));  // the directory's remembered handle: the next try goes by path
    }
    k(std::move(fh), err);
  };
  if (auto dir = FindHandle(DirOf(path))) {
    return LookupChain(c, dir->fh, {NameOf(path)}, remember);
  }
  std::string share_root = c.RootHandle();
  if (share_root.empty()) return remember({}, -ENOTCONN);  // the connection is not mounted
  LookupChain(c, std::move(share_root), Components(root_ + "/" + path), remember);
}

void LibnfsRemote::WriteUnstableAsAsync(const Credentials& who, const std::string& path,
                                        uint64_t offset,
                                        std::shared_ptr<const std::vector<char>> data,
                                        UnstableWriteDone done) {
  auto conn = ForIdentity(who, LaneFor(path, offset));
  auto job = NewJob("WRITE", path, false, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<UnstableWriteDone>(std::move(done));
  // No reference to the connection in the job (WriteAsAsync says why).
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  job->attempt = [this, path, offset, data, shared_done](NfsConnection& c, nfs_context*,
                                                         const std::shared_ptr<NfsJob>& j) {
    UnstableWriteAttempt(c, j, path, offset, data, shared_done, false);
  };
  in_flight_->Add(1);
  conn->Submit(std::move(job));
}

void LibnfsRemote::UnstableWriteAttempt(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                        const std::string& path, uint64_t offset,
                                        std::shared_ptr<const std::vector<char>> payload,
                                        std::shared_ptr<UnstableWriteDone> done,
                                        bool looked_again) {
  FileHandleForWrite(
      c, path, [this, &c, j, path, offset, payload, done, looked_again](std::string fh, int err) {
        if (j->finished) return;
        if (fh.empty()) {
          return c.AttemptFailed(j, err, "WRITE: LOOKUP of " + path + ": " + std::strerror(-err));
        }
        // The payload in write_max() chunks, one after the other; the reply's verifier is the
        // first chunk's, or none when the hub's changed between chunks.
        struct State {
          std::string fh;
          size_t done = 0;
          UnstableWrite reply{.stable = true};
          bool first = true;
        };
        auto st = std::make_shared<State>();
        st->fh = std::move(fh);
        auto step = std::make_shared<std::function<void()>>();
        *step = [this, &c, j, path, offset, payload, done, looked_again, st, step]() {
          WRITE3args a{};
          a.file = Fh3(st->fh);
          a.offset = offset + st->done;
          a.count =
              static_cast<count3>(std::min<uint64_t>(payload->size() - st->done, c.write_max()));
          a.stable = UNSTABLE;
          a.data.data_len = a.count;
          a.data.data_val = const_cast<char*>(payload->data() + st->done);
          c.CallRpc([&](rpc_context* rpc, auto cb,
                        void* p) { return rpc_nfs3_write_async(rpc, cb, &a, p); },
                    [this, &c, j, path, offset, payload, done, looked_again, st, step](int status,
                                                                                       void* data) {
                      auto keep = *step;  // the chain ends unless re-armed below
                      *step = nullptr;
                      if (j->finished) return;
                      if (status != RPC_STATUS_SUCCESS) {
                        return c.AttemptFailed(j, RpcErrno(status), Msg(data));
                      }
                      auto* r = static_cast<WRITE3res*>(data);
                      if ((r->status == NFS3ERR_STALE || r->status == NFS3ERR_BADHANDLE) &&
                          !looked_again && st->done == 0) {
                        ForgetWriteHandles(path);
                        return UnstableWriteAttempt(c, j, path, offset, payload, done, true);
                      }
                      if (r->status != NFS3_OK) {
                        return c.AttemptFailed(
                            j, -ErrnoOf(r->status),
                            std::string("WRITE: ") + std::strerror(ErrnoOf(r->status)));
                      }
                      const auto& ok = r->WRITE3res_u.resok;
                      uint64_t verf = VerifierOf(ok.verf);
                      if (ok.committed == UNSTABLE) st->reply.stable = false;
                      if (st->first) {
                        st->reply.verifier = verf;
                        st->first = false;
                      } else if (st->reply.verifier != verf) {
                        st->reply.verifier.reset();
                        st->reply.stable = false;
                      }
                      st->done += ok.count;
                      if (ok.count == 0)
                        return c.AttemptFailed(j, -EIO, "hub accepted 0 bytes of a WRITE");
                      if (st->done < payload->size()) {
                        *step = keep;
                        return keep();
                      }
                      st->reply.count = st->done;
                      if (c.Finish(j)) (*done)(st->reply);
                    });
        };
        (*step)();
      });
}

void LibnfsRemote::CommitAsAsync(const Credentials& who, const std::string& path, CommitDone done) {
  auto conn = ForIdentity(who, LaneFor(path, 0));
  auto job = NewJob("COMMIT", path, false, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<CommitDone>(std::move(done));
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  job->attempt = [this, path, shared_done](NfsConnection& c, nfs_context*,
                                           const std::shared_ptr<NfsJob>& j) {
    CommitAttempt(c, j, path, shared_done, false);
  };
  in_flight_->Add(1);
  conn->Submit(std::move(job));
}

void LibnfsRemote::CommitAttempt(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                 const std::string& path, std::shared_ptr<CommitDone> done,
                                 bool looked_again) {
  FileHandleForWrite(c, path, [this, &c, j, path, done, looked_again](std::string fh, int err) {
    if (j->finished) return;
    if (fh.empty()) {
      return c.AttemptFailed(j, err, "COMMIT: LOOKUP of " + path + ": " + std::strerror(-err));
    }
    COMMIT3args a{};
    a.file = Fh3(fh);  // offset 0, count 0: the whole file
    c.CallRpc(
        [&](rpc_context* rpc, auto cb, void* p) { return rpc_nfs3_commit_async(rpc, cb, &a, p); },
        [this, &c, j, path, done, looked_again](int status, void* data) {
          if (j->finished) return;
          if (status != RPC_STATUS_SUCCESS) {
            return c.AttemptFailed(j, RpcErrno(status), Msg(data));
          }
          auto* r = static_cast<COMMIT3res*>(data);
          if ((r->status == NFS3ERR_STALE || r->status == NFS3ERR_BADHANDLE) && !looked_again) {
            ForgetWriteHandles(path);
            return CommitAttempt(c, j, path, done, true);
          }
          if (r->status != NFS3_OK) {
            return c.AttemptFailed(j, -ErrnoOf(r->status),
                                   std::string("COMMIT: ") + std::strerror(ErrnoOf(r->status)));
          }
          if (c.Finish(j)) (*done)(VerifierOf(r->COMMIT3res_u.resok.verf));
        });
  });
}

}  // namespace spoke::agent
