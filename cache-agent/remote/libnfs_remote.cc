#include "cache-agent/remote/libnfs_remote.h"

#include <fcntl.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
// After libnfs.h, which defines the EXTERN it uses.
#include <nfsc/libnfs-raw.h>

#include <array>
#include <cmath>
#include <cstring>
#include <future>

#include "cache-agent/remote/nfs_connection.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

constexpr uint32_t kMaxRead = 1u << 20;

FileAttr FromStat(const nfs_stat_64& st) {
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

uint32_t TypeBits(uint32_t nf3_type) {
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

FileAttr FromDirent(const nfsdirent& e) {
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

const char* Msg(void* data) { return data ? static_cast<const char*>(data) : "error"; }

FileAttr FromFattr3(const fattr3& f) {
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
int ErrnoOf(nfsstat3 s) {
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
int RpcErrno(int rpc_status) { return rpc_status == RPC_STATUS_ERROR ? -EFAULT : -EINTR; }

nfs_fh3 Fh3(const std::string& fh) {
  nfs_fh3 h{};
  h.data.data_len = static_cast<u_int>(fh.size());
  h.data.data_val = const_cast<char*>(fh.data());
  return h;
}

std::string Joined(const std::string& dir, const char* name) {
  return dir.empty() ? std::string(name) : dir + "/" + name;
}

// Blocking wrapper: a promise fulfilled by the job's delivery (success) or on_error.
template <typename T>
struct Waiter {
  std::promise<Result<T>> promise;
  void Set(Result<T> r) { promise.set_value(std::move(r)); }
};

}  // namespace

Status LibnfsRemote::Config::Validate() const {
  auto bad = [](const std::string& m) { return Fail(Code::kInvalidArgument, m); };
  if (connections < 1 || connections > 64)
    return bad("connections: must be in 1..64, got " + std::to_string(connections));
  if (inflight_per_connection < 1 || inflight_per_connection > 1024) {
    return bad("inflight_per_connection: must be in 1..1024, got " +
               std::to_string(inflight_per_connection));
  }
  if (!(request_timeout_seconds >= 1 && request_timeout_seconds <= 600)) {
    return bad("request_timeout_seconds: must be in 1..600, got " +
               std::to_string(request_timeout_seconds));
  }
  if (retries < 0 || retries > kMaxRetries) {
    return bad("retries: must be in 0.." + std::to_string(kMaxRetries) + ", got " +
               std::to_string(retries));
  }
  if (uid < -1 || uid > 4294967294LL || gid < -1 || gid > 4294967294LL)
    return bad("uid/gid: must be in 0..4294967294 (or -1, the process's own)");
  if (handle_cache_size < 16) return bad("handle_cache_size: must be >= 16");
  if (max_identities < 1) return bad("max_identities: must be >= 1");
  return Ok();
}

LibnfsRemote::LibnfsRemote(const HubAddress& hub, const Config& config, metrics::Registry* registry,
                           const metrics::Labels& labels)
    : config_(config),
      hub_name_(hub.server + ":" + std::to_string(hub.nfs_port)),
      fh_table_(config.fh_table_size),
      registry_(registry),
      labels_(labels) {
  if (registry_ == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    registry_ = own_registry_.get();
  }
  in_flight_ = &registry_->GetGauge("spoke_hub_requests_in_flight",
                                    "Hub requests started and not finished", labels_);
  MutexLock lock(store_mu_);
  if (config_.fh_table_size > 0) store_ = &fh_table_;
}

void LibnfsRemote::UseHandleStore(HandleStore* store) {
  if (config_.fh_table_size == 0) return;  // by path only (strict volumes)
  MutexLock lock(store_mu_);
  store_ = store != nullptr ? store : &fh_table_;
}

std::optional<HandleStore::Entry> LibnfsRemote::FindHandle(const std::string& path) {
  MutexLock lock(store_mu_);
  if (path.empty() && !root_fh_.empty()) return HandleStore::Entry{root_fh_, 0};
  if (store_ == nullptr) return std::nullopt;
  return store_->FindHandle(path);
}

void LibnfsRemote::DropHandles(const std::string& path) {
  MutexLock lock(store_mu_);
  if (path.empty()) root_fh_.clear();
  if (store_ != nullptr) store_->DropHandles(path);
}

Result<std::unique_ptr<LibnfsRemote>> LibnfsRemote::Connect(const HubAddress& hub,
                                                            const std::string& root,
                                                            const Config& config,
                                                            metrics::Registry* registry,
                                                            const metrics::Labels& labels) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  SPOKE_RETURN_IF_ERROR(hub.Validate());  // glued into a URL
  std::unique_ptr<LibnfsRemote> r(new LibnfsRemote(hub, config, registry, labels));
  HubAddress h = hub;
  r->root_ = root.empty() ? "" : "/" + root;
  auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(config.request_timeout_seconds * 1000)));
  // libnfs' per-RPC bound: whole seconds, at least 1, about half the request bound so one
  // retry fits.
  auto rpc =
      std::chrono::milliseconds(std::max<int64_t>(1000, (timeout.count() / 2) / 1000 * 1000));
  r->hub_ = h;
  r->request_timeout_ = timeout;
  r->rpc_timeout_ = rpc;
  for (int i = 0; i < config.connections; ++i) {
    r->connections_.push_back(std::make_unique<NfsConnection>(r->BaseOptions(i)));
  }
  if (config.wait_for_mount) {
    auto deadline = SteadyClock::now() + timeout;
    bool any = false;
    for (auto& c : r->connections_) {
      if (c->WaitMounted(deadline)) {
        any = true;
        break;
      }
    }
    if (!any) {
      std::string why = r->connections_[0]->last_mount_error();
      return Fail(Code::kUnavailable,
                  "hub " + r->hub_name_ + " (" + h.share + r->root_ +
                      ") could not be mounted within " +
                      std::to_string(static_cast<int>(config.request_timeout_seconds)) + "s" +
                      (why.empty() ? "" : ": " + why));
    }
  }
  return r;
}

LibnfsRemote::~LibnfsRemote() {
  {
    std::lock_guard<std::mutex> lock(identities_mu_);
    identities_.clear();
  }
  connections_.clear();
}

NfsConnection::Options LibnfsRemote::BaseOptions(int index) const {
  NfsConnection::Options o;
  o.url = hub_.NfsUrl();
  o.root = root_;
  o.hub = hub_name_;
  o.index = index;
  o.inflight_limit = config_.inflight_per_connection;
  o.retries = config_.retries;
  o.request_timeout = request_timeout_;
  o.rpc_timeout = rpc_timeout_;
  o.handle_cache_size = config_.handle_cache_size;
  o.uid = config_.uid;
  o.gid = config_.gid;
  LibnfsRemote* self = const_cast<LibnfsRemote*>(this);
  o.on_done = [self](const char* op, double s, const Error* e) { self->Record(op, s, e); };
  return o;
}

Credentials LibnfsRemote::EffectiveIdentity(const Credentials& who) const {
  if (config_.identity_mode == Config::IdentityMode::kFixed ||
      (who.uid == 0 && !config_.allow_root)) {
    return Credentials{config_.fixed_uid, config_.fixed_gid, {}};
  }
  Credentials c = who;
  if (c.groups.size() > 16) c.groups.resize(16);  // AUTH_SYS carries at most 16
  return c;
}

size_t LibnfsRemote::IdentityConnections() const {
  std::lock_guard<std::mutex> lock(identities_mu_);
  return identities_.size();
}

std::shared_ptr<NfsConnection> LibnfsRemote::ForIdentity(const Credentials& caller) {
  Credentials who = EffectiveIdentity(caller);
  std::string key = std::to_string(who.uid) + ":" + std::to_string(who.gid);
  for (uint32_t g : who.groups) key += "," + std::to_string(g);
  std::shared_ptr<NfsConnection> evicted;  // destroyed outside the lock (joins its thread)
  std::lock_guard<std::mutex> lock(identities_mu_);
  auto it = identities_.find(key);
  if (it != identities_.end()) {
    it->second.last_use = ++identity_clock_;
    return it->second.conn;
  }
  if (identities_.size() >= config_.max_identities) {
    auto lru = identities_.end();
    for (auto i = identities_.begin(); i != identities_.end(); ++i) {
      if (i->second.conn->load() > 0) continue;
      if (lru == identities_.end() || i->second.last_use < lru->second.last_use) lru = i;
    }
    // All busy: go over the bound rather than fail a caller.
    if (lru != identities_.end()) {
      evicted = std::move(lru->second.conn);
      identities_.erase(lru);
    }
  }
  NfsConnection::Options o =
      BaseOptions(static_cast<int>(config_.connections) + static_cast<int>(identities_.size()));
  o.auth = who;
  auto conn = std::make_shared<NfsConnection>(std::move(o));
  identities_[key] = IdentityConn{conn, ++identity_clock_};
  return conn;
}

void LibnfsRemote::DirHandle(NfsConnection& c, const std::string& path,
                             std::function<void(std::string)> k) {
  if (auto e = FindHandle(path)) return k(e->fh);
  if (!path.empty()) return k({});
  std::string share_root = c.RootHandle();
  if (root_.empty() || share_root.empty()) return k(share_root);
  // The volume's directory inside the share: one LOOKUP per component, once per table.
  std::vector<std::string> parts;
  for (size_t at = 0; at < root_.size();) {
    size_t slash = root_.find('/', at);
    if (slash == std::string::npos) slash = root_.size();
    if (slash > at) parts.push_back(root_.substr(at, slash - at));
    at = slash + 1;
  }
  auto step = std::make_shared<std::function<void(size_t, std::string)>>();
  *step = [this, &c, parts, k, step](size_t i, std::string fh) {
    if (i == parts.size()) {
      if (!fh.empty()) {
        MutexLock lock(store_mu_);
        root_fh_ = fh;
      }
      *step = nullptr;
      return k(fh);
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
          if (status != RPC_STATUS_SUCCESS || r->status != NFS3_OK) return k({});  // by path
          const auto& h = r->LOOKUP3res_u.resok.object.data;
          *step = keep;
          keep(i + 1, std::string(h.data_val, h.data_len));
        });
  };
  (*step)(0, share_root);
}

