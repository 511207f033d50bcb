// spoke-csi-node: CSI Identity + Node on a unix socket. Stage asks the local cache agent to
// mount; publish bind-mounts the staged mount into the pod.
//
//   spoke-csi-node --endpoint unix:///csi/csi.sock --node-id $(NODE_NAME)
//                  --agent-socket /run/spoke/agent.sock --config /etc/spoke/node.yaml
//                  [--state-dir DIR] [--fuse-keeper-socket PATH] [--log-level info] [--version]
#include <cstdlib>
#include <cstring>
#include <iostream>
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

}  // namespace

int main(int argc, char** argv) {
  using namespace spoke;
  node::NodeConfig config;
  std::string config_path;
  std::string state_dir_flag;
  std::string keeper_flag;
  std::string level = "info";
  if (const char* n = std::getenv("NODE_NAME")) config.node_id = n;

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
      std::cout << "spoke-csi-node " << Version() << "\n";
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
      if (arg == "--config") config_path = value;
      if (arg == "--state-dir") state_dir_flag = value;
      if (arg == "--log-level") level = value;
      if (arg == "--fuse-keeper-socket") keeper_flag = value;
    } else {
      return Die("unknown argument '" + arg + "'\n" + kUsage);
    }
  }

  auto parsed_level = log::ParseLevel(level);
  if (!parsed_level) return Die("--log-level must be debug|info|warn|error, got '" + level + "'");
  log::SetLevel(*parsed_level);

  if (auto s = node::LoadNodeConfigFile(
          config_path, &config,
          [](const char* k) { return static_cast<const char*>(std::getenv(k)); });
      !s) {
    return Die(s.error().message());
  }
  if (!state_dir_flag.empty()) config.state_dir = state_dir_flag;
  if (!keeper_flag.empty()) config.fuse_keeper_socket = keeper_flag;
  if (auto s = config.Validate(); !s) return Die(s.error().message());
  if (auto s = UnixSocketPath(config.endpoint); !s) return Die(s.error().message());

  log::Info("spoke-csi-node starting",
            {{"version", Version()},
             {"node_id", config.node_id},
             {"endpoint", config.endpoint},
             {"agent_socket", config.agent_socket},
             {"kubelet_dir", config.kubelet_dir_enforced ? config.kubelet_dir : "(not enforced)"},
             {"state_dir", config.state_dir},
             {"region", config.region},
             {"zone", config.zone},
             {"agent_timeout_ms", static_cast<int64_t>(config.agent_timeout.count())}});

  // Threads started below (gRPC) inherit the blocked signals.
  BlockShutdownSignals();
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
  return 0;
}
