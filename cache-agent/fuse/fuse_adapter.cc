// 3.12: the loop configuration with a maximum worker count (fuse_loop_cfg_*).
#define FUSE_USE_VERSION 312
#include "cache-agent/fuse/fuse_adapter.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <unordered_map>
#include <vector>

#include "cache-agent/fuse/fuse_ops.h"
#include "common/interrupt.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

constexpr unsigned kMaxIo = 1u << 20;

FuseAdapter* Self(fuse_req_t req) { return static_cast<FuseAdapter*>(fuse_req_userdata(req)); }

void FireInterrupt(fuse_req_t, void* interrupt) { static_cast<Interrupt*>(interrupt)->Fire(); }

// Runs `serve` (an operation that changes nothing on the hub) with the request's FUSE INTERRUPT
// honoured: a process that gets a signal while it waits on the hub is answered EINTR at once
// instead of at the hub's bound (common/interrupt.h). libfuse calls FireInterrupt under the
// request's lock, which the unregistering call takes: once it returns, nothing refers to
// `interrupt` any more, and the reply may free the request.
template <typename Serve>
auto Interruptible(fuse_req_t req, Serve serve) {
  Interrupt interrupt;
  fuse_req_interrupt_func(req, FireInterrupt, &interrupt);
  auto result = [&] {
    InterruptScope scope(&interrupt);
    return serve();
  }();
  fuse_req_interrupt_func(req, nullptr, nullptr);
  return result;
}

struct stat ToStat(uint64_t ino, const FileAttr& a) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_rdev = static_cast<dev_t>(a.rdev);
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.used ? a.used : a.size) / 512);
  st.st_blksize = kMaxIo;
  st.st_atim = a.atime;
  st.st_mtim = a.mtime;
  st.st_ctim = a.ctime;
  return st;
}

fuse_entry_param Entry(FuseAdapter* self, uint64_t ino, const FileAttr& a) {
  fuse_entry_param e{};
  e.ino = ino;
  e.generation = 1;
  e.attr = ToStat(ino, a);
  e.attr_timeout = self->entry_timeout();
  e.entry_timeout = self->entry_timeout();
  return e;
}

// Every error reply goes through here: counted per operation, never answered as success.
void ReplyError(fuse_req_t req, const char* op, const Error& e) {
  int err = Self(req)->op_errors().Count(op, e);
  if (err == EIO) log::Warn("I/O error", {{"op", op}, {"error", e.ToString()}});
  // The kernel named an inode this agent no longer has: never the hub's answer, always worth
  // a line (the kernel still held it, or its number was given out again).
  if (err == ENOENT && e.message().starts_with("unknown inode")) {
    log::Warn("ENOENT for an inode the kernel holds", {{"op", op}, {"error", e.ToString()}});
  }
  fuse_reply_err(req, err);
}

// Every entry reply hands the kernel one reference on the inode (VolumeFs counted it with the
// answer). A reply the kernel does not take (the request was interrupted: ENOENT) takes none.
void ReplyEntry(fuse_req_t req, const fuse_entry_param& e) {
  FuseAdapter* self = Self(req);  // a reply frees `req`
  if (fuse_reply_entry(req, &e) != 0) self->fs().Forget(e.ino, 1);
}

// For operations whose success reply is an empty error reply.
void ReplyStatus(fuse_req_t req, const char* op, const Status& s) {
  if (!s) return ReplyError(req, op, s.error());
  fuse_reply_err(req, 0);
}

struct DirListing {
  Listing entries;  // shared with the other opendirs of the same listing
};

uint64_t WallClockMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

struct FuseAdapter::DirListings {
  Mutex mu;
  uint64_t next_id GUARDED_BY(mu) = WallClockMicros();
  std::unordered_map<uint64_t, std::shared_ptr<DirListing>> map GUARDED_BY(mu);

  uint64_t Add(std::shared_ptr<DirListing> l) EXCLUDES(mu) {
    MutexLock lock(mu);
    uint64_t id = next_id++;
    map[id] = std::move(l);
    return id;
  }
  std::shared_ptr<DirListing> Find(uint64_t id) EXCLUDES(mu) {
    MutexLock lock(mu);
    auto it = map.find(id);
    return it == map.end() ? nullptr : it->second;
  }
  // An opendir of an earlier agent: list again and keep it under the kernel's id.
  std::shared_ptr<DirListing> Rebuild(uint64_t id, Listing entries) EXCLUDES(mu) {
    MutexLock lock(mu);
    auto& slot = map[id];
    if (!slot) slot = std::make_shared<DirListing>(DirListing{std::move(entries)});
    return slot;
  }
  void Remove(uint64_t id) EXCLUDES(mu) {
    MutexLock lock(mu);
    map.erase(id);
  }
};