void LibnfsRemote::ReadDirByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                   const std::string& path, const std::string& fh,
                                   std::function<void(std::vector<DirEntry>)> deliver,
                                   std::function<void()> by_path) {
  struct State {
    std::string fh;
    cookie3 cookie = 0;
    cookieverf3 verf{};
    std::vector<DirEntry> out;
  };
  auto st = std::make_shared<State>();
  st->fh = fh;
  auto page = std::make_shared<std::function<void()>>();
  *page = [this, &c, j, path, st, page, deliver, by_path]() {
    READDIRPLUS3args a{};
    a.dir = Fh3(st->fh);
    a.cookie = st->cookie;
    std::memcpy(a.cookieverf, st->verf, NFS3_COOKIEVERFSIZE);
    a.dircount = 64u << 10;  // name bytes per page
    a.maxcount = kMaxRead;   // reply bytes per page: the hub caps it to its own limit
    c.CallRpc([&](rpc_context* rpc, auto cb,
                  void* p) { return rpc_nfs3_readdirplus_async(rpc, cb, &a, p); },
              [this, &c, j, path, st, page, deliver, by_path](int status, void* data) {
                auto keep = *page;  // the chain ends unless re-armed below
                *page = nullptr;
                if (j->finished) return;
                if (status != RPC_STATUS_SUCCESS)
                  return c.AttemptFailed(j, RpcErrno(status), Msg(data));
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
                for (const entryplus3* next = ok.reply.entries; next != nullptr;) {
                  // libnfs' decoder lays entries out at 4-byte alignment; entryplus3 needs 8: each
                  // is copied out before a field is read (UBSan: misaligned member access).
                  entryplus3 copy;
                  std::memcpy(&copy, next, sizeof copy);
                  const entryplus3* e = &copy;
                  next = copy.nextentry;
                  st->cookie = e->cookie;
                  if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) continue;
                  // Entries without attributes, and device numbers (kept in libnfs' encoding on the
                  // other path), are listed by path.
                  if (!e->name_attributes.attributes_follow) return by_path();
                  const fattr3& f = e->name_attributes.post_op_attr_u.attributes;
                  if (f.type == NF3CHR || f.type == NF3BLK) return by_path();
                  st->out.push_back(DirEntry{e->name, FromFattr3(f), {}});
                  if (e->name_handle.handle_follows && (f.type == NF3REG || f.type == NF3DIR)) {
                    const auto& h = e->name_handle.post_op_fh3_u.handle.data;
                    st->out.back().fh.assign(h.data_val, h.data_len);
                  }
                }
                if (!ok.reply.eof) {
                  if (ok.reply.entries == nullptr) return by_path();  // no progress: never loop
                  *page = keep;
                  return keep();
                }
                {
                  // The remote's own table records them; an attached store (the metadata cache)
                  // takes them from the entries it applies.
                  MutexLock lock(store_mu_);
                  if (store_ == &fh_table_) {
                    for (const auto& e : st->out) {
                      if (!e.fh.empty())
                        fh_table_.Put(Joined(path, e.name.c_str()), e.fh, e.attr.file_id);
                    }
                  }
                }
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
  st->buf.reserve(length);
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
          if (j->finished) return;
          if (status != RPC_STATUS_SUCCESS) return c.AttemptFailed(j, RpcErrno(status), Msg(data));
          auto* r = static_cast<READ3res*>(data);
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

std::string LibnfsRemote::Full(const std::string& path) const {
  if (path.empty()) return root_.empty() ? "/" : root_;
  return root_ + "/" + path;
}

void LibnfsRemote::Record(const char* op, double seconds, const Error* error) {
  metrics::Labels l = labels_;
  l["op"] = op;
  registry_->GetHistogram("spoke_hub_request_seconds", "Hub request latency (retries included)", l)
      .Observe(seconds);
  in_flight_->Add(-1);
  if (error != nullptr) {
    l["code"] = std::string(CodeName(error->code()));
    registry_->GetCounter("spoke_hub_errors_total", "Hub requests that failed", l).Inc();
    if (error->code() == Code::kTimeout || error->code() == Code::kUnavailable) {
      reachable_.store(false);
      MutexLock lock(error_mu_);
      last_error_ = error->message();
    }
  } else if (!reachable_.load()) {
    reachable_.store(true);
    MutexLock lock(error_mu_);
    last_error_.clear();
  }
}

bool LibnfsRemote::Reachable() const { return reachable_.load(); }
std::string LibnfsRemote::LastError() const {
  MutexLock lock(error_mu_);
  return last_error_;
}

int64_t LibnfsRemote::InFlight() const {
  int64_t n = 0;
  for (const auto& c : connections_) n += c->load();
  return n;
}

NfsConnection& LibnfsRemote::LeastLoaded() {
  NfsConnection* best = nullptr;
  for (auto& c : connections_) {
    if (!c->mounted()) continue;
    if (best == nullptr || c->load() < best->load()) best = c.get();
  }
  if (best != nullptr) return *best;
  for (auto& c : connections_) {
    if (best == nullptr || c->load() < best->load()) best = c.get();
  }
  return *best;
}

NfsConnection& LibnfsRemote::ForPath(const std::string& path) {
  NfsConnection& home = *connections_[std::hash<std::string>{}(path) % connections_.size()];
  if (home.mounted() && home.load() < config_.inflight_per_connection) return home;
  return LeastLoaded();
}

void LibnfsRemote::InvalidateEverywhere(const std::string& path) {
  DropHandles(path);
  for (auto& c : connections_) c->Invalidate(path);
  // Identity connections cache handles too (writes as the caller).
  std::lock_guard<std::mutex> lock(identities_mu_);
  for (auto& [key, ic] : identities_) ic.conn->Invalidate(path);
}

namespace {

std::shared_ptr<NfsJob> NewJob(const char* op, const std::string& path, bool idempotent,
                               double timeout_s) {
  auto j = std::make_shared<NfsJob>();
  j->op = op;
  j->path = path;
  j->idempotent = idempotent;
  j->start = SteadyClock::now();
  j->deadline = j->start + std::chrono::milliseconds(std::llround(timeout_s * 1000));
  return j;
}

// Runs `job` on `conn` and waits for its delivery. `attempt` must end in deliver(value).
template <typename T>
Result<T> RunBlocking(
    NfsConnection& conn, metrics::Gauge* in_flight, std::shared_ptr<NfsJob> job,
    std::function<void(NfsConnection&, nfs_context*, const std::shared_ptr<NfsJob>&,
                       const std::function<void(T)>& deliver)>
        attempt) {
  auto waiter = std::make_shared<Waiter<T>>();
  auto fut = waiter->promise.get_future();
  auto deliver = [waiter](T v) { waiter->Set(std::move(v)); };
  job->attempt = [attempt, deliver](NfsConnection& c, nfs_context* ctx,
                                    const std::shared_ptr<NfsJob>& j) {
    attempt(c, ctx, j, deliver);
  };
  job->on_error = [waiter](const Error& e) { waiter->Set(std::unexpected(e)); };
  in_flight->Add(1);
  conn.Submit(job);
  return fut.get();
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

}  // namespace

Result<FileAttr> LibnfsRemote::Stat(const std::string& path) {
  auto job = NewJob("GETATTR", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<FileAttr>(LeastLoaded(), in_flight_, job,
                               [p](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                                   const std::function<void(FileAttr)>& deliver) {
                                 c.Call(
                                     [&](nfs_context* ctx, auto tramp, void* priv) {
                                       // LSTAT: a symbolic link's own attributes,
                                       // as FUSE's getattr and lookup expect.
                                       return nfs_lstat64_async(ctx, p.c_str(), tramp, priv);
                                     },
                                     [&c, j, deliver](int err, void* data) {
                                       if (err < 0) return c.AttemptFailed(j, err, Msg(data));
                                       FileAttr a = FromStat(*static_cast<nfs_stat_64*>(data));
                                       if (c.Finish(j)) deliver(a);
                                     });
                               });
}

Result<std::vector<DirEntry>> LibnfsRemote::ReadDir(const std::string& path) {
  auto job = NewJob("READDIRPLUS", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<std::vector<DirEntry>>(
      LeastLoaded(), in_flight_, job,
      [this, path, p](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                      const std::function<void(std::vector<DirEntry>)>& deliver) {
        // By path: libnfs looks the directory up component by component, then lists it.
        auto by_path = [&c, j, p, deliver]() {
          c.Call([&](nfs_context* ctx, auto tramp,
                     void* priv) { return nfs_opendir_async(ctx, p.c_str(), tramp, priv); },
                 [&c, j, deliver](int err, void* data) {
                   if (err < 0) return c.AttemptFailed(j, err, Msg(data));
                   auto* dir = static_cast<nfsdir*>(data);
                   std::vector<DirEntry> out;
                   // nfs_readdir/closedir never block; they take the context that produced
                   // the listing.
                   nfs_context* ctx = c.context();
                   for (nfsdirent* e = nfs_readdir(ctx, dir); e != nullptr;
                        e = nfs_readdir(ctx, dir)) {
                     if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) {
                       continue;
                     }
                     out.push_back(DirEntry{e->name, FromDirent(*e), {}});
                   }
                   nfs_closedir(ctx, dir);
                   if (c.Finish(j)) deliver(std::move(out));
                 });
        };
        if (config_.fh_table_size == 0) return by_path();  // strict: never by handle
        DirHandle(c, path, [this, &c, j, path, deliver, by_path](std::string fh) {
          if (fh.empty()) return by_path();
          ReadDirByHandle(c, j, path, fh, deliver, by_path);
        });
      });
}

void LibnfsRemote::ReadAsync(const std::string& path, uint64_t offset, uint32_t length,
                             ReadDone done) {
  if (length > kMaxRead) length = kMaxRead;
  auto job = NewJob("READ", path, true, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<ReadDone>(std::move(done));
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  std::string key = path;
  job->attempt = [key, offset, length, shared_done](NfsConnection& c, nfs_context*,
                                                    const std::shared_ptr<NfsJob>& j) {
    c.GetHandle(
        key, false,
        [&c, j, key, offset, length, shared_done](int err, const char* msg,
                                                  std::shared_ptr<NfsHandle> h) {
          if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
          // Reads larger than the hub's rsize are issued as consecutive chunks.
          auto buf = std::make_shared<std::vector<char>>();
          buf->reserve(length);
          auto step = std::make_shared<std::function<void()>>();
          *step = [&c, j, h, key, offset, length, shared_done, buf, step]() {
            uint64_t at = offset + buf->size();
            uint64_t want = std::min<uint64_t>(length - buf->size(), c.read_max());
            c.Call([&](nfs_context* ctx, auto tramp,
                       void* priv) { return nfs_pread_async(ctx, h->fh, at, want, tramp, priv); },
                   [&c, j, h, key, length, shared_done, buf, step](int err, void* data) {
                     if (err < 0) {
                       c.ReleaseHandle(h);
                       *step = nullptr;
                       // A READ of a handle whose file is gone (replaced by a rename on
                       // another node) fails with EFAULT in libnfs 4.0: the retry must
                       // open the name again.
                       c.DropHandle(key);
                       return c.AttemptFailed(j, err, Msg(data));
                     }
                     const char* bytes = static_cast<const char*>(data);
                     buf->insert(buf->end(), bytes, bytes + err);
                     // A short reply is legal mid-file (the hub may cap a READ): ask for the
                     // rest. Only an empty reply (end of file) ends a read short, so a
                     // caller never takes a short block for the file's end.
                     if (err > 0 && buf->size() < length && !j->finished) {
                       (*step)();  // more to read
                       return;
                     }
                     c.ReleaseHandle(h);
                     auto keep = *step;  // break the self-reference only after this call returns
                     *step = nullptr;
                     if (c.Finish(j)) (*shared_done)(std::move(*buf));
                   });
          };
          (*step)();
        });
  };
  in_flight_->Add(1);
  ForPath(path).Submit(job);
}

namespace {

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

// A namespace change by path, then LSTAT of `stat_path` for the attributes it delivers.
template <typename Start>
auto ChangeThenStat(Start start, std::string stat_path) {
  return [start, stat_path](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                            const std::function<void(FileAttr)>& deliver) {
    c.Call([&](nfs_context* ctx, auto tramp, void* p) { return start(ctx, tramp, p); },
           [&c, j, stat_path, deliver](int err, void* data) {
             if (err < 0) return c.AttemptFailed(j, err, Msg(data));
             c.Call([&](nfs_context* ctx, auto tramp,
                        void* p) { return nfs_lstat64_async(ctx, stat_path.c_str(), tramp, p); },
                    [&c, j, deliver](int err2, void* d2) {
                      if (err2 < 0) return c.AttemptFailed(j, err2, Msg(d2));
                      FileAttr a = FromStat(*static_cast<nfs_stat_64*>(d2));
                      if (c.Finish(j)) deliver(a);
                    });
           });
  };
}

Status ToStatus(const Result<Unit>& r) {
  SPOKE_RETURN_IF_ERROR(r);
  return Ok();
}

}  // namespace

Result<FileAttr> LibnfsRemote::StatOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("GETATTR", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<FileAttr>(conn, in_flight_, job,
                               StatCall([p](nfs_context* ctx, auto tramp, void* priv) {
                                 return nfs_lstat64_async(ctx, p.c_str(), tramp, priv);
                               }));
}

void LibnfsRemote::ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset,
                                    uint32_t length, CheckedReadDone done) {
  if (length > kMaxRead) length = kMaxRead;
  auto job = NewJob("READ", path, true, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<CheckedReadDone>(std::move(done));
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  std::string key = path;
  job->attempt = [this, key, file_id, offset, length, shared_done](
                     NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j) {
    // A listed file's short (last or only) block: one READ by the handle its listing gave
    // (the reply's attributes are checked as the GETATTR's are below). A whole block goes
    // by path: the file is big, its lookups are paid once for all its blocks, and libnfs
    // reads whole blocks into the caller's buffer, where a raw READ's reply is one more
    // copy held per request in flight.
    if (auto e = length < kMaxRead ? FindHandle(key) : std::nullopt; e && e->file_id == file_id) {
      return ReadByHandle(c, j, key, e->fh, file_id, offset, length, shared_done);
    }
    c.GetHandle(
        key, false,
        [&c, j, key, file_id, offset, length, shared_done](int err, const char* msg,
                                                           std::shared_ptr<NfsHandle> h) {
          if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
          // The READs and a GETATTR of the same handle go out together; the reply is delivered
          // when both are back, and only when the handle is the file the caller means.
          struct State {
            std::vector<char> buf;
            FileAttr attr;
            int pending = 2;
            int err = 0;
            std::string msg;
          };
          auto st = std::make_shared<State>();
          st->buf.reserve(length);
          auto part_done = [&c, j, h, key, file_id, st, shared_done]() {
            if (--st->pending > 0) return;
            c.ReleaseHandle(h);
            if (st->err < 0) {
              // A READ of a handle whose file is gone (replaced by a rename on another node)
              // fails with EFAULT in libnfs 4.0: the retry must open the name again.
              c.DropHandle(key);
              return c.AttemptFailed(j, st->err, st->msg);
            }
            if (st->attr.file_id != file_id) {
              // The cached handle (or the name) is another file now: never its bytes.
              c.DropHandle(key);
              if (j->attempts < 2) {
                return c.AttemptFailed(j, -ESTALE, "the name now refers to another file");
              }
              return c.FinishWithError(
                  j, Error::FromErrno(ESTALE, "hub " + c.hub() + ": READ of " + key +
                                                  ": the name now refers to another file (fileid " +
                                                  std::to_string(st->attr.file_id) + ", expected " +
                                                  std::to_string(file_id) + ")"));
            }
            if (c.Finish(j)) (*shared_done)(CheckedRead{std::move(st->buf), st->attr});
          };
          auto fail = [st](int e, const std::string& m) {
            if (st->err == 0 || e == -ESTALE) {  // ESTALE says the most
              st->err = e;
              st->msg = m;
            }
          };
          c.Call([&](nfs_context* ctx, auto tramp,
                     void* priv) { return nfs_fstat64_async(ctx, h->fh, tramp, priv); },
                 [st, part_done, fail](int e, void* data) {
                   if (e < 0) {
                     fail(e, Msg(data));
                   } else {
                     st->attr = FromStat(*static_cast<nfs_stat_64*>(data));
                   }
                   part_done();
                 });
          auto step = std::make_shared<std::function<void()>>();
          *step = [&c, j, h, offset, length, st, step, part_done, fail]() {
            uint64_t at = offset + st->buf.size();
            uint64_t want = std::min<uint64_t>(length - st->buf.size(), c.read_max());
            c.Call([&](nfs_context* ctx, auto tramp,
                       void* priv) { return nfs_pread_async(ctx, h->fh, at, want, tramp, priv); },
                   [j, length, st, step, part_done, fail](int e, void* data) {
                     auto keep = *step;  // the chain ends unless re-armed below
                     if (e < 0) {
                       fail(e, Msg(data));
                     } else {
                       const char* bytes = static_cast<const char*>(data);
                       st->buf.insert(st->buf.end(), bytes, bytes + e);
                       // Short replies mid-file are continued; an empty one is the end.
                       if (e > 0 && st->buf.size() < length && !j->finished && st->err == 0) {
                         (*step)();
                         return;
                       }
                     }
                     *step = nullptr;
                     part_done();
                   });
          };
          (*step)();
        });
  };
  in_flight_->Add(1);
  ForPath(path).Submit(job);
}

Result<size_t> LibnfsRemote::Write(const std::string& path, uint64_t offset, const char* data,
                                   size_t length) {
  return WriteOn(Writer(), path, offset, data, length);
}

Result<size_t> LibnfsRemote::WriteOn(NfsConnection& conn, const std::string& path, uint64_t offset,
                                     const char* data, size_t length) {
  auto job = NewJob("WRITE", path, false, config_.request_timeout_seconds);
  std::string key = path;
  // The job owns its payload: after a timeout the caller's buffer may be reused while
  // chunks are still queued on the loop.
  auto payload = std::make_shared<const std::vector<char>>(data, data + length);
  return RunBlocking<size_t>(
      conn, in_flight_, job,
      [key, offset, payload](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                             const std::function<void(size_t)>& deliver) {
        c.GetHandle(key, true,
                    [&c, j, offset, payload, deliver](int err, const char* msg,
                                                      std::shared_ptr<NfsHandle> h) {
                      if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
                      auto done = std::make_shared<size_t>(0);
                      auto step = std::make_shared<std::function<void()>>();
                      *step = [&c, j, h, offset, payload, deliver, done, step]() {
                        size_t want = std::min<size_t>(payload->size() - *done, c.write_max());
                        c.Call(
                            [&](nfs_context* ctx, auto tramp, void* priv) {
                              return nfs_pwrite_async(ctx, h->fh, offset + *done, want,
                                                      payload->data() + *done, tramp, priv);
                            },
                            [&c, j, h, payload, deliver, done, step](int err, void* d) {
                              if (err < 0) {
                                c.ReleaseHandle(h);
                                *step = nullptr;
                                return c.AttemptFailed(j, err, Msg(d));
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
      });
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
  auto r = RunBlocking<FileAttr>(
      conn, in_flight_, job,
      [p, mode, flags](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
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
              c.Call([&](nfs_context* ctx, auto tramp,
                         void* priv) { return nfs_stat64_async(ctx, p.c_str(), tramp, priv); },
                     [&c, j, deliver](int err2, void* d2) {
                       if (err2 < 0) return c.AttemptFailed(j, err2, Msg(d2));
                       FileAttr a = FromStat(*static_cast<nfs_stat_64*>(d2));
                       if (c.Finish(j)) deliver(a);
                     });
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
  auto r = RunBlocking<Unit>(conn, in_flight_, job,
                             PathCall([p](nfs_context* ctx, auto tramp, void* priv) {
                               return nfs_unlink_async(ctx, p.c_str(), tramp, priv);
                             }));
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
  auto job = NewJob("READLINK", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<std::string>(
      LeastLoaded(), in_flight_, job,
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

Status LibnfsRemote::Fsync(const std::string& path) {
  auto job = NewJob("COMMIT", path, false, config_.request_timeout_seconds);
  std::string key = path;
  auto r = RunBlocking<Unit>(
      Writer(), in_flight_, job,
      [key](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
            const std::function<void(Unit)>& deliver) {
        c.GetHandle(key, true,
                    [&c, j, deliver](int err, const char* msg, std::shared_ptr<NfsHandle> h) {
                      if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
                      c.Call([&](nfs_context* ctx, auto tramp,
                                 void* priv) { return nfs_fsync_async(ctx, h->fh, tramp, priv); },
                             [&c, j, h, deliver](int err2, void* d) {
                               c.ReleaseHandle(h);
                               if (err2 < 0) return c.AttemptFailed(j, err2, Msg(d));
                               if (c.Finish(j)) deliver(Unit{});
                             });
                    });
      });
  return ToStatus(r);
}

Result<FsStat> LibnfsRemote::StatFs() {
  auto job = NewJob("FSSTAT", "", true, config_.request_timeout_seconds);
  return RunBlocking<FsStat>(LeastLoaded(), in_flight_, job,
                             [](NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j,
                                const std::function<void(FsStat)>& deliver) {
                               c.Call(
                                   [&](nfs_context* ctx, auto tramp, void* priv) {
                                     return nfs_statvfs64_async(ctx, "/", tramp, priv);
                                   },
                                   [&c, j, deliver](int err, void* data) {
                                     if (err < 0) return c.AttemptFailed(j, err, Msg(data));
                                     auto* s = static_cast<nfs_statvfs_64*>(data);
                                     uint64_t unit = s->f_frsize ? s->f_frsize : s->f_bsize;
                                     FsStat f;
                                     f.total_bytes = s->f_blocks * unit;
                                     f.free_bytes = s->f_bfree * unit;
                                     f.avail_bytes = s->f_bavail * unit;
                                     f.total_files = s->f_files;
                                     f.free_files = s->f_ffree;
                                     if (c.Finish(j)) deliver(f);
                                   });
                             });
}

}  // namespace spoke::agent
