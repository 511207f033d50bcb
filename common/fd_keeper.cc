#include "common/fd_keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "common/log.h"

namespace spoke {
namespace {

using nlohmann::json;

constexpr size_t kMaxKeyBytes = 256;
constexpr size_t kMaxMetadataBytes = 32 * 1024;

Status ValidateKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Fail(Code::kInvalidArgument,
                "keeper key must be 1.." + std::to_string(kMaxKeyBytes) + " bytes");
  }
  for (unsigned char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return Fail(Code::kInvalidArgument, "keeper key '" + key + "' has a non-printable byte");
    }
  }
  return Ok();
}

Result<json> ParseObject(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(Code::kInvalidArgument, std::string(what) + " is not a JSON object");
  }
  return j;
}

// Maps {"ok":false,"error":...} from the keeper to an Error.
Error KeeperError(const json& reply) {
  std::string msg = reply.value("error", std::string("keeper refused the request"));
  Code code = Code::kInternal;
  if (msg.starts_with("permission denied")) code = Code::kPermissionDenied;
  if (msg.starts_with("invalid")) code = Code::kInvalidArgument;
  return Error(code, "fd keeper: " + msg);
}

}  // namespace

Status FdKeeperServer::Config::Validate() const {
  if (socket_path.empty() || socket_path.front() != '/') {
    return Fail(Code::kInvalidArgument,
                "fd keeper socket must be an absolute path, got '" + socket_path + "'");
  }
  if (io_timeout.count() <= 0) {
    return Fail(Code::kInvalidArgument, "fd keeper io timeout must be positive");
  }
  if (max_clients == 0) return Fail(Code::kInvalidArgument, "fd keeper max clients must be > 0");
  return Ok();
}

FdKeeperServer::FdKeeperServer(Config config) : config_(std::move(config)) {}

FdKeeperServer::~FdKeeperServer() { Stop(); }

size_t FdKeeperServer::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

Status FdKeeperServer::Start() {
  if (auto s = config_.Validate(); !s) return s;
  if (thread_.joinable()) return Fail(Code::kInternal, "fd keeper already started");
  SPOKE_TRY(listen_fd_, ListenSeqpacket(config_.socket_path, 0600));
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return Fail(Code::kIo, std::string("eventfd: ") + std::strerror(errno));
  stopping_ = false;
  thread_ = std::thread([this] { PollLoop(); });
  log::Info("fd keeper serving", {{"socket", config_.socket_path}});
  return Ok();
}

void FdKeeperServer::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
  // No successor can have bound the path meanwhile: ListenSeqpacket refuses a live socket.
  ::unlink(config_.socket_path.c_str());
  listen_fd_.Reset();
}

void FdKeeperServer::FinishServing(std::chrono::milliseconds bound) {
  if (!thread_.joinable()) return;
  auto deadline = std::chrono::steady_clock::now() + bound;
  MutexLock lock(mu_);
  if (!entries_.empty() && lease_holders_ == 0) {
    log::Info(
        "fd keeper stopping: no agent holds the kept connections; serving until one "
        "takes them over",
        {{"kept", static_cast<int64_t>(entries_.size())},
         {"bound_ms", static_cast<int64_t>(bound.count())}});
  }
  while (!entries_.empty() && lease_holders_ == 0) {
    if (lease_changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      log::Error(
          "fd keeper stopping: no agent took the kept connections in time; their mounts "
          "end with this keeper",
          {{"kept", static_cast<int64_t>(entries_.size())}});
      break;
    }
  }
  closing_ = true;
}

struct FdKeeperServer::Clients {
  std::vector<UniqueFd> fds;
  std::set<int> denied;   // accepted, but from a uid that may not use the keeper
  std::set<int> holders;  // clients holding the agent's lease
  std::chrono::steady_clock::time_point last_seen;  // of a lease or a request
};

