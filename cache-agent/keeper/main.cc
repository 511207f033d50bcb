// spoke-fuse-keeper: holds the /dev/fuse descriptors of spokectl mounts outside Kubernetes, so
// that a crash or an upgrade of spoke-cache-agent leaves every mount connected. It is small on
// purpose and is never upgraded with the agent (in Kubernetes, spoke-csi-node embeds the same
// server).
//
//   spoke-fuse-keeper --socket /run/spoke/fuse-keeper.sock [--orphan-timeout 300]
//                     [--handover-wait 40] [--log-level info] [--version]
//
// --orphan-timeout: seconds without an agent (no lease, no request) after which the kept
// connections are released, so their mounts fail (ECONNABORTED) instead of waiting forever for
// an agent that is not coming back; 0 = never.
//
// SIGTERM/SIGINT stop it; the descriptors it held close with it (the agent keeps its own
// duplicates, so mounts stay up while the agent runs and the agent re-puts them on reconnect).
// When no agent holds them at that moment (the agent restarting too: it handed them here and
// left), it first serves until the next agent has taken them over, for at most
// --handover-wait seconds (0 = stop at once), and refuses new ones from then on.
#include <signal.h>

#include <iostream>
#include <string>

#include "common/config.h"
#include "common/fd_keeper.h"
#include "common/log.h"
#include "common/version.h"

namespace {

constexpr const char* kUsage =
    "usage: spoke-fuse-keeper [--socket /run/spoke/fuse-keeper.sock] [--orphan-timeout 300]\n"
    "                         [--handover-wait 40] [--log-level debug|info|warn|error]\n"
    "                         [--version]\n";

int Die(const std::string& msg) {
  std::cerr << "spoke-fuse-keeper: " << msg << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spoke;
  FdKeeperServer::Config config;
  config.socket_path = "/run/spoke/fuse-keeper.sock";
  config.orphan_timeout = std::chrono::seconds(300);
  std::string level = "info";
  std::chrono::seconds handover_wait{40};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--version") {
      std::cout << "spoke-fuse-keeper " << Version() << "\n";
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--orphan-timeout") {
      if (i + 1 >= argc) return Die(arg + " needs a value\n" + kUsage);
      auto secs = ParseInt(argv[++i], 0, 86400);
      if (!secs) return Die("--orphan-timeout (seconds): " + secs.error().message());
      config.orphan_timeout = std::chrono::seconds(*secs);
    } else if (arg == "--handover-wait") {
      if (i + 1 >= argc) return Die(arg + " needs a value\n" + kUsage);
      auto secs = ParseInt(argv[++i], 0, 600);
      if (!secs) return Die("--handover-wait (seconds): " + secs.error().message());
      handover_wait = std::chrono::seconds(*secs);
    } else if (arg == "--socket" || arg == "--log-level") {
      if (i + 1 >= argc) return Die(arg + " needs a value\n" + kUsage);
      (arg == "--socket" ? config.socket_path : level) = argv[++i];
    } else {
      return Die("unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  auto parsed = log::ParseLevel(level);
  if (!parsed) return Die("--log-level must be debug|info|warn|error, got '" + level + "'");
  log::SetLevel(*parsed);
  if (auto s = config.Validate(); !s) return Die(s.error().message());

  // Block the stop signals before any thread starts, then wait for one of them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  FdKeeperServer server(config);
  if (auto s = server.Start(); !s) return Die(s.error().message());
  int sig = 0;
  sigwait(&set, &sig);
  log::Info("fd keeper stopping", {{"signal", sig}, {"kept", server.size()}});
  server.FinishServing(handover_wait);
  server.Stop();
  return 0;
}