namespace {

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto* self = static_cast<FuseAdapter*>(userdata);
  conn->max_write = kMaxIo;
  conn->max_read = kMaxIo;
  conn->max_readahead = kMaxIo;
  conn->max_background = 64;  // kernel readahead requests in flight
  conn->congestion_threshold = 48;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;  // always plus: attributes are free here
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  // Writes are acknowledged only when the hub has them: no writeback cache.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  if (self->options().consistency != Consistency::kImmutable) {
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  }
}

// The process behind a request, as the hub should see it (AUTH_SYS): every request that may
// reach the hub carries it, lookups and reads too. Supplementary groups come from /proc
// (fuse_req_getgroups): a file readable through one of them must be readable on the hub.
std::vector<uint32_t> CallerGroups(fuse_req_t req) {
  gid_t groups[32];
  int n = fuse_req_getgroups(req, 32, groups);
  if (n <= 0) return {};
  return std::vector<uint32_t>(groups, groups + std::min(n, 32));
}

Credentials CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Credentials{ctx->uid, ctx->gid, CallerGroups(req)};
}

// The caller of a lookup, getattr or listing, which the cache mostly answers: its groups are
// read only if the request goes to the hub.
Caller LazyCaller(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Caller(ctx->uid, ctx->gid, [req] { return CallerGroups(req); });
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* self = Self(req);
  const Caller who = LazyCaller(req);
  auto r = Interruptible(req, [&] { return self->fs().Lookup(parent, name, who); });
  if (!r) return ReplyError(req, "lookup", r.error());
  ReplyEntry(req, Entry(self, r->ino, r->attr));
}

// The kernel returns references (its lookup count) when it drops an inode.
void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Self(req)->fs().Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  auto& fs = Self(req)->fs();
  for (size_t i = 0; i < count; ++i) fs.Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto* self = Self(req);
  const Caller who = LazyCaller(req);
  auto r = Interruptible(req, [&] { return self->fs().GetAttr(ino, who); });
  if (!r) return ReplyError(req, "getattr", r.error());
  auto st = ToStat(ino, *r);
  fuse_reply_attr(req, &st, self->entry_timeout());
}

