// spoke-csi-node: CSI Identity + Node on a unix socket. Stage asks the local cache agent to
// mount; publish bind-mounts the staged mount into the pod.
//
//   spoke-csi-node --endpoint unix:///csi/csi.sock --node-id $(NODE_NAME)
//                  --agent-socket /run/spoke/agent.sock --config /etc/spoke/node.yaml
//                  [--state-dir DIR] [--fuse-keeper-socket PATH] [--log-level info] [--version]
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "common/csi_identity.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/version.h"
#include "csi-node/agent_client.h"
#include "csi-node/fd_keeper_service.h"
#include "csi-node/mounter.h"
#include "csi-node/node_config.h"
#include "csi-node/node_server.h"

namespace {

constexpr const char* kUsage =
    "usage: spoke-csi-node --node-id ID [--endpoint unix:///csi/csi.sock]\n"
    "                      [--agent-socket /run/spoke/agent.sock] [--config node.yaml]\n"
    "                      [--state-dir DIR] [--fuse-keeper-socket PATH]\n"
    "                      [--log-level debug|info|warn|error] [--version]\n"
    "config (YAML): kubeletDir, stateDir, topology: {region, zone}, agentTimeoutSeconds,\n"
    "               fuseKeeperSocket\n"
    "env: NODE_NAME (default node id), SPOKE_REGION / SPOKE_ZONE (topology fallback)\n";

int Die(const std::string& msg) {
  std::cerr << "spoke-csi-node: " << msg << "\n";
  return 2;
}

// What the command line gives besides NodeConfig fields; state_dir and keeper_socket override
// the config file.
struct Flags {
  std::string config_path;
  std::string state_dir;
  std::string keeper_socket;
  std::string level = "info";
};

// Fills `flags` and the config's flag-only fields from argv; returns an exit code when the
// process should end now (--version, --help, a bad argument).
std::optional<int> ParseFlags(int argc, char** argv, Flags& flags,
                              spoke::node::NodeConfig& config) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (arg == "--version") {
      std::cout << "spoke-csi-node " << spoke::Version() << "\n";
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--endpoint" || arg == "--node-id" || arg == "--agent-socket" ||
               arg == "--config" || arg == "--state-dir" || arg == "--log-level" ||
               arg == "--fuse-keeper-socket") {
      if (!next()) return Die(arg + " needs a value\n" + kUsage);
      if (arg == "--endpoint") config.endpoint = value;
      if (arg == "--node-id") config.node_id = value;
      if (arg == "--agent-socket") config.agent_socket = value;
      if (arg == "--config") flags.config_path = value;
      if (arg == "--state-dir") flags.state_dir = value;
      if (arg == "--log-level") flags.level = value;
      if (arg == "--fuse-keeper-socket") flags.keeper_socket = value;
    } else {
      return Die("unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  return std::nullopt;
}

// The config file, then the flags over it, validated.
spoke::Status LoadConfig(const Flags& flags, spoke::node::NodeConfig& config) {
  SPOKE_RETURN_IF_ERROR(spoke::node::LoadNodeConfigFile(
      flags.config_path, &config,
      [](const char* k) { return static_cast<const char*>(std::getenv(k)); }));
  if (!flags.state_dir.empty()) config.state_dir = flags.state_dir;
  if (!flags.keeper_socket.empty()) config.fuse_keeper_socket = flags.keeper_socket;
  SPOKE_RETURN_IF_ERROR(config.Validate());
  if (auto s = spoke::UnixSocketPath(config.endpoint); !s) return std::unexpected(s.error());
  return spoke::Ok();
}

void LogStart(const spoke::node::NodeConfig& config) {
  spoke::log::Info(
      "spoke-csi-node starting",
      {{"version", spoke::Version()},
       {"node_id", config.node_id},
       {"endpoint", config.endpoint},
       {"agent_socket", config.agent_socket},
       {"kubelet_dir", config.kubelet_dir_enforced ? config.kubelet_dir : "(not enforced)"},
       {"state_dir", config.state_dir},
       {"region", config.region},
       {"zone", config.zone},
       {"agent_timeout_ms", static_cast<int64_t>(config.agent_timeout.count())},
       {"fuse_keeper_handover_s", static_cast<int64_t>(config.fuse_keeper_handover.count())}});
}

// Starts the fd keeper and serves CSI Identity and Node until a signal; the exit code.
int Serve(const spoke::node::NodeConfig& config) {
  using namespace spoke;
  // Before serving CSI: the agent may already be waiting to hand its connections over.
  auto keeper = node::StartFuseKeeper(config);
  if (!keeper) return Die(keeper.error().message());
  node::SyscallMounter mounter;
  node::AgentClient agent(config.agent_socket, config.agent_timeout);
  if (auto m = agent.ListMounts(); !m) {
    log::Warn("cache agent not answering yet; stage calls fail with UNAVAILABLE until it does",
              {{"error", m.error().message}});
  } else {
    log::Info("cache agent reachable", {{"mounts", m->size()}});
  }
  IdentityServer identity(!config.region.empty() || !config.zone.empty());
  node::NodeServer node_server(config, mounter, agent);

  GrpcServerOptions options;
  options.endpoint = config.endpoint;
  if (auto s = ServeUntilSignal(options, {&identity, &node_server}); !s) {
    log::Error("cannot serve", {{"error", s.error().message()}});
    return 1;
  }
  // An upgrade that restarts this plugin and the agent together: the agent handed its
  // connections here and left, so stay until the next agent takes them (bounded by
  // fuseKeeperHandOverSeconds, which the chart keeps below this pod's grace period).
  if (*keeper) (*keeper)->FinishServing(config.fuse_keeper_handover);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spoke;
  DisableAbseilDeadlockDetection();
  node::NodeConfig config;
  Flags flags;
  if (const char* n = std::getenv("NODE_NAME")) config.node_id = n;
  if (auto exit_code = ParseFlags(argc, argv, flags, config)) return *exit_code;

  auto parsed_level = log::ParseLevel(flags.level);
  if (!parsed_level) {
    return Die("--log-level must be debug|info|warn|error, got '" + flags.level + "'");
  }
  log::SetLevel(*parsed_level);
  if (auto s = LoadConfig(flags, config); !s) return Die(s.error().message());
  LogStart(config);
  // Threads started below (gRPC) inherit the blocked signals.
  BlockShutdownSignals();
  return Serve(config);
}
