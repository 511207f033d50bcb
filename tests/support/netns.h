// Network namespaces a test creates for itself: one "hub" namespace holding a bridge, and N
// "node" namespaces, each joined to the bridge by a veth pair, as the nodes of one region are
// joined by their network. Only addresses inside these namespaces are ever used, and every
// namespace is deleted in the destructor (their interfaces go with them).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace spoke::testing {

class NetTopology {
 public:
  // Creates the namespaces (names carry the pid) with 10.77.0.0/24 on the bridge: the hub
  // namespace has .1, node i has .(11 + i). nullptr with `*why` set when namespaces cannot
  // be made here (not root, no `ip`/`nsenter`); the test should skip then.
  static std::unique_ptr<NetTopology> Create(int nodes, std::string* why);
  ~NetTopology();
  NetTopology(const NetTopology&) = delete;
  NetTopology& operator=(const NetTopology&) = delete;

  const std::string& hub_ns() const { return hub_ns_; }
  const std::string& node_ns(int i) const { return node_ns_[static_cast<size_t>(i)]; }
  std::string hub_ip() const { return "10.77.0.1"; }
  std::string node_ip(int i) const { return "10.77.0." + std::to_string(11 + i); }

  // A shell prefix running a command in `ns`'s network (only: mounts stay shared).
  static std::string Enter(const std::string& ns);
  // Moves the calling process into `ns`'s network; for a child between fork() and exec()
  // (async-signal-safe). False on failure.
  static bool JoinInChild(const std::string& ns);

 private:
  NetTopology() = default;
  std::string hub_ns_;
  std::vector<std::string> node_ns_;
  std::vector<std::string> created_;
};

}  // namespace spoke::testing
