// PeerSet: who the cluster's peers are, from an existing source of truth: a static list in
// the agent config, and/or a headless Kubernetes Service resolved through DNS (cluster DNS
// publishes only the ready pods of the Service, so membership follows the agents' health).
// Both are re-resolved every `refresh_interval`; a member gone from them is dropped then.
// A member whose calls fail `failures_to_mark_down` times in a row is left out of ownership
// for `down_period` (then tried again), so a dead peer costs a bounded number of waits.
#pragma once

#if !__has_include("spoke_layer/peer.h")
#error "wrong-way include: cache-agent/peer/ is not among this target's dependencies"
#endif

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class PeerSet {
 public:
  struct Config {
    std::vector<std::string> static_peers;  // "host:port" each
    std::string service;                    // "name.ns.svc:port", "" = none
    int self_port = 0;                      // the port this agent's peer server listens on
    // The address it listens on when that is one IP: a member there is this agent even when
    // it is not among the host's interface addresses (a loopback alias).
    std::string self_host;
    std::chrono::milliseconds refresh_interval{5000};
    int failures_to_mark_down = 3;
    std::chrono::milliseconds down_period{10000};
    Status Validate() const;
  };
  // "host:port" list -> resolved "ip:port" members (sorted, unique). Replaceable in tests.
  using Resolver = std::function<std::vector<std::string>(const std::string& host_port)>;
  // The host's own addresses (to recognise this agent among the members).
  using LocalAddresses = std::function<std::set<std::string>()>;

  explicit PeerSet(const Config& config, Resolver resolver = {}, LocalAddresses local = {});
  ~PeerSet();  // stops the refresh thread
  PeerSet(const PeerSet&) = delete;
  PeerSet& operator=(const PeerSet&) = delete;

  // Resolves once now, then every refresh_interval in a thread.
  void Start() EXCLUDES(mu_);
  // Resolves the member list now (Start's thread calls it).
  void Refresh() EXCLUDES(mu_);

  struct View {
    std::vector<std::string> members;  // live members, self included when resolved, sorted
    int self = -1;                     // index of this agent in `members`, -1 if absent
  };
  View Live() const EXCLUDES(mu_);
  // Outcome of a call to `member`: failures in a row mark it down for down_period.
  void ReportFailure(const std::string& member) EXCLUDES(mu_);
  void ReportSuccess(const std::string& member) EXCLUDES(mu_);
  size_t resolved_count() const EXCLUDES(mu_);
  // Whether a certificate with these IP and DNS subject alternative names names a member:
  // an IP of a resolved member (live or marked down), or the host name of a static peer.
  bool NamesMember(const std::vector<std::string>& ips,
                   const std::vector<std::string>& dns_names) const EXCLUDES(mu_);
  // Resolves again soon, at most once a second (a caller met an agent not yet listed).
  void RefreshSoon() EXCLUDES(mu_);

 private:
  struct Health {
    int failures = 0;
    std::chrono::steady_clock::time_point down_until{};
  };
  Config config_;
  Resolver resolve_;
  LocalAddresses local_;
  mutable Mutex mu_;
  std::vector<std::string> resolved_ GUARDED_BY(mu_);
  std::string self_ GUARDED_BY(mu_);  // "" = not among the members
  std::map<std::string, Health> health_ GUARDED_BY(mu_);
  CondVar stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool wake_ GUARDED_BY(mu_) = false;  // RefreshSoon asked
  std::chrono::steady_clock::time_point last_refresh_ GUARDED_BY(mu_){};
  std::thread thread_;
};

// getaddrinfo of "host:port" (IPv4 and IPv6) -> "ip:port" / "[ip6]:port". Empty on failure.
std::vector<std::string> ResolveHostPort(const std::string& host_port);
// Every address of the host's interfaces (getifaddrs), as text.
std::set<std::string> HostAddresses();

}  // namespace spoke::agent