bool Modifies(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  auto* self = Self(req);
  SetAttrRequest s;
  if (to_set & FUSE_SET_ATTR_MODE) s.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) s.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) s.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) s.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME) s.atime = attr->st_atim;
  if (to_set & FUSE_SET_ATTR_MTIME) s.mtime = attr->st_mtim;
  // The hub's clock, not ours (SET_TO_SERVER_TIME), as for a kernel NFS client.
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) s.atime = timespec{0, UTIME_NOW};
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) s.mtime = timespec{0, UTIME_NOW};
  if (!s.mode && !s.uid && !s.gid && !s.size && !s.atime && !s.mtime) {
    return OpGetattr(req, ino, nullptr);  // e.g. ctime only
  }
  auto r = self->fs().SetAttr(ino, s, CallerOf(req));
  if (!r) return ReplyError(req, "setattr", r.error());
  auto st = ToStat(ino, *r);
  fuse_reply_attr(req, &st, self->entry_timeout());
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const Caller who = LazyCaller(req);
  auto r = Interruptible(req, [&] { return Self(req)->fs().ReadDir(ino, who); });
  if (!r) return ReplyError(req, "opendir", r.error());
  // A snapshot per opendir keeps offsets stable across readdir calls.
  fi->fh = Self(req)->dirs_->Add(std::make_shared<DirListing>(DirListing{std::move(*r)}));
  fi->cache_readdir = Self(req)->options().consistency == Consistency::kImmutable;
  fi->keep_cache = fi->cache_readdir;
  fuse_reply_open(req, fi);
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                   bool plus) {
  auto* self = Self(req);
  auto listing = self->dirs_->Find(fi->fh);
  if (listing == nullptr) {
    const Caller who = LazyCaller(req);
    auto r = Interruptible(req, [&] { return self->fs().ReadDir(ino, who); });
    if (!r) return ReplyError(req, plus ? "readdirplus" : "readdir", r.error());
    listing = self->dirs_->Rebuild(fi->fh, std::move(*r));
  }
  std::vector<char> buf(size);
  size_t pos = 0;
  size_t total = listing->entries.size() + 2;
  std::vector<fuse_ino_t> held;  // readdirplus: the entries that hand the kernel a reference
  for (size_t i = static_cast<size_t>(off); i < total; ++i) {
    const char* name;
    struct stat st {};
    fuse_entry_param e{};
    bool hold = false;
    if (i < 2) {
      name = i == 0 ? "." : "..";  // e.ino 0: the kernel takes no reference for these
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
      e.attr = st;
    } else {
      const auto& ent = listing->entries[i - 2];
      name = ent.name.c_str();
      e = Entry(self, ent.ino, ent.attr);
      st = e.attr;
      // The listing is a snapshot: an inode forgotten since is sent without a node id (a
      // plain entry), never as a number this agent no longer knows.
      if (plus && !(hold = self->fs().AddKernelRef(ent.ino))) e.ino = 0;
    }
    size_t n = plus ? fuse_add_direntry_plus(req, buf.data() + pos, size - pos, name, &e,
                                             static_cast<off_t>(i + 1))
                    : fuse_add_direntry(req, buf.data() + pos, size - pos, name, &st,
                                        static_cast<off_t>(i + 1));
    if (n > size - pos) {
      if (hold) self->fs().Forget(e.ino, 1);  // not sent
      break;
    }
    pos += n;
    if (hold) held.push_back(e.ino);
  }
  if (fuse_reply_buf(req, buf.data(), pos) != 0) {
    for (fuse_ino_t h : held) self->fs().Forget(h, 1);  // the kernel did not take the reply
  }
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, true);
}
void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Self(req)->dirs_->Remove(fi->fh);
  fuse_reply_err(req, 0);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const Credentials who = CallerOf(req);  // reads of the handle go as the opener too
  FuseAdapter* self = Self(req);          // a reply frees `req`
  auto open = [&] { return self->fs().Open(ino, fi->flags, who); };
  auto r = Modifies(fi->flags) ? open() : Interruptible(req, open);
  if (!r) return ReplyError(req, "open", r.error());
  // An earlier agent's size of the file must not bound what this open reads.
  if (r->kernel_attrs_stale) self->InvalidateKernelAttrs(ino);
  fi->fh = r->handle;
  fi->keep_cache = r->keep_cache;
  fi->direct_io = r->direct_io;
  fi->noflush = r->flush ? 0 : 1;  // see the note at the flush handler in Ops()
  // Interrupted: the kernel never learns the handle (no RELEASE comes), which would keep the
  // inode for good.
  if (fuse_reply_open(req, fi) != 0) (void)self->fs().Release(fi->fh);
}

// A handle issued by an earlier agent is reopened from the node id and the flags it encodes.
bool EnsureHandle(fuse_req_t req, const char* op, fuse_ino_t ino, fuse_file_info* fi) {
  auto s = Self(req)->fs().EnsureHandle(fi->fh, ino);
  if (!s) ReplyError(req, op, s.error());
  return s.has_value();
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  if (!EnsureHandle(req, "read", ino, fi)) return;
  // The reply gathers the bytes from the cached blocks themselves: no buffer per request (a
  // 16 MiB kernel read-ahead keeps many requests out at once) and no copy into one.
  auto r = Interruptible(
      req, [&] { return Self(req)->fs().ReadPieces(fi->fh, static_cast<uint64_t>(off), size); });
  if (!r) return ReplyError(req, "read", r.error());
  std::vector<iovec> iov;
  iov.reserve(r->size());
  for (const auto& p : *r) {
    iov.push_back(iovec{const_cast<char*>(p.block->data()) + p.offset, p.length});
  }
  if (iov.empty()) {
    fuse_reply_buf(req, nullptr, 0);
  } else {
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  }
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  (void)Self(req)->fs().Release(fi->fh);
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info* fi) {
  if (!EnsureHandle(req, "fsync", ino, fi)) return;
  auto r = Self(req)->fs().Fsync(fi->fh);
  if (!r) return ReplyError(req, "fsync", r.error());
  fuse_reply_err(req, 0);
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (!EnsureHandle(req, "flush", ino, fi)) return;
  auto r = Self(req)->fs().Flush(fi->fh);
  if (!r) return ReplyError(req, "flush", r.error());
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  auto r = Self(req)->fs().FsyncDir(ino);
  if (!r) return ReplyError(req, "fsyncdir", r.error());
  fuse_reply_err(req, 0);
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  if (!EnsureHandle(req, "write", ino, fi)) return;
  auto r = Self(req)->fs().Write(fi->fh, static_cast<uint64_t>(off), data, size,
                                 fuse::SessionIo::CurrentRequestIsResent());
  if (!r) return ReplyError(req, "write", r.error());
  fuse_reply_write(req, *r);
}

