#include "cache-agent/peer/peer_set.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>

#include <algorithm>

#include "cache-agent/peer/peer_cert.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

// Splits "host:port" / "[v6]:port"; false when malformed.
bool SplitHostPort(const std::string& text, std::string* host, std::string* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  *host = text.substr(0, colon);
  *port = text.substr(colon + 1);
  if (host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return !host->empty();
}

std::string AddressText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// "ip:port" -> ip (without brackets).
std::string HostOf(const std::string& member) {
  std::string host, port;
  return SplitHostPort(member, &host, &port) ? host : "";
}

int PortOf(const std::string& member) {
  std::string host, port;
  if (!SplitHostPort(member, &host, &port)) return -1;
  return std::atoi(port.c_str());
}

}  // namespace

std::vector<std::string> ResolveHostPort(const std::string& host_port) {
  std::string host, port;
  if (!SplitHostPort(host_port, &host, &port)) return {};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    std::string ip = AddressText(a->ai_addr);
    if (ip.empty()) continue;
    out.push_back(a->ai_family == AF_INET6 ? "[" + ip + "]:" + port : ip + ":" + port);
  }
  ::freeaddrinfo(res);
  return out;
}

std::set<std::string> HostAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    std::string ip = AddressText(i->ifa_addr);
    if (!ip.empty()) out.insert(ip);
  }
  ::freeifaddrs(list);
  return out;
}

Status PeerSet::Config::Validate() const {
  if (static_peers.empty() && service.empty())
    return Fail(Code::kInvalidArgument, "peers: name static peers or a peer service");
  if (self_port < 1 || self_port > 65535)
    return Fail(Code::kInvalidArgument, "self_port: must be in 1..65535");
  if (refresh_interval < std::chrono::milliseconds(100))
    return Fail(Code::kInvalidArgument, "refresh_interval: must be >= 100 ms");
  if (failures_to_mark_down < 1)
    return Fail(Code::kInvalidArgument, "failures_to_mark_down: must be >= 1");
  return Ok();
}

PeerSet::PeerSet(const Config& config, Resolver resolver, LocalAddresses local)
    : config_(config),
      resolve_(resolver ? std::move(resolver) : Resolver(&ResolveHostPort)),
      local_(local ? std::move(local) : LocalAddresses(&HostAddresses)) {}

PeerSet::~PeerSet() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerSet::Start() {
  Refresh();
  thread_ = std::thread([this] {
    MutexLock lock(mu_);
    const auto woken = [&]() REQUIRES(mu_) { return stop_ || wake_; };
    while (true) {
      stop_cv_.wait_for(lock, config_.refresh_interval, woken);
      if (stop_) break;
      wake_ = false;
      lock.unlock();
      Refresh();  // DNS may block: never under mu_
      lock.lock();
    }
  });
}

void PeerSet::Refresh() {
  std::vector<std::string> members;
  for (const auto& p : config_.static_peers) {
    for (auto& m : resolve_(p)) members.push_back(std::move(m));
  }
  if (!config_.service.empty()) {
    for (auto& m : resolve_(config_.service)) members.push_back(std::move(m));
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  const std::set<std::string> mine = local_();
  std::string self;
  for (const auto& m : members) {
    const std::string host = HostOf(m);
    const bool here = mine.contains(host) ||
                      (!config_.self_host.empty() && CanonicalIp(host) == config_.self_host);
    if (PortOf(m) == config_.self_port && here) {
      self = m;
      break;
    }
  }
  MutexLock lock(mu_);
  if (members != resolved_) {
    log::Info("peer set changed", {{"members", static_cast<uint64_t>(members.size())},
                                   {"self", self.empty() ? "(not listed)" : self}});
  }
  resolved_ = std::move(members);
  self_ = self;
  last_refresh_ = std::chrono::steady_clock::now();
  // Forget the health of members that left.
  for (auto it = health_.begin(); it != health_.end();) {
    it = std::binary_search(resolved_.begin(), resolved_.end(), it->first) ? std::next(it)
                                                                           : health_.erase(it);
  }
}

PeerSet::View PeerSet::Live() const {
  View v;
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  for (const auto& m : resolved_) {
    auto h = health_.find(m);
    if (m != self_ && h != health_.end() && h->second.down_until > now) continue;
    if (m == self_) v.self = static_cast<int>(v.members.size());
    v.members.push_back(m);
  }
  return v;
}

void PeerSet::ReportFailure(const std::string& member) {
  MutexLock lock(mu_);
  Health& h = health_[member];
  if (++h.failures >= config_.failures_to_mark_down) {
    if (h.down_until <= std::chrono::steady_clock::now()) {
      log::Warn("peer marked down", {{"peer", member}, {"failures", h.failures}});
    }
    h.down_until = std::chrono::steady_clock::now() + config_.down_period;
    h.failures = 0;
  }
}

void PeerSet::ReportSuccess(const std::string& member) {
  MutexLock lock(mu_);
  auto it = health_.find(member);
  if (it != health_.end()) it->second.failures = 0;
}

bool PeerSet::NamesMember(const std::vector<std::string>& ips,
                          const std::vector<std::string>& dns_names) const {
  MutexLock lock(mu_);
  for (const auto& ip : ips) {
    const std::string want = CanonicalIp(ip);
    if (want.empty()) continue;
    for (const auto& m : resolved_) {
      if (CanonicalIp(HostOf(m)) == want) return true;
    }
  }
  // Static peers named by host name (outside Kubernetes): their certificates name that host.
  for (const auto& name : dns_names) {
    for (const auto& p : config_.static_peers) {
      const std::string host = HostOf(p);
      if (CanonicalIp(host).empty() && strcasecmp(host.c_str(), name.c_str()) == 0) return true;
    }
  }
  return false;
}

void PeerSet::RefreshSoon() {
  {
    MutexLock lock(mu_);
    if (std::chrono::steady_clock::now() - last_refresh_ < std::chrono::seconds(1)) return;
    wake_ = true;
  }
  stop_cv_.notify_all();
}

size_t PeerSet::resolved_count() const {
  MutexLock lock(mu_);
  return resolved_.size();
}

}  // namespace spoke::agent
