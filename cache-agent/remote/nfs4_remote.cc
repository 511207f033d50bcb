#include "cache-agent/remote/nfs4_remote.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>
#include <utility>

#include "common/interrupt.h"
#include "spoke_nfs4.h"

namespace spoke::agent {

namespace {

using SteadyClock = std::chrono::steady_clock;

uint32_t TypeBits(uint32_t nfs_type) {
  switch (nfs_type) {
    case 2:
      return S_IFDIR;
    case 3:
      return S_IFBLK;
    case 4:
      return S_IFCHR;
    case 5:
      return S_IFLNK;
    case 6:
      return S_IFSOCK;
    case 7:
      return S_IFIFO;
    default:
      return S_IFREG;
  }
}

FileAttr ToFileAttr(const spoke_nfs4_attr& a) {
  FileAttr f;
  f.file_id = a.fileid;
  f.fsid = a.fsid;
  f.mode = TypeBits(a.type) | (a.mode & 07777);
  f.nlink = a.nlink;
  f.uid = a.uid;
  f.gid = a.gid;
  f.size = a.size;
  f.used = a.used;
  f.rdev = makedev(a.rdev_major, a.rdev_minor);
  f.atime = {static_cast<time_t>(a.atime_sec), static_cast<long>(a.atime_nsec)};
  f.mtime = {static_cast<time_t>(a.mtime_sec), static_cast<long>(a.mtime_nsec)};
  f.ctime = {static_cast<time_t>(a.ctime_sec), static_cast<long>(a.ctime_nsec)};
  return f;
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::string Joined(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// The C callback: copies the reply out (it is valid only during the call) and hands it on.
struct Pending {
  std::function<void(Nfs4Remote::Reply)> done;
};

void OnReply(void* ctx, const spoke_nfs4_reply* r) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(ctx));
  Nfs4Remote::Reply out;
  out.error = r->error;
  out.message = r->message != nullptr ? r->message : "";
  if (r->has_attr != 0) out.attr = ToFileAttr(r->attr);
  if (r->fh != nullptr) out.fh.assign(reinterpret_cast<const char*>(r->fh), r->fh_len);
  if (r->data != nullptr) out.data.assign(r->data, r->data + r->data_len);
  out.count = r->count;
  out.entries.reserve(r->entry_count);
  for (size_t i = 0; i < r->entry_count; ++i) {
    const spoke_nfs4_entry& e = r->entries[i];
    DirEntry d;
    d.name = e.name;
    if (e.has_attr != 0) d.attr = ToFileAttr(e.attr);
    if (e.fh != nullptr) d.fh.assign(reinterpret_cast<const char*>(e.fh), e.fh_len);
    out.entries.push_back(std::move(d));
  }
  out.fsstat = FsStat{r->total_bytes, r->free_bytes, r->avail_bytes, r->total_files, r->free_files};
  p->done(std::move(out));
}

// Out of line: GCC 12 reports a false -Wmaybe-uninitialized when this is inlined into the
// read's callback.
[[gnu::noinline]] void DeliverData(const RemoteFs::ReadDone& done,
                                   Result<RemoteFs::CheckedRead>& r) {
  if (!r) return done(std::unexpected(r.error()));
  done(std::move(r->data));
}

}  // namespace

// One spoke-nfs4 client (one AUTH_SYS identity); freed (unmounted) when the last user goes.
class Nfs4Remote::Client {
 public:
  explicit Client(spoke_nfs4_client* c) : c_(c) {}
  ~Client() { spoke_nfs4_free(c_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  spoke_nfs4_client* get() const { return c_; }

 private:
  spoke_nfs4_client* const c_;
};

Nfs4Remote::Nfs4Remote(const HubAddress& hub, const std::string& root, const Config& config,
                       metrics::Registry* registry, const metrics::Labels& labels)
    : config_(config),
      hub_(hub),
      root_(root),
      hub_name_(hub.server + ":" + std::to_string(hub.nfs_port)),
      deadline_ms_(static_cast<uint32_t>(std::llround(config.request_timeout_seconds * 1000))),
      registry_(registry),
      labels_(labels),
      own_handles_(config.fh_table_size) {
  if (registry_ == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    registry_ = own_registry_.get();
  }
  read_reply_bytes_ = &registry_->GetCounter(
      "spoke_hub_read_reply_bytes_total",
      "Data bytes of READ replies from the hub, every attempt (retries included)", labels_);
  health_ = std::make_unique<HubHealth>(*registry_, labels_);
  MutexLock lock(store_mu_);
  if (config_.fh_table_size > 0) store_ = &own_handles_;
}

std::string Nfs4Remote::UrlFor(uint32_t uid, uint32_t gid) const {
  std::string path = hub_.share == "/" ? "" : hub_.share;
  if (!root_.empty()) path += "/" + root_;
  if (path.empty()) path = "/";
  return "nfs://" + hub_.server + path + "?version=" + std::string(ToString(hub_.nfs_version)) +
         "&nfsport=" + std::to_string(hub_.nfs_port) + "&uid=" + std::to_string(uid) +
         "&gid=" + std::to_string(gid) + "&noresvport=true";
}

Result<std::unique_ptr<Nfs4Remote>> Nfs4Remote::Connect(const HubAddress& hub,
                                                        const std::string& root,
                                                        const Config& config,
                                                        metrics::Registry* registry,
                                                        const metrics::Labels& labels) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  SPOKE_RETURN_IF_ERROR(hub.Validate());  // glued into a URL
  if (hub.nfs_version == NfsVersion::kV3) {
    return Fail(Code::kInvalidArgument, "Nfs4Remote: the hub address asks for NFSv3");
  }
  std::unique_ptr<Nfs4Remote> r(new Nfs4Remote(hub, root, config, registry, labels));
  const uint32_t uid = config.uid >= 0 ? static_cast<uint32_t>(config.uid) : ::geteuid();
  const uint32_t gid = config.gid >= 0 ? static_cast<uint32_t>(config.gid) : ::getegid();
  char why[512] = {0};
  spoke_nfs4_client* c = spoke_nfs4_connect(r->UrlFor(uid, gid).c_str(), r->deadline_ms_,
                                            config.wait_for_mount ? 1 : 0, why, sizeof why);
  if (c == nullptr) {
    return Fail(Code::kUnavailable, "hub " + r->hub_name_ + " (" + hub.share +
                                        (root.empty() ? "" : "/" + root) + ", NFSv" +
                                        std::string(ToString(hub.nfs_version)) +
                                        ") could not be mounted within " +
                                        std::to_string(r->deadline_ms_ / 1000) + "s: " + why);
  }
  r->own_.push_back(std::make_shared<Client>(c));
  // The others mount in the background; a call on one waits for it within its bound.
  for (int i = 1; i < config.connections; ++i) {
    spoke_nfs4_client* more =
        spoke_nfs4_connect(r->UrlFor(uid, gid).c_str(), r->deadline_ms_, 0, why, sizeof why);
    if (more != nullptr) r->own_.push_back(std::make_shared<Client>(more));
  }
  return r;
}

Nfs4Remote::~Nfs4Remote() {
  {
    // Every call answers within the request timeout (the library's bound): wait for them,
    // since their callbacks use this object.
    MutexLock lock(calls_mu_);
    calls_cv_.wait(lock, [this]() NO_THREAD_SAFETY_ANALYSIS { return calls_ == 0; });
  }
  MutexLock lock(identities_mu_);
  identities_.clear();
}

Credentials Nfs4Remote::EffectiveIdentity(const Credentials& who) const {
  if (config_.identity_mode == Config::IdentityMode::kFixed ||
      (who.uid == 0 && !config_.allow_root)) {
    return Credentials{config_.fixed_uid, config_.fixed_gid, {}};
  }
  return Credentials{who.uid, who.gid, {}};  // no supplementary groups over this client
}

bool Nfs4Remote::ActsAsSelf(const Credentials& who) const {
  const Credentials e = EffectiveIdentity(who);
  const int64_t uid = config_.uid >= 0 ? config_.uid : static_cast<int64_t>(::geteuid());
  const int64_t gid = config_.gid >= 0 ? config_.gid : static_cast<int64_t>(::getegid());
  return e.uid == uid && e.gid == gid;
}

std::shared_ptr<Nfs4Remote::Client> Nfs4Remote::OwnFor(const std::string& path) const {
  return own_[std::hash<std::string>{}(path) % own_.size()];
}

Result<std::shared_ptr<Nfs4Remote::Client>> Nfs4Remote::ClientFor(const Credentials& caller) {
  if (ActsAsSelf(caller)) return Own();
  const Credentials who = EffectiveIdentity(caller);
  const auto key = std::make_pair(who.uid, who.gid);
  std::shared_ptr<Client> evicted;  // unmounted outside the lock
  MutexLock lock(identities_mu_);
  auto it = identities_.find(key);
  if (it != identities_.end()) {
    it->second.last_used = ++identity_clock_;
    return it->second.client;
  }
  if (identities_.size() >= config_.max_identities) {
    auto oldest = identities_.end();
    for (auto i = identities_.begin(); i != identities_.end(); ++i) {
      if (i->second.client.use_count() > 1) continue;  // a call holds it
      if (oldest == identities_.end() || i->second.last_used < oldest->second.last_used) oldest = i;
    }
    if (oldest != identities_.end()) {
      evicted = std::move(oldest->second.client);
      identities_.erase(oldest);
    }
  }
  // Made without waiting for the mount: the first call waits for it within its bound.
  char why[512] = {0};
  spoke_nfs4_client* c =
      spoke_nfs4_connect(UrlFor(who.uid, who.gid).c_str(), deadline_ms_, 0, why, sizeof why);
  if (c == nullptr) return Fail(Code::kUnavailable, std::string("hub ") + hub_name_ + ": " + why);
  auto client = std::make_shared<Client>(c);
  identities_[key] = IdentityClient{client, ++identity_clock_};
  lock.unlock();
  evicted.reset();
  return client;
}

size_t Nfs4Remote::IdentityClients() const {
  MutexLock lock(identities_mu_);
  return identities_.size();
}

uint64_t Nfs4Remote::Reconnects() const {
  uint64_t n = 0;
  for (const auto& c : own_) n += spoke_nfs4_reconnects(c->get());
  return n;
}

void Nfs4Remote::Start(const std::shared_ptr<Client>& client, const char* op,
                       const std::function<void(void* ctx)>& start, ReplyDone done) {
  {
    MutexLock lock(calls_mu_);
    ++calls_;
  }
  const auto began = SteadyClock::now();
  auto* pending = new Pending;
  // The client stays alive (mounted) until its call answered.
  pending->done = [this, client, op, began, done = std::move(done)](Reply r) {
    const double seconds = std::chrono::duration<double>(SteadyClock::now() - began).count();
    if (r.error != 0) {
      const Error e = ToError(r);
      health_->Record(op, seconds, &e);
    } else {
      health_->Record(op, seconds, nullptr);
    }
    done(std::move(r));
    MutexLock lock(calls_mu_);
    if (--calls_ == 0) calls_cv_.notify_all();
  };
  start(pending);
}

namespace {
// A blocking call's answer; shared with the callback, which may come after the caller left.
struct CallWaiter {
  Mutex mu;
  CondVar cv;
  std::optional<Nfs4Remote::Reply> reply GUARDED_BY(mu);
};
}  // namespace

Nfs4Remote::Reply Nfs4Remote::Call(const std::shared_ptr<Client>& client, const char* op,
                                   const std::function<void(void* ctx)>& start) {
  auto w = std::make_shared<CallWaiter>();
  Interrupt::Waker waker(InterruptScope::Current(), [&w] {
    MutexLock lock(w->mu);
    w->cv.notify_all();
  });
  Start(client, op, start, [w](Reply r) {
    MutexLock lock(w->mu);
    w->reply = std::move(r);
    w->cv.notify_all();
  });
  // The library answers within the deadline; the margin only guards against a bug there.
  const auto until =
      SteadyClock::now() + std::chrono::milliseconds(deadline_ms_) + std::chrono::seconds(5);
  MutexLock lock(w->mu);
  w->cv.wait_until(lock, until, [&]() REQUIRES(w->mu) { return w->reply || waker.fired(); });
  if (w->reply) return std::move(*w->reply);
  Reply r;
  if (waker.fired()) {
    r.interrupted = true;
    r.message = std::string(op) + " on the hub";
  } else {
    r.error = ETIMEDOUT;
    r.message = std::string(op) + ": no answer from the NFSv4 client within its bound";
  }
  return r;
}

Error Nfs4Remote::ToError(const Reply& r) const {
  if (r.interrupted) return Interrupted(r.message);
  std::string message = "hub " + hub_name_ + ": " + r.message;
  // The hub did not answer (or the connection broke): kTimeout / kUnavailable without the
  // transport's errno, so a process sees EIO as over NFSv3, not ETIMEDOUT or ECONNRESET.
  if (r.error == ETIMEDOUT) return Error(Code::kTimeout, std::move(message));
  if (r.error == ECONNRESET || r.error == EHOSTUNREACH) {
    return Error(Code::kUnavailable, std::move(message));
  }
  return Error::FromErrno(r.error, std::move(message));
}

bool Nfs4Remote::Reachable() const { return health_->Reachable(); }
std::string Nfs4Remote::LastError() const { return health_->LastError(); }

// ---- handles ----

void Nfs4Remote::UseHandleStore(HandleStore* store) {
  if (config_.fh_table_size == 0) return;
  MutexLock lock(store_mu_);
  store_ = store != nullptr ? store : &own_handles_;
}

std::optional<HandleStore::Entry> Nfs4Remote::FindHandle(const std::string& path) {
  MutexLock lock(store_mu_);
  if (store_ == nullptr) return std::nullopt;
  return store_->FindHandle(path);
}

void Nfs4Remote::DropHandles(const std::string& path) {
  MutexLock lock(store_mu_);
  if (store_ != nullptr) store_->DropHandles(path);
}

void Nfs4Remote::RecordListedHandles(const std::string& path,
                                     const std::vector<DirEntry>& entries) {
  MutexLock lock(store_mu_);
  if (store_ != &own_handles_) return;  // an attached store records what it applies
  for (const auto& e : entries) {
    if (!e.fh.empty()) own_handles_.Put(Joined(path, e.name), e.fh, e.attr.file_id);
  }
}

void Nfs4Remote::HandleOf(const std::shared_ptr<Client>& client, const std::string& path,
                          uint64_t file_id, std::function<void(Result<std::string>)> k) {
  if (auto h = FindHandle(path); h && (file_id == 0 || h->file_id == 0 || h->file_id == file_id)) {
    k(h->fh);
    return;
  }
  Start(
      client, "lookup",
      [&](void* ctx) { spoke_nfs4_lookup(client->get(), path.c_str(), OnReply, ctx); },
      [this, path, file_id, k = std::move(k)](Reply r) {
        if (r.error != 0) return k(std::unexpected(ToError(r)));
        if (file_id != 0 && r.attr && r.attr->file_id != file_id) {
          return k(std::unexpected(Error::FromErrno(
              ESTALE, "hub " + hub_name_ + ": '" + path + "' now names another file")));
        }
        k(std::move(r.fh));
      });
}

// ---- reads ----

Result<FileAttr> Nfs4Remote::StatOn(const std::shared_ptr<Client>& client,
                                    const std::string& path) {
  Reply r = Call(client, "lookup",
                 [&](void* ctx) { spoke_nfs4_lookup(client->get(), path.c_str(), OnReply, ctx); });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  if (!r.attr) return Fail(Code::kIo, "hub " + hub_name_ + ": no attributes for '" + path + "'");
  return *r.attr;
}

Result<FileAttr> Nfs4Remote::Stat(const std::string& path) { return StatOn(Own(), path); }

Result<FileAttr> Nfs4Remote::StatAs(const Credentials& who, const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return StatOn(client, path);
}

Result<std::vector<DirEntry>> Nfs4Remote::ReadDirOn(const std::shared_ptr<Client>& client,
                                                    const std::string& path) {
  Reply r = Call(client, "readdir",
                 [&](void* ctx) { spoke_nfs4_readdir(client->get(), path.c_str(), OnReply, ctx); });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  RecordListedHandles(path, r.entries);
  return std::move(r.entries);
}

Result<std::vector<DirEntry>> Nfs4Remote::ReadDir(const std::string& path) {
  return ReadDirOn(Own(), path);
}

Result<std::vector<DirEntry>> Nfs4Remote::ReadDirAs(const Credentials& who,
                                                    const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return ReadDirOn(client, path);
}

void Nfs4Remote::ReadAsync(const std::string& path, uint64_t offset, uint32_t length,
                           ReadDone done) {
  ReadCheckedOn(OwnFor(path), path, 0, offset, length,
                [done = std::move(done)](Result<CheckedRead> r) { DeliverData(done, r); });
}

void Nfs4Remote::ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset,
                                  uint32_t length, CheckedReadDone done) {
  ReadCheckedOn(OwnFor(path), path, file_id, offset, length, std::move(done));
}

void Nfs4Remote::ReadCheckedAsAsync(const Credentials& who, const std::string& path,
                                    uint64_t file_id, uint64_t offset, uint32_t length,
                                    CheckedReadDone done) {
  if (ActsAsSelf(who))
    return ReadCheckedOn(OwnFor(path), path, file_id, offset, length, std::move(done));
  auto client = ClientFor(who);
  if (!client) return done(std::unexpected(client.error()));
  ReadCheckedOn(*client, path, file_id, offset, length, std::move(done));
}

void Nfs4Remote::ReadCheckedOn(const std::shared_ptr<Client>& client, const std::string& path,
                               uint64_t file_id, uint64_t offset, uint32_t length,
                               CheckedReadDone done) {
  auto shared_done = std::make_shared<CheckedReadDone>(std::move(done));
  HandleOf(client, path, file_id, [=, this](Result<std::string> fh) {
    if (!fh) return (*shared_done)(std::unexpected(fh.error()));
    auto handle = std::make_shared<std::string>(std::move(*fh));
    Start(
        client, "read",
        [&](void* ctx) {
          spoke_nfs4_read(client->get(), Bytes(*handle), handle->size(), offset, length, 1, OnReply,
                          ctx);
        },
        [=, this](Reply r) {
          if (r.error != 0) {
            if (r.error == ESTALE) DropHandles(path);
            return (*shared_done)(std::unexpected(ToError(r)));
          }
          read_reply_bytes_->Inc(r.data.size());
          if (!r.attr) {
            return (*shared_done)(Fail(Code::kIo, "hub " + hub_name_ + ": a READ of '" + path +
                                                      "' came without "
                                                      "the file's attributes"));
          }
          if (file_id != 0 && r.attr->file_id != file_id) {
            DropHandles(path);
            return (*shared_done)(std::unexpected(Error::FromErrno(
                ESTALE, "hub " + hub_name_ + ": '" + path + "' now names another file")));
          }
          // The library reads the whole range in the session's sizes; a reply shorter
          // than asked while the file says there is more is an error, never returned as data.
          const uint64_t want =
              r.attr->size > offset ? std::min<uint64_t>(length, r.attr->size - offset) : 0;
          if (r.data.size() < want) {
            return (*shared_done)(Fail(Code::kIo, "hub " + hub_name_ + ": a READ of '" + path +
                                                      "' at " + std::to_string(offset) + " gave " +
                                                      std::to_string(r.data.size()) + " of " +
                                                      std::to_string(want) + " bytes"));
          }
          (*shared_done)(CheckedRead{std::move(r.data), *r.attr});
        });
  });
}

Result<std::string> Nfs4Remote::ReadLinkOn(const std::shared_ptr<Client>& client,
                                           const std::string& path) {
  Reply l = Call(client, "lookup",
                 [&](void* ctx) { spoke_nfs4_lookup(client->get(), path.c_str(), OnReply, ctx); });
  if (l.error != 0 || l.interrupted) return std::unexpected(ToError(l));
  Reply r = Call(client, "readlink", [&](void* ctx) {
    spoke_nfs4_readlink(client->get(), Bytes(l.fh), l.fh.size(), OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return std::string(r.data.begin(), r.data.end());
}

Result<std::string> Nfs4Remote::ReadLink(const std::string& path) {
  return ReadLinkOn(Own(), path);
}

Result<std::string> Nfs4Remote::ReadLinkAs(const Credentials& who, const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return ReadLinkOn(client, path);
}

Result<FsStat> Nfs4Remote::StatFs() {
  auto client = Own();
  Reply r =
      Call(client, "fsstat", [&](void* ctx) { spoke_nfs4_fsstat(client->get(), OnReply, ctx); });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return r.fsstat;
}

// ---- changes ----

Result<FileAttr> Nfs4Remote::CreateOn(const std::shared_ptr<Client>& client,
                                      const std::string& path, uint32_t mode, CreateMode how) {
  Reply r = Call(client, "create", [&](void* ctx) {
    spoke_nfs4_create(client->get(), path.c_str(), mode, how == CreateMode::kExclusive ? 1 : 0,
                      OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  DropHandles(path);
  if (!r.attr) return StatOn(client, path);
  return *r.attr;
}

Result<FileAttr> Nfs4Remote::Create(const std::string& path, uint32_t mode) {
  return CreateOn(Own(), path, mode, CreateMode::kUnchecked);
}

Result<FileAttr> Nfs4Remote::CreateAs(const Credentials& who, const std::string& path,
                                      uint32_t mode, CreateMode how) {
  SPOKE_TRY(auto client, ClientFor(who));
  return CreateOn(client, path, mode, how);
}

Result<FileAttr> Nfs4Remote::MkdirOn(const std::shared_ptr<Client>& client, const std::string& path,
                                     uint32_t mode) {
  Reply r = Call(client, "mkdir", [&](void* ctx) {
    spoke_nfs4_mkdir(client->get(), path.c_str(), mode, OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  if (!r.attr) return StatOn(client, path);
  return *r.attr;
}

Result<FileAttr> Nfs4Remote::Mkdir(const std::string& path, uint32_t mode) {
  return MkdirOn(Own(), path, mode);
}

Result<FileAttr> Nfs4Remote::MkdirAs(const Credentials& who, const std::string& path,
                                     uint32_t mode) {
  SPOKE_TRY(auto client, ClientFor(who));
  return MkdirOn(client, path, mode);
}

Result<size_t> Nfs4Remote::WriteOn(const std::shared_ptr<Client>& client, const std::string& path,
                                   uint64_t offset, const char* data, size_t length) {
  std::string fh;
  {
    auto promise = std::make_shared<std::promise<Result<std::string>>>();
    auto future = promise->get_future();
    HandleOf(client, path, 0,
             [promise](Result<std::string> h) { promise->set_value(std::move(h)); });
    SPOKE_TRY(fh, future.get());
  }
  // The library copies `data` before the call returns: nothing reads it after.
  Reply r = Call(client, "write", [&](void* ctx) {
    spoke_nfs4_write(client->get(), Bytes(fh), fh.size(), offset,
                     reinterpret_cast<const uint8_t*>(data), length, OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) {
    if (r.error == ESTALE) DropHandles(path);
    return std::unexpected(ToError(r));
  }
  return static_cast<size_t>(r.count);
}

Result<size_t> Nfs4Remote::Write(const std::string& path, uint64_t offset, const char* data,
                                 size_t length) {
  return WriteOn(Own(), path, offset, data, length);
}

Result<size_t> Nfs4Remote::WriteAs(const Credentials& who, const std::string& path, uint64_t offset,
                                   const char* data, size_t length) {
  SPOKE_TRY(auto client, ClientFor(who));
  return WriteOn(client, path, offset, data, length);
}

void Nfs4Remote::WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                              std::shared_ptr<const std::vector<char>> data, WriteDone done) {
  auto client = ClientFor(who);
  if (!client) return done(std::unexpected(client.error()));
  auto shared_done = std::make_shared<WriteDone>(std::move(done));
  HandleOf(*client, path, 0, [=, this, client = *client](Result<std::string> fh) {
    if (!fh) return (*shared_done)(std::unexpected(fh.error()));
    auto handle = std::make_shared<std::string>(std::move(*fh));
    Start(
        client, "write",
        [&](void* ctx) {
          spoke_nfs4_write(client->get(), Bytes(*handle), handle->size(), offset,
                           reinterpret_cast<const uint8_t*>(data->data()), data->size(), OnReply,
                           ctx);
        },
        [=, this](Reply r) {
          if (r.error != 0) {
            if (r.error == ESTALE) DropHandles(path);
            return (*shared_done)(std::unexpected(ToError(r)));
          }
          (*shared_done)(static_cast<size_t>(r.count));
        });
  });
}

Result<uint64_t> Nfs4Remote::AppendAs(const Credentials& who, const std::string& path,
                                      const char* data, size_t length) {
  SPOKE_TRY(auto client, ClientFor(who));
  SPOKE_TRY(FileAttr attr, StatOn(client, path));
  SPOKE_TRY(size_t n, WriteOn(client, path, attr.size, data, length));
  return attr.size + n;
}

Status Nfs4Remote::RemoveOn(const std::shared_ptr<Client>& client, const std::string& path,
                            bool directory) {
  Reply r = Call(client, directory ? "rmdir" : "remove", [&](void* ctx) {
    spoke_nfs4_remove(client->get(), path.c_str(), directory ? 1 : 0, OnReply, ctx);
  });
  DropHandles(path);
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return Ok();
}

Status Nfs4Remote::Unlink(const std::string& path) { return RemoveOn(Own(), path, false); }
Status Nfs4Remote::Rmdir(const std::string& path) { return RemoveOn(Own(), path, true); }

Status Nfs4Remote::UnlinkAs(const Credentials& who, const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return RemoveOn(client, path, false);
}

Status Nfs4Remote::RmdirAs(const Credentials& who, const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return RemoveOn(client, path, true);
}

Status Nfs4Remote::RenameOn(const std::shared_ptr<Client>& client, const std::string& from,
                            const std::string& to) {
  Reply r = Call(client, "rename", [&](void* ctx) {
    spoke_nfs4_rename(client->get(), from.c_str(), to.c_str(), OnReply, ctx);
  });
  DropHandles(from);
  DropHandles(to);
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return Ok();
}

Status Nfs4Remote::Rename(const std::string& from, const std::string& to) {
  return RenameOn(Own(), from, to);
}

Status Nfs4Remote::RenameAs(const Credentials& who, const std::string& from,
                            const std::string& to) {
  SPOKE_TRY(auto client, ClientFor(who));
  return RenameOn(client, from, to);
}

Result<FileAttr> Nfs4Remote::SetAttrOn(const std::shared_ptr<Client>& client,
                                       const std::string& path, const SetAttrRequest& request) {
  spoke_nfs4_setattr_request req{};
  if (request.mode) req.set_mode = 1, req.mode = *request.mode;
  if (request.uid) req.set_uid = 1, req.uid = *request.uid;
  if (request.gid) req.set_gid = 1, req.gid = *request.gid;
  if (request.size) req.set_size = 1, req.size = *request.size;
  // UTIME_NOW is the client's clock here (nfs-rs sets explicit times only); UTIME_OMIT skips.
  auto time_of = [](const std::optional<struct timespec>& t, int32_t& set, uint64_t& sec,
                    uint32_t& nsec) {
    if (!t || t->tv_nsec == UTIME_OMIT) return;
    struct timespec v = *t;
    if (v.tv_nsec == UTIME_NOW) ::clock_gettime(CLOCK_REALTIME, &v);
    set = 1;
    sec = static_cast<uint64_t>(v.tv_sec);
    nsec = static_cast<uint32_t>(v.tv_nsec);
  };
  time_of(request.atime, req.set_atime, req.atime_sec, req.atime_nsec);
  time_of(request.mtime, req.set_mtime, req.mtime_sec, req.mtime_nsec);
  Reply l = Call(client, "lookup",
                 [&](void* ctx) { spoke_nfs4_lookup(client->get(), path.c_str(), OnReply, ctx); });
  if (l.error != 0 || l.interrupted) return std::unexpected(ToError(l));
  Reply r = Call(client, "setattr", [&](void* ctx) {
    spoke_nfs4_setattr(client->get(), Bytes(l.fh), l.fh.size(), &req, OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  if (!r.attr) return StatOn(client, path);
  return *r.attr;
}

Result<FileAttr> Nfs4Remote::SetAttr(const std::string& path, const SetAttrRequest& request) {
  return SetAttrOn(Own(), path, request);
}

Result<FileAttr> Nfs4Remote::SetAttrAs(const Credentials& who, const std::string& path,
                                       const SetAttrRequest& request) {
  SPOKE_TRY(auto client, ClientFor(who));
  return SetAttrOn(client, path, request);
}

Status Nfs4Remote::FsyncOn(const std::shared_ptr<Client>& client, const std::string& path) {
  Reply l = Call(client, "lookup",
                 [&](void* ctx) { spoke_nfs4_lookup(client->get(), path.c_str(), OnReply, ctx); });
  if (l.error != 0 || l.interrupted) return std::unexpected(ToError(l));
  Reply r = Call(client, "commit", [&](void* ctx) {
    spoke_nfs4_commit(client->get(), Bytes(l.fh), l.fh.size(), OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return Ok();
}

Status Nfs4Remote::Fsync(const std::string& path) { return FsyncOn(Own(), path); }

Status Nfs4Remote::FsyncAs(const Credentials& who, const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  return FsyncOn(client, path);
}

Result<FileAttr> Nfs4Remote::SymlinkAs(const Credentials& who, const std::string& target,
                                       const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  Reply r = Call(client, "symlink", [&](void* ctx) {
    spoke_nfs4_symlink(client->get(), target.c_str(), path.c_str(), OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  if (!r.attr) return StatOn(client, path);
  return *r.attr;
}

Result<FileAttr> Nfs4Remote::LinkAs(const Credentials& who, const std::string& existing,
                                    const std::string& path) {
  SPOKE_TRY(auto client, ClientFor(who));
  Reply r = Call(client, "link", [&](void* ctx) {
    spoke_nfs4_link(client->get(), existing.c_str(), path.c_str(), OnReply, ctx);
  });
  if (r.error != 0 || r.interrupted) return std::unexpected(ToError(r));
  return StatOn(client, path);
}

}  // namespace spoke::agent