// A request the kernel resent after a takeover that failed as it fails once done: the earlier
// agent may have carried it out on the hub before it died (VolumeFs::*Before).
bool ResentAndFailedAs(const Error& e, Code code) {
  return e.code() == code && fuse::SessionIo::CurrentRequestIsResent();
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  auto* self = Self(req);
  auto r = self->fs().Create(parent, name, mode, fi->flags, CallerOf(req));
  if (!r && (fi->flags & O_EXCL) && ResentAndFailedAs(r.error(), Code::kAlreadyExists)) {
    // The earlier agent's exclusive create: open what it made (never truncated again).
    if (auto made = self->fs().MadeBefore(parent, name, S_IFREG, CallerOf(req)); made) {
      auto opened =
          self->fs().Open(made->ino, fi->flags & ~(O_CREAT | O_EXCL | O_TRUNC), CallerOf(req));
      if (opened) {
        r = std::make_pair(*made, *opened);
      } else {
        self->fs().Forget(made->ino, 1);
      }
    }
  }
  if (!r) return ReplyError(req, "create", r.error());
  auto e = Entry(self, r->first.ino, r->first.attr);
  fi->fh = r->second.handle;
  fi->direct_io = r->second.direct_io;
  fi->noflush = r->second.flush ? 0 : 1;
  if (fuse_reply_create(req, &e, fi) != 0) {
    // Interrupted: the kernel took neither the reference nor the handle.
    self->fs().Forget(e.ino, 1);
    (void)self->fs().Release(fi->fh);
  }
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  auto* self = Self(req);
  auto r = self->fs().Mkdir(parent, name, mode, CallerOf(req));
  if (!r && ResentAndFailedAs(r.error(), Code::kAlreadyExists)) {
    if (auto made = self->fs().MadeBefore(parent, name, S_IFDIR, CallerOf(req))) r = made;
  }
  if (!r) return ReplyError(req, "mkdir", r.error());
  ReplyEntry(req, Entry(self, r->ino, r->attr));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const Credentials who = CallerOf(req);
  auto r = Self(req)->fs().Unlink(parent, name, who);
  if (!r && ResentAndFailedAs(r.error(), Code::kNotFound) &&
      Self(req)->fs().RemovedBefore(parent, name, who)) {
    r = Ok();
  }
  ReplyStatus(req, "unlink", r);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const Credentials who = CallerOf(req);
  auto r = Self(req)->fs().Rmdir(parent, name, who);
  if (!r && ResentAndFailedAs(r.error(), Code::kNotFound) &&
      Self(req)->fs().RemovedBefore(parent, name, who)) {
    r = Ok();
  }
  ReplyStatus(req, "rmdir", r);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned flags) {
  const Credentials who = CallerOf(req);
  auto r = Self(req)->fs().Rename(parent, name, newparent, newname, flags, who);
  if (!r && ResentAndFailedAs(r.error(), Code::kNotFound) &&
      Self(req)->fs().RenamedBefore(parent, name, newparent, newname, who)) {
    r = Ok();
  }
  ReplyStatus(req, "rename", r);
}

void OpSymlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  auto* self = Self(req);
  auto r = self->fs().Symlink(parent, name, target, CallerOf(req));
  if (!r && ResentAndFailedAs(r.error(), Code::kAlreadyExists)) {
    if (auto made = self->fs().MadeBefore(parent, name, S_IFLNK, CallerOf(req), target)) r = made;
  }
  if (!r) return ReplyError(req, "symlink", r.error());
  ReplyEntry(req, Entry(self, r->ino, r->attr));
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  const Caller who = LazyCaller(req);
  auto r = Interruptible(req, [&] { return Self(req)->fs().ReadLink(ino, who); });
  if (!r) return ReplyError(req, "readlink", r.error());
  fuse_reply_readlink(req, r->c_str());
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  auto* self = Self(req);
  const Credentials who = CallerOf(req);
  auto r = self->fs().Link(ino, newparent, newname, who);
  if (!r && ResentAndFailedAs(r.error(), Code::kAlreadyExists)) {
    if (auto made = self->fs().LinkedBefore(ino, newparent, newname, who)) r = made;
  }
  if (!r) return ReplyError(req, "link", r.error());
  ReplyEntry(req, Entry(self, r->ino, r->attr));
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  auto* self = Self(req);
  auto r = self->fs().Mknod(parent, name, mode, rdev, CallerOf(req));
  if (!r && ResentAndFailedAs(r.error(), Code::kAlreadyExists)) {
    if (auto made = self->fs().MadeBefore(parent, name, mode, CallerOf(req))) r = made;
  }
  if (!r) return ReplyError(req, "mknod", r.error());
  ReplyEntry(req, Entry(self, r->ino, r->attr));
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  auto r = Self(req)->fs().StatFs();
  if (!r) return ReplyError(req, "statfs", r.error());
  struct statvfs s {};
  constexpr uint64_t kUnit = 4096;
  s.f_bsize = kMaxIo;
  s.f_frsize = kUnit;
  s.f_blocks = r->total_bytes / kUnit;
  s.f_bfree = r->free_bytes / kUnit;
  s.f_bavail = r->avail_bytes / kUnit;
  s.f_files = r->total_files;
  s.f_ffree = r->free_files;
  s.f_favail = r->free_files;
  s.f_namemax = 255;
  fuse_reply_statfs(req, &s);
}

}  // namespace

namespace fuse_ops {

std::string SessionOptions(const FuseAdapter::Options& options) {
  std::string opts =
      "fsname=spoke,subtype=spoke,default_permissions,max_read=" + std::to_string(kMaxIo);
  if (options.allow_other) opts += ",allow_other";
  return opts;
}

const fuse_lowlevel_ops& Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = OpInit;
    o.lookup = OpLookup;
    o.forget = OpForget;
    o.forget_multi = OpForgetMulti;
    o.getattr = OpGetattr;
    o.setattr = OpSetattr;
    o.opendir = OpOpendir;
    o.readdir = OpReaddir;
    o.readdirplus = OpReaddirplus;
    o.releasedir = OpReleasedir;
    o.open = OpOpen;
    o.read = OpRead;
    o.release = OpRelease;
    // Only a writable handle of a write-back volume has anything to flush (its held writes,
    // which close() waits for as on a kernel NFS mount); every other open answers
    // FOPEN_NOFLUSH (kernels 5.16+), so its close() never waits for the agent, also while it
    // restarts; that matters to any process that forks and execs with a file of the mount
    // open (exec closes it).
    o.flush = OpFlush;
    o.fsync = OpFsync;
    o.fsyncdir = OpFsyncdir;
    o.write = OpWrite;
    o.create = OpCreate;
    o.mkdir = OpMkdir;
    o.unlink = OpUnlink;
    o.rmdir = OpRmdir;
    o.rename = OpRename;
    o.statfs = OpStatfs;
    o.symlink = OpSymlink;
    o.readlink = OpReadlink;
    o.link = OpLink;
    o.mknod = OpMknod;
    return o;
  }();
  return ops;
}

}  // namespace fuse_ops

FuseAdapter::FuseAdapter(VolumeFs& fs, const Options& options)
    : fs_(fs),
      options_(options),
      op_errors_(options.registry),
      dirs_(std::make_unique<DirListings>()) {
  switch (options.consistency) {
    case Consistency::kImmutable:
      entry_timeout_ = 3600;
      break;
    case Consistency::kTtl:
      entry_timeout_ = options.ttl_seconds;
      break;
    case Consistency::kStrict:
      entry_timeout_ = 0;
      break;
  }
}

FuseAdapter::~FuseAdapter() { (void)Unmount(); }

}  // namespace spoke::agent
