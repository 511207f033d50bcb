#include "tests/support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

namespace spoke::testing {
namespace {

bool Sh(const std::string& command, std::string* why) {
  if (std::system(("{ " + command + "; } >/dev/null 2>&1").c_str()) == 0) return true;
  if (why != nullptr && why->empty()) *why = "'" + command + "' failed";
  return false;
}

}  // namespace

std::string NetTopology::Enter(const std::string& ns) {
  return "nsenter --net=/run/netns/" + ns + " ";
}

bool NetTopology::JoinInChild(const std::string& ns) {
  char path[256];
  const char prefix[] = "/run/netns/";
  size_t n = 0;
  for (const char* p = prefix; *p != '\0' && n + 1 < sizeof path; ++p) path[n++] = *p;
  for (char c : ns) {
    if (n + 1 >= sizeof path) return false;
    path[n++] = c;
  }
  path[n] = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

std::unique_ptr<NetTopology> NetTopology::Create(int nodes, std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root for network namespaces";
    return nullptr;
  }
  if (!Sh("command -v ip && command -v nsenter", why)) {
    *why = "needs ip (iproute2) and nsenter (util-linux)";
    return nullptr;
  }
  std::unique_ptr<NetTopology> t(new NetTopology());
  std::string tag = "spk" + std::to_string(::getpid());
  t->hub_ns_ = tag + "-hub";
  auto in = [](const std::string& ns) { return "ip netns exec " + ns + " "; };
  if (!Sh("ip netns add " + t->hub_ns_, why)) return nullptr;
  t->created_.push_back(t->hub_ns_);
  const std::string hub = in(t->hub_ns_);
  if (!Sh(hub + "ip link set lo up", why) || !Sh(hub + "ip link add br0 type bridge", why) ||
      !Sh(hub + "ip addr add 10.77.0.1/24 dev br0", why) || !Sh(hub + "ip link set br0 up", why)) {
    return nullptr;
  }
  for (int i = 0; i < nodes; ++i) {
    std::string ns = tag + "-n" + std::to_string(i);
    if (!Sh("ip netns add " + ns, why)) return nullptr;
    t->created_.push_back(ns);
    t->node_ns_.push_back(ns);
    std::string veth = "vn" + std::to_string(i);
    if (!Sh(hub + "ip link add " + veth + " type veth peer name eth0 netns " + ns, why) ||
        !Sh(hub + "ip link set " + veth + " master br0 up", why) ||
        !Sh(in(ns) + "ip link set lo up", why) ||
        !Sh(in(ns) + "ip addr add " + t->node_ip(i) + "/24 dev eth0", why) ||
        !Sh(in(ns) + "ip link set eth0 up", why)) {
      return nullptr;
    }
  }
  // Links come up asynchronously; wait for each node's interface to be up.
  for (int i = 0; i < nodes; ++i) {
    std::string check =
        "ip -n " + t->node_ns_[static_cast<size_t>(i)] + " -o link show eth0 | grep -q 'state UP'";
    bool up = false;
    for (int attempt = 0; attempt < 50 && !up; ++attempt) {
      up = Sh(check, nullptr);
      if (!up) ::usleep(100 * 1000);
    }
    if (!up) {
      *why = "the veth of node namespace " + std::to_string(i) + " did not come up";
      return nullptr;
    }
  }
  return t;
}

NetTopology::~NetTopology() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) Sh("ip netns del " + *it, nullptr);
}

}  // namespace spoke::testing