void FdKeeperServer::PollLoop() {
  using Clock = std::chrono::steady_clock;
  Clients clients;
  clients.last_seen = Clock::now();
  while (!stopping_) {
    int timeout_ms = -1;
    if (config_.orphan_timeout.count() > 0 && clients.holders.empty() && size() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          clients.last_seen + config_.orphan_timeout - Clock::now());
      if (left.count() <= 0) {
        ReleaseOrphans(config_.orphan_timeout);
        continue;
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 60000));
    }
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(),
                   static_cast<short>(clients.fds.size() < config_.max_clients ? POLLIN : 0), 0});
    for (auto& c : clients.fds) fds.push_back({c.get(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::Error("fd keeper poll failed", {{"error", std::strerror(errno)}});
      return;
    }
    if (n == 0) continue;  // the orphan clock is checked at the top
    if (fds[0].revents) break;
    // Serve existing clients first (indices shift once we erase, so walk backwards).
    for (size_t i = clients.fds.size(); i-- > 0;) {
      short re = fds[i + 2].revents;
      if (re == 0) continue;
      if (!ServeClient(clients, clients.fds[i].get(), re)) {
        DropClient(clients, clients.fds[i].get());
        clients.fds.erase(clients.fds.begin() + static_cast<ptrdiff_t>(i));
      }
    }
    if (fds[1].revents & POLLIN) AcceptClient(clients);
  }
}

bool FdKeeperServer::ServeClient(Clients& clients, int fd, short revents) {
  if ((revents & POLLIN) && clients.denied.contains(fd)) {
    (void)RecvFdMessage(fd, std::chrono::milliseconds(0));  // closes any descriptors sent
    (void)Reply(
        fd, json{{"ok", false},
                 {"error", "permission denied: only uid " + std::to_string(config_.allowed_uid) +
                               " may use the fd keeper"}}
                .dump());
    return false;
  }
  if (!(revents & POLLIN)) return false;
  bool hold = false;
  const bool keep = HandleRequest(fd, &hold);
  clients.last_seen = std::chrono::steady_clock::now();
  if (keep && hold && clients.holders.insert(fd).second) {
    {
      MutexLock lock(mu_);
      lease_holders_++;
      lease_changed_.notify_all();
    }
    log::Info("fd keeper: an agent holds the kept connections",
              {{"kept", static_cast<int64_t>(size())}});
  }
  return keep;
}

void FdKeeperServer::DropClient(Clients& clients, int fd) {
  clients.denied.erase(fd);
  if (clients.holders.erase(fd) == 0) return;
  {
    MutexLock lock(mu_);
    lease_holders_--;
    lease_changed_.notify_all();
  }
  clients.last_seen = std::chrono::steady_clock::now();
  if (clients.holders.empty() && size() > 0) {
    log::Warn(
        "fd keeper: the agent serving the kept connections went away; they are "
        "released unless an agent takes them back in time",
        {{"kept", static_cast<int64_t>(size())},
         {"orphan_timeout_ms", static_cast<int64_t>(config_.orphan_timeout.count())}});
  }
}

void FdKeeperServer::AcceptClient(Clients& clients) {
  UniqueFd client(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!client.valid()) return;
  auto cred = PeerCredentials(client.get());
  uid_t uid = cred ? cred->uid : static_cast<uid_t>(-1);
  if (uid != config_.allowed_uid) {
    log::Warn("fd keeper refused a client",
              {{"uid", static_cast<int64_t>(uid)},
               {"allowed_uid", static_cast<int64_t>(config_.allowed_uid)}});
    // Answered once its request arrives: closing with the request unread would reset the
    // connection before the client sees why.
    clients.denied.insert(client.get());
  }
  clients.fds.push_back(std::move(client));
}

Status FdKeeperServer::Reply(int client, const std::string& text, std::span<const int> fds) {
  return SendFdMessage(client, text, fds, config_.io_timeout);
}

