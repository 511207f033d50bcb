#define FUSE_USE_VERSION 34
#include "cache-agent/fuse/fuse_adapter.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "common/log.h"

namespace spoke::agent {
namespace {

constexpr unsigned kMaxIo = 1u << 20;

FuseAdapter* Self(fuse_req_t req) { return static_cast<FuseAdapter*>(fuse_req_userdata(req)); }

struct stat ToStat(uint64_t ino, const FileAttr& a) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
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
  fuse_reply_err(req, err);
}

// For operations whose success reply is an empty error reply.
void ReplyStatus(fuse_req_t req, const char* op, const Status& s) {
  if (!s) return ReplyError(req, op, s.error());
  fuse_reply_err(req, 0);
}

struct DirListing {
  std::vector<NamedInode> entries;
};

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

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* self = Self(req);
  auto r = self->fs().Lookup(parent, name);
  if (!r) return ReplyError(req, "lookup", r.error());
  auto e = Entry(self, r->ino, r->attr);
  fuse_reply_entry(req, &e);
}

void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto* self = Self(req);
  auto r = self->fs().GetAttr(ino);
  if (!r) return ReplyError(req, "getattr", r.error());
  auto st = ToStat(ino, *r);
  fuse_reply_attr(req, &st, self->entry_timeout());
}

timespec Now() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  auto* self = Self(req);
  SetAttrRequest s;
  if (to_set & FUSE_SET_ATTR_MODE) s.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) s.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) s.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) s.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME) s.atime = attr->st_atim;
  if (to_set & FUSE_SET_ATTR_MTIME) s.mtime = attr->st_mtim;
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) s.atime = Now();
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) s.mtime = Now();
  if (!s.mode && !s.uid && !s.gid && !s.size && !s.atime && !s.mtime) {
    return OpGetattr(req, ino, nullptr);  // e.g. ctime only
  }
  auto r = self->fs().SetAttr(ino, s);
  if (!r) return ReplyError(req, "setattr", r.error());
  auto st = ToStat(ino, *r);
  fuse_reply_attr(req, &st, self->entry_timeout());
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto r = Self(req)->fs().ReadDir(ino);
  if (!r) return ReplyError(req, "opendir", r.error());
  // A snapshot per opendir keeps offsets stable across readdir calls.
  auto* listing = new DirListing{std::move(*r)};
  fi->fh = reinterpret_cast<uint64_t>(listing);
  fi->cache_readdir = Self(req)->options().consistency == Consistency::kImmutable;
  fi->keep_cache = fi->cache_readdir;
  fuse_reply_open(req, fi);
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                   bool plus) {
  auto* self = Self(req);
  auto* listing = reinterpret_cast<DirListing*>(fi->fh);
  std::vector<char> buf(size);
  size_t pos = 0;
  size_t total = listing->entries.size() + 2;
  for (size_t i = static_cast<size_t>(off); i < total; ++i) {
    const char* name;
    struct stat st {};
    fuse_entry_param e{};
    if (i < 2) {
      name = i == 0 ? "." : "..";
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
      e.attr = st;
    } else {
      const auto& ent = listing->entries[i - 2];
      name = ent.name.c_str();
      e = Entry(self, ent.ino, ent.attr);
      st = e.attr;
    }
    size_t n = plus ? fuse_add_direntry_plus(req, buf.data() + pos, size - pos, name, &e,
                                             static_cast<off_t>(i + 1))
                    : fuse_add_direntry(req, buf.data() + pos, size - pos, name, &st,
                                        static_cast<off_t>(i + 1));
    if (n > size - pos) break;
    pos += n;
  }
  fuse_reply_buf(req, buf.data(), pos);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, true);
}
void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<DirListing*>(fi->fh);
  fuse_reply_err(req, 0);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto r = Self(req)->fs().Open(ino, fi->flags);
  if (!r) return ReplyError(req, "open", r.error());
  fi->fh = r->handle;
  fi->keep_cache = r->keep_cache;
  fi->direct_io = r->direct_io;
  fuse_reply_open(req, fi);
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  std::unique_ptr<char[]> buf(new char[size]);
  auto r = Self(req)->fs().Read(fi->fh, static_cast<uint64_t>(off), size, buf.get());
  if (!r) return ReplyError(req, "read", r.error());
  fuse_reply_buf(req, buf.get(), *r);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  (void)Self(req)->fs().Release(fi->fh);
  fuse_reply_err(req, 0);
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);  // writes are on the hub when write() returns
}

void OpFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  auto r = Self(req)->fs().Fsync(fi->fh);
  if (!r) return ReplyError(req, "fsync", r.error());
  fuse_reply_err(req, 0);
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  auto r = Self(req)->fs().Write(fi->fh, static_cast<uint64_t>(off), data, size);
  if (!r) return ReplyError(req, "write", r.error());
  fuse_reply_write(req, *r);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  auto* self = Self(req);
  auto r = self->fs().Create(parent, name, mode, fi->flags);
  if (!r) return ReplyError(req, "create", r.error());
  auto e = Entry(self, r->first.ino, r->first.attr);
  fi->fh = r->second.handle;
  fi->direct_io = r->second.direct_io;
  fuse_reply_create(req, &e, fi);
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  auto* self = Self(req);
  auto r = self->fs().Mkdir(parent, name, mode);
  if (!r) return ReplyError(req, "mkdir", r.error());
  auto e = Entry(self, r->ino, r->attr);
  fuse_reply_entry(req, &e);
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto r = Self(req)->fs().Unlink(parent, name);
  ReplyStatus(req, "unlink", r);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto r = Self(req)->fs().Rmdir(parent, name);
  ReplyStatus(req, "rmdir", r);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned flags) {
  auto r = Self(req)->fs().Rename(parent, name, newparent, newname, flags);
  ReplyStatus(req, "rename", r);
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

const fuse_lowlevel_ops& Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = OpInit;
    o.lookup = OpLookup;
    o.forget = OpForget;
    o.getattr = OpGetattr;
    o.setattr = OpSetattr;
    o.opendir = OpOpendir;
    o.readdir = OpReaddir;
    o.readdirplus = OpReaddirplus;
    o.releasedir = OpReleasedir;
    o.open = OpOpen;
    o.read = OpRead;
    o.release = OpRelease;
    o.flush = OpFlush;
    o.fsync = OpFsync;
    o.write = OpWrite;
    o.create = OpCreate;
    o.mkdir = OpMkdir;
    o.unlink = OpUnlink;
    o.rmdir = OpRmdir;
    o.rename = OpRename;
    o.statfs = OpStatfs;
    return o;
  }();
  return ops;
}

}  // namespace

FuseAdapter::FuseAdapter(VolumeFs& fs, const Options& options)
    : fs_(fs), options_(options), op_errors_(options.registry) {
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

Result<std::unique_ptr<FuseAdapter>> FuseAdapter::Mount(VolumeFs& fs, const Options& options) {
  struct stat st {};
  if (options.mountpoint.empty() || ::stat(options.mountpoint.c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode)) {
    return Fail(Code::kInvalidArgument,
                "mount point '" + options.mountpoint + "' is not an existing directory");
  }
  std::unique_ptr<FuseAdapter> a(new FuseAdapter(fs, options));
  std::string opts =
      "fsname=spoke,subtype=spoke,default_permissions,max_read=" + std::to_string(kMaxIo);
  if (options.allow_other) opts += ",allow_other";
  // Read-only volumes are not mounted "ro": the hint control file (.spoke-hints) must stay
  // writable; VolumeFs answers EROFS to every other change.
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_opt_add_arg(&args, "spoke");
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, opts.c_str());
  a->session_ = fuse_session_new(&args, &Ops(), sizeof(fuse_lowlevel_ops), a.get());
  fuse_opt_free_args(&args);
  if (a->session_ == nullptr) return Fail(Code::kIo, "fuse_session_new failed");
  if (fuse_session_mount(a->session_, options.mountpoint.c_str()) != 0) {
    fuse_session_destroy(a->session_);
    a->session_ = nullptr;
    return Fail(Code::kIo, "FUSE mount at " + options.mountpoint +
                               " failed (is /dev/fuse available and are we root?)");
  }
  FuseAdapter* self = a.get();
  a->loop_ = std::thread([self] {
    fuse_loop_config cfg{};
    cfg.clone_fd = 0;
    cfg.max_idle_threads = static_cast<unsigned>(self->options_.max_idle_threads);
    int rc = fuse_session_loop_mt(self->session_, &cfg);
    if (rc != 0) log::Debug("fuse session loop ended", {{"rc", rc}});
    self->loop_done_.store(true);
  });
  // The device of the new mount names its fusectl entry (for aborting a busy connection).
  for (int i = 0; i < 100; ++i) {
    struct stat mst {};
    if (::stat(options.mountpoint.c_str(), &mst) == 0 && mst.st_dev != st.st_dev) {
      a->dev_ = mst.st_dev;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  log::Info("volume mounted", {{"target", options.mountpoint}, {"read_only", options.read_only}});
  return a;
}

Status FuseAdapter::Unmount() {
  MutexLock lock(mu_);
  if (unmounted_ || session_ == nullptr) return Ok();
  unmounted_ = true;
  fuse_session_exit(session_);
  // As root libfuse detaches lazily (umount2 MNT_DETACH): a busy mount leaves the
  // namespace at once and goes away when its last user closes.
  fuse_session_unmount(session_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!loop_done_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!loop_done_.load() && dev_ != 0) {
    // Still in use: abort the connection so the session threads (and users) are released.
    std::string abort_path = "/sys/fs/fuse/connections/" + std::to_string(minor(dev_)) + "/abort";
    if (::access("/sys/fs/fuse/connections", F_OK) == 0 &&
        ::access(abort_path.c_str(), F_OK) != 0) {
      ::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);
    }
    std::ofstream(abort_path) << "1";
    log::Warn("FUSE session still running after unmount (busy?); connection aborted",
              {{"target", options_.mountpoint}, {"connection", abort_path}});
  }
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!loop_done_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (loop_done_.load()) {
    loop_.join();
    fuse_session_destroy(session_);
  } else {
    // Cannot happen unless the kernel keeps the connection: leak the session rather than
    // hang the caller.
    log::Error("FUSE session did not end; leaving it", {{"target", options_.mountpoint}});
    loop_.detach();
  }
  session_ = nullptr;
  log::Info("volume unmounted", {{"target", options_.mountpoint}});
  return Ok();
}

FuseAdapter::~FuseAdapter() { (void)Unmount(); }

}  // namespace spoke::agent
