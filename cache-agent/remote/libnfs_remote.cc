// LibnfsRemote: the connection pool, per-caller identities, and reads. Changes to the hub are
// in libnfs_remote_changes.cc, listings and reads by file handle in libnfs_remote_handles.cc,
// the shared libnfs plumbing in libnfs_calls.h.
#include "cache-agent/remote/libnfs_remote.h"

#include <unistd.h>

#include <cstring>
#include <functional>

#include "cache-agent/remote/libnfs_calls.h"
#include "cache-agent/remote/nfs_connection.h"
#include "common/log.h"
#include "common/spare_vectors.h"

namespace spoke::agent {

using namespace libnfs_calls;  // NOLINT(google-build-using-namespace): this library's own helpers

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
  if (identity_lanes < 1 || identity_lanes > 16) {
    return bad("identity_lanes: must be in 1..16, got " + std::to_string(identity_lanes));
  }
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
  health_ = std::make_unique<HubHealth>(*registry_, labels_);
  in_flight_ = &registry_->GetGauge("spoke_hub_requests_in_flight",
                                    "Hub requests started and not finished", labels_);
  read_reply_bytes_ = &registry_->GetCounter(
      "spoke_hub_read_reply_bytes_total",
      "Data bytes of READ replies from the hub, every attempt (retries included)", labels_);
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
  // How long a connection with calls out may stay silent before it is replaced: whole
  // seconds, at least 1, about half the request bound so that a retry on a new connection
  // fits.
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
    MutexLock lock(identities_mu_);
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

bool LibnfsRemote::AsPool(const Credentials& who) const {
  const Credentials e = EffectiveIdentity(who);
  const int64_t uid = config_.uid >= 0 ? config_.uid : static_cast<int64_t>(::geteuid());
  const int64_t gid = config_.gid >= 0 ? config_.gid : static_cast<int64_t>(::getegid());
  return e.groups.empty() && e.uid == uid && e.gid == gid;
}

int LibnfsRemote::LaneFor(const std::string& path, uint64_t offset) const {
  return static_cast<int>((std::hash<std::string>{}(path) + (offset >> 20)) %
                          static_cast<size_t>(config_.identity_lanes));
}

size_t LibnfsRemote::IdentityConnections() const {
  MutexLock lock(identities_mu_);
  return identities_.size();
}

std::shared_ptr<NfsConnection> LibnfsRemote::ForIdentity(const Credentials& caller, int lane) {
  Credentials who = EffectiveIdentity(caller);
  std::string key = std::to_string(who.uid) + ":" + std::to_string(who.gid);
  for (uint32_t g : who.groups) key += "," + std::to_string(g);
  if (lane > 0) key += "#" + std::to_string(lane);
  std::shared_ptr<NfsConnection> evicted;  // destroyed outside the lock (joins its thread)
  MutexLock lock(identities_mu_);
  auto it = identities_.find(key);
  if (it != identities_.end()) {
    it->second.last_use = ++identity_clock_;
    return it->second.conn;
  }
  if (identities_.size() >= config_.max_identities) {
    auto lru = identities_.end();
    for (auto i = identities_.begin(); i != identities_.end(); ++i) {
      // Busy: jobs queued or running, or a caller holds it from this function and has not
      // submitted yet (jobs hold no reference: the table's is then the only one).
      if (i->second.conn->load() > 0 || i->second.conn.use_count() > 1) continue;
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

std::string LibnfsRemote::Full(const std::string& path) const {
  if (path.empty()) return root_.empty() ? "/" : root_;
  return root_ + "/" + path;
}

void LibnfsRemote::Record(const char* op, double seconds, const Error* error) {
  in_flight_->Add(-1);
  health_->Record(op, seconds, error);
}

bool LibnfsRemote::Reachable() const { return health_->Reachable(); }
std::string LibnfsRemote::LastError() const { return health_->LastError(); }

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
  ForgetWriteHandles(path);
  for (auto& c : connections_) c->Invalidate(path);
  // Identity connections cache handles too (writes as the caller).
  MutexLock lock(identities_mu_);
  for (auto& [key, ic] : identities_) ic.conn->Invalidate(path);
}

Result<FileAttr> LibnfsRemote::Stat(const std::string& path) { return StatOn(LeastLoaded(), path); }

Result<FileAttr> LibnfsRemote::StatAs(const Credentials& who, const std::string& path) {
  if (AsPool(who)) return Stat(path);
  auto conn = ForIdentity(who);
  return StatOn(*conn, path);
}

Result<std::vector<DirEntry>> LibnfsRemote::ReadDir(const std::string& path) {
  return ReadDirOn(LeastLoaded(), path);
}

Result<std::vector<DirEntry>> LibnfsRemote::ReadDirAs(const Credentials& who,
                                                      const std::string& path) {
  if (AsPool(who)) return ReadDir(path);
  auto conn = ForIdentity(who);
  return ReadDirOn(*conn, path);
}

Result<std::vector<DirEntry>> LibnfsRemote::ReadDirOn(NfsConnection& conn,
                                                      const std::string& path) {
  auto job = NewJob("READDIRPLUS", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  return RunBlocking<std::vector<DirEntry>>(
      conn, in_flight_, job,
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
        if (config_.fh_table_size == 0) {
          // Strict: no handle is remembered. The directory's is looked up now; its pages then
          // go by handle like the others' (each page renews the timeout: a directory too big
          // to list within one is still listed), and the entries' handles are not kept.
          return FreshDirHandle(c, path, [this, &c, j, path, deliver, by_path](std::string fh) {
            if (fh.empty()) return by_path();
            ReadDirByHandle(c, j, path, fh, deliver, by_path, /*keep_handles=*/false);
          });
        }
        DirHandle(c, path, [this, &c, j, path, deliver, by_path](std::string fh) {
          if (fh.empty()) return by_path();
          ReadDirByHandle(c, j, path, fh, deliver, by_path, /*keep_handles=*/true);
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
  job->attempt = [this, key, offset, length, shared_done](NfsConnection& c, nfs_context*,
                                                          const std::shared_ptr<NfsJob>& j) {
    c.GetHandle(
        key, false,
        [this, &c, j, key, offset, length, shared_done](int err, const char* msg,
                                                        std::shared_ptr<NfsHandle> h) {
          if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
          // Reads larger than the hub's rsize are issued as consecutive chunks.
          auto buf = std::make_shared<std::vector<char>>();
          *buf = TakeSpareVector(length);
          auto step = std::make_shared<std::function<void()>>();
          *step = [this, &c, j, h, key, offset, length, shared_done, buf, step]() {
            uint64_t at = offset + buf->size();
            uint64_t want = std::min<uint64_t>(length - buf->size(), c.read_max());
            c.Call([&](nfs_context* ctx, auto tramp,
                       void* priv) { return nfs_pread_async(ctx, h->fh, at, want, tramp, priv); },
                   [this, &c, j, h, key, length, shared_done, buf, step](int err, void* data) {
                     if (err < 0) {
                       c.ReleaseHandle(h);
                       *step = nullptr;
                       // A READ of a handle whose file is gone (replaced by a rename on
                       // another node) fails with EFAULT in libnfs 4.0: the retry must
                       // open the name again.
                       c.DropHandle(key);
                       return c.AttemptFailed(j, err, Msg(data));
                     }
                     read_reply_bytes_->Inc(static_cast<uint64_t>(err));
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

Result<FileAttr> LibnfsRemote::StatOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("GETATTR", path, true, config_.request_timeout_seconds);
  std::string p = Full(path);
  // LSTAT: a symbolic link's own attributes, as FUSE's getattr and lookup expect (a LOOKUP
  // by the directory's handle does not follow links either).
  auto lstat = StatCall([p](nfs_context* ctx, auto tramp, void* priv) {
    return nfs_lstat64_async(ctx, p.c_str(), tramp, priv);
  });
  return RunBlocking<FileAttr>(
      conn, in_flight_, job,
      [this, path, lstat](NfsConnection& c, nfs_context* ctx, const std::shared_ptr<NfsJob>& j,
                          const std::function<void(FileAttr)>& deliver) {
        auto by_path = [lstat, &c, ctx, j, deliver]() { lstat(c, ctx, j, deliver); };
        ParentHandle(c, path,
                     [this, &c, j, path, deliver, by_path](std::string fh, std::string name) {
                       if (fh.empty()) return by_path();
                       StatByHandle(c, j, path, fh, name, deliver, by_path);
                     });
      });
}

void LibnfsRemote::ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset,
                                    uint32_t length, CheckedReadDone done) {
  ReadCheckedOn(ForPath(path), path, file_id, offset, length, std::move(done));
}

void LibnfsRemote::ReadCheckedAsAsync(const Credentials& who, const std::string& path,
                                      uint64_t file_id, uint64_t offset, uint32_t length,
                                      CheckedReadDone done) {
  if (AsPool(who)) return ReadCheckedAsync(path, file_id, offset, length, std::move(done));
  // The identity's connection stays in the table while the read is in flight: an idle one
  // only is closed (ForIdentity).
  auto conn = ForIdentity(who, LaneFor(path, offset));
  ReadCheckedOn(*conn, path, file_id, offset, length, std::move(done));
}

void LibnfsRemote::ReadCheckedOn(NfsConnection& conn, const std::string& path, uint64_t file_id,
                                 uint64_t offset, uint32_t length, CheckedReadDone done) {
  if (length > kMaxRead) length = kMaxRead;
  auto job = NewJob("READ", path, true, config_.request_timeout_seconds);
  auto shared_done = std::make_shared<CheckedReadDone>(std::move(done));
  job->on_error = [shared_done](const Error& e) { (*shared_done)(std::unexpected(e)); };
  std::string key = path;
  job->attempt = [this, key, file_id, offset, length, shared_done](
                     NfsConnection& c, nfs_context*, const std::shared_ptr<NfsJob>& j) {
    // A listed file's block: one READ by the handle its listing gave (the reply's attributes
    // are checked as the GETATTR's are below). By path, every block of a file not yet open
    // on this connection waits for the open's LOOKUPs, a round trip per path component
    // (bench/RESULTS.md, "Where a shard READ's time goes").
    if (auto e = FindHandle(key); e && e->file_id == file_id) {
      return ReadByHandle(c, j, key, e->fh, file_id, offset, length, shared_done);
    }
    c.GetHandle(key, false,
                [this, &c, j, key, file_id, offset, length, shared_done](
                    int err, const char* msg, std::shared_ptr<NfsHandle> h) {
                  if (err < 0) return c.AttemptFailed(j, err, msg ? msg : "open failed");
                  ReadOpenedChecked(c, j, std::move(h), key, file_id, offset, length, shared_done);
                });
  };
  in_flight_->Add(1);
  conn.Submit(job);
}

namespace {

// One checked read's replies: the READs' bytes and the GETATTR's attributes.
struct CheckedReadState {
  std::vector<char> buf;
  FileAttr attr;
  int pending = 2;
  int err = 0;
  std::string msg;
};

// Both replies of a checked read are back: delivers the bytes when they are the whole range
// of the file the caller means, retries or fails the job otherwise.
void SettleCheckedRead(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& key,
                       uint64_t file_id, uint64_t offset, uint32_t length, CheckedReadState& st,
                       LibnfsRemote::CheckedReadDone& done) {
  if (st.err < 0) {
    // A READ of a handle whose file is gone (replaced by a rename on another node)
    // fails with EFAULT in libnfs 4.0: the retry must open the name again.
    c.DropHandle(key);
    return c.AttemptFailed(j, st.err, st.msg);
  }
  if (st.attr.file_id != file_id) {
    // The cached handle (or the name) is another file now: never its bytes.
    c.DropHandle(key);
    if (j->attempts < 2) return c.AttemptFailed(j, -ESTALE, "the name now refers to another file");
    return c.FinishWithError(
        j, Error::FromErrno(ESTALE, "hub " + c.hub() + ": READ of " + key +
                                        ": the name now refers to another file (fileid " +
                                        std::to_string(st.attr.file_id) + ", expected " +
                                        std::to_string(file_id) + ")"));
  }
  // The GETATTR and the READs are not one operation: a file truncated between them gives
  // fewer bytes than the attributes promise (its old size, its old version). Never those
  // bytes under that version: read again.
  const uint64_t promised =
      st.attr.size > offset ? std::min<uint64_t>(length, st.attr.size - offset) : 0;
  if (st.buf.size() < promised) {
    return c.AttemptFailed(j, -EAGAIN,
                           "the file changed during the read (" + std::to_string(st.buf.size()) +
                               " of " + std::to_string(promised) + " bytes)");
  }
  if (c.Finish(j)) done(LibnfsRemote::CheckedRead{std::move(st.buf), st.attr});
}

}  // namespace

// Loop thread of `c`: the READs of `h` (continued past short replies) and a GETATTR go out
// together; the reply is delivered when both are back, and only when the handle is the file
// the caller means.
void LibnfsRemote::ReadOpenedChecked(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                                     std::shared_ptr<NfsHandle> h, const std::string& key,
                                     uint64_t file_id, uint64_t offset, uint32_t length,
                                     std::shared_ptr<CheckedReadDone> shared_done) {
  auto st = std::make_shared<CheckedReadState>();
  st->buf = TakeSpareVector(length);
  auto part_done = [&c, j, h, key, file_id, offset, length, st, shared_done]() {
    if (--st->pending > 0) return;
    c.ReleaseHandle(h);
    SettleCheckedRead(c, j, key, file_id, offset, length, *st, *shared_done);
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
  *step = [this, &c, j, h, offset, length, st, step, part_done, fail]() {
    uint64_t at = offset + st->buf.size();
    uint64_t want = std::min<uint64_t>(length - st->buf.size(), c.read_max());
    c.Call([&](nfs_context* ctx, auto tramp,
               void* priv) { return nfs_pread_async(ctx, h->fh, at, want, tramp, priv); },
           [this, j, length, st, step, part_done, fail](int e, void* data) {
             auto keep = *step;  // the chain ends unless re-armed below
             if (e < 0) {
               fail(e, Msg(data));
             } else {
               read_reply_bytes_->Inc(static_cast<uint64_t>(e));
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
}

Status LibnfsRemote::Fsync(const std::string& path) { return FsyncOn(Writer(), path); }

Status LibnfsRemote::FsyncAs(const Credentials& who, const std::string& path) {
  auto conn = ForIdentity(who);
  return FsyncOn(*conn, path);
}

Status LibnfsRemote::FsyncOn(NfsConnection& conn, const std::string& path) {
  auto job = NewJob("COMMIT", path, false, config_.request_timeout_seconds);
  std::string key = path;
  auto r = RunBlocking<Unit>(
      conn, in_flight_, job,
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