void FdKeeperServer::ReleaseOrphans(std::chrono::milliseconds idle) {
  std::map<std::string, KeptFd> released;
  {
    MutexLock lock(mu_);
    released.swap(entries_);
    lease_changed_.notify_all();
  }
  std::string keys;
  for (const auto& [key, e] : released) keys += (keys.empty() ? "" : ",") + key;
  log::Error(
      "fd keeper: no agent took the kept FUSE connections back; released, so their mounts "
      "fail (ECONNABORTED) instead of waiting forever",
      {{"idle_ms", static_cast<int64_t>(idle.count())},
       {"released", static_cast<int64_t>(released.size())},
       {"keys", keys}});
}  // `released` closes the descriptors; the last one of a connection aborts it

bool FdKeeperServer::HandleRequest(int client, bool* hold) {
  auto msg = RecvFdMessage(client, std::chrono::milliseconds(0));
  if (!msg) {
    if (msg.error().code() != Code::kUnavailable) {
      (void)Reply(
          client,
          json{{"ok", false}, {"error", "invalid request: " + msg.error().message()}}.dump());
    }
    return false;
  }
  auto fail = [&](const std::string& why) {
    return Reply(client, json{{"ok", false}, {"error", why}}.dump()).has_value();
  };
  auto req = ParseObject(msg->data, "request");
  if (!req) return fail("invalid request: not a JSON object");
  std::string op = req->value("op", "");
  if (op == "put") {
    std::string key = req->value("key", "");
    if (auto s = ValidateKey(key); !s) return fail("invalid " + s.error().message());
    if (!req->contains("metadata") || !(*req)["metadata"].is_object()) {
      return fail("invalid put: 'metadata' must be a JSON object");
    }
    if (msg->fds.size() != 1) {
      return fail("invalid put: exactly one descriptor expected, got " +
                  std::to_string(msg->fds.size()));
    }
    KeptFd entry{key, (*req)["metadata"].dump(), std::move(msg->fds[0])};
    bool closing;
    {
      MutexLock lock(mu_);
      closing = closing_;
      if (!closing) entries_[key] = std::move(entry);  // replaces (and closes) an older one
    }
    if (closing) return fail("keeper stopping: give the connection to the next keeper");
    log::Info("fd keeper: kept", {{"key", key}});
    return Reply(client, json{{"ok", true}}.dump()).has_value();
  }
  if (op == "list") {
    std::vector<std::pair<std::string, int>> snapshot;
    std::vector<std::string> texts;
    {
      MutexLock lock(mu_);
      for (auto& [key, e] : entries_) {
        json entry{{"entry", {{"key", key}, {"metadata", json::parse(e.metadata_json)}}}};
        texts.push_back(entry.dump());
        // Duplicate under the lock so a concurrent Del cannot close it before it is sent.
        snapshot.emplace_back(key, ::fcntl(e.fd.get(), F_DUPFD_CLOEXEC, 0));
      }
    }
    std::vector<UniqueFd> owned;
    for (auto& [k, fd] : snapshot) owned.emplace_back(fd);
    for (size_t i = 0; i < texts.size(); ++i) {
      if (!owned[i].valid())
        return fail("cannot duplicate descriptor of '" + snapshot[i].first + "'");
      int fd = owned[i].get();
      if (!Reply(client, texts[i], std::span<const int>(&fd, 1))) return false;
    }
    return Reply(client, json{{"ok", true}, {"count", texts.size()}}.dump()).has_value();
  }
  if (op == "hold") {
    *hold = true;
    return Reply(client, json{{"ok", true}}.dump()).has_value();
  }
  if (op == "del") {
    std::string key = req->value("key", "");
    if (auto s = ValidateKey(key); !s) return fail("invalid " + s.error().message());
    bool found;
    {
      MutexLock lock(mu_);
      found = entries_.erase(key) > 0;
    }
    if (found) log::Info("fd keeper: released", {{"key", key}});
    return Reply(client, json{{"ok", true}, {"found", found}}.dump()).has_value();
  }
  return fail("invalid request: unknown op '" + op + "'");
}

Result<UniqueFd> FdKeeperClient::Connect() const {
  return ConnectSeqpacket(socket_path_, timeout_);
}

Status FdKeeperClient::Put(const std::string& key, const std::string& metadata_json, int fd) const {
  if (auto s = ValidateKey(key); !s) return s;
  if (metadata_json.size() > kMaxMetadataBytes) {
    return Fail(Code::kInvalidArgument, "keeper metadata is larger than 32 KiB");
  }
  SPOKE_TRY(auto meta, ParseObject(metadata_json, "keeper metadata"));
  if (fd < 0) return Fail(Code::kInvalidArgument, "keeper put: descriptor is negative");
  SPOKE_TRY(auto sock, Connect());
  std::string req = json{{"op", "put"}, {"key", key}, {"metadata", meta}}.dump();
  if (auto s = SendFdMessage(sock.get(), req, std::span<const int>(&fd, 1), timeout_); !s) return s;
  SPOKE_TRY_WRAP(auto reply, RecvFdMessage(sock.get(), timeout_), "fd keeper put");
  SPOKE_TRY(auto j, ParseObject(reply.data, "keeper reply"));
  if (!j.value("ok", false)) return std::unexpected(KeeperError(j));
  return Ok();
}

Result<std::vector<KeptFd>> FdKeeperClient::List() const {
  SPOKE_TRY(auto sock, Connect());
  SPOKE_RETURN_IF_ERROR(SendFdMessage(sock.get(), json{{"op", "list"}}.dump(), {}, timeout_));
  std::vector<KeptFd> out;
  for (;;) {
    SPOKE_TRY_WRAP(auto reply, RecvFdMessage(sock.get(), timeout_), "fd keeper list");
    SPOKE_TRY(auto j, ParseObject(reply.data, "keeper reply"));
    if (j.contains("entry")) {
      const json& e = j["entry"];
      if (reply.fds.size() != 1 || !e.is_object() || !e.contains("key") || !e["key"].is_string()) {
        return Fail(Code::kInternal, "fd keeper list: malformed entry");
      }
      out.push_back(KeptFd{e["key"].get<std::string>(), e.value("metadata", json::object()).dump(),
                           std::move(reply.fds[0])});
      continue;
    }
    if (!j.value("ok", false)) return std::unexpected(KeeperError(j));
    if (j.value("count", size_t{0}) != out.size()) {
      return Fail(Code::kInternal, "fd keeper list: entry count does not match");
    }
    return out;
  }
}

Result<bool> FdKeeperClient::Del(const std::string& key) const {
  SPOKE_RETURN_IF_ERROR(ValidateKey(key));
  SPOKE_TRY(auto sock, Connect());
  SPOKE_RETURN_IF_ERROR(
      SendFdMessage(sock.get(), json{{"op", "del"}, {"key", key}}.dump(), {}, timeout_));
  SPOKE_TRY_WRAP(auto reply, RecvFdMessage(sock.get(), timeout_), "fd keeper del");
  SPOKE_TRY(auto j, ParseObject(reply.data, "keeper reply"));
  if (!j.value("ok", false)) return std::unexpected(KeeperError(j));
  return j.value("found", false);
}

Result<UniqueFd> FdKeeperClient::TakeLease() const {
  SPOKE_TRY(auto sock, Connect());
  SPOKE_RETURN_IF_ERROR(SendFdMessage(sock.get(), json{{"op", "hold"}}.dump(), {}, timeout_));
  SPOKE_TRY_WRAP(auto reply, RecvFdMessage(sock.get(), timeout_), "fd keeper hold");
  SPOKE_TRY(auto j, ParseObject(reply.data, "keeper reply"));
  if (!j.value("ok", false)) return std::unexpected(KeeperError(j));
  return sock;
}

bool FdKeeperClient::LeaseAlive(int lease) {
  if (lease < 0) return false;
  pollfd p{lease, POLLIN, 0};
  // The keeper never writes on a lease: anything readable is its end (EOF) or an error.
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace spoke
