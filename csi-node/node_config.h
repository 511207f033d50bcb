// spoke-csi-node's configuration: command-line flags plus an optional YAML file
// (--config), validated once at start-up.
//
//   kubeletDir: /var/lib/kubelet   # when set, staging/target paths outside it are rejected
//   stateDir: /var/lib/kubelet/plugins/spoke.csi.dev   # ephemeral volumes' private mounts
//   topology: {region: eu-west-1, zone: eu-west-1a}     # or env SPOKE_REGION / SPOKE_ZONE
//   agentTimeoutSeconds: 30
//   fuseKeeperSocket: /run/spoke/fuse-keeper.sock   # hold the agent's /dev/fuse fds (optional)
//   fuseKeeperOrphanTimeoutSeconds: 300   # release them when no agent is back by then; 0 = never
//   fuseKeeperHandOverSeconds: 40   # stopping with connections no agent leases: wait this long
//   inlineVolumes:                       # CSI inline (ephemeral) volumes; none when absent
//     servers: [hub.example.com]         # exact server names or IPs
//     sharePrefixes: [/srv/datasets]     # share, or a directory prefix of it
//     modes: [dataset]                   # dataset | scratch
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace spoke::node {

// Which inline volumes a pod author may ask for. A pod spec is not an admin object: without
// an allow-list every inline volume is refused.
struct InlinePolicy {
  std::vector<std::string> servers;
  std::vector<std::string> share_prefixes;
  std::vector<std::string> modes = {"dataset"};

  // kInvalidArgument naming the rule (inlineVolumes.servers, .sharePrefixes, .modes) that
  // `attrs` (the pod's volumeAttributes) break. Identity parameters are StorageClass-only.
  Status Check(const std::map<std::string, std::string>& attrs) const;
};

struct NodeConfig {
  std::string endpoint = "unix:///csi/csi.sock";
  std::string node_id;
  std::string agent_socket = "/run/spoke/agent.sock";
  // kubelet's --root-dir. Only enforced when configured explicitly (kubelet_dir_enforced):
  // then a staging or target path outside it is InvalidArgument, so a bad request cannot make
  // a privileged plugin mount over arbitrary host paths. Unset (csi-sanity, local e2e),
  // any absolute path is accepted.
  std::string kubelet_dir = "/var/lib/kubelet";
  bool kubelet_dir_enforced = false;
  // Where ephemeral (inline) volumes get their private agent mount: <stateDir>/ephemeral/<id>.
  // Must be a path the agent and kubelet both see, hence under kubeletDir by default.
  std::string state_dir;
  std::string region;
  std::string zone;
  // Bound on every agent call. Mount may connect to a hub over a WAN (a few RTTs plus the
  // first FSSTAT), so this is generous; a dead agent fails at once anyway (connect refused).
  std::chrono::milliseconds agent_timeout{30000};
  // When set, the plugin embeds the fd keeper here: it holds a duplicate of every FUSE
  // connection the agent serves, so mounts stay connected across agent crashes and upgrades.
  std::string fuse_keeper_socket;
  // How long the keeper waits for an agent to take its connections back before releasing
  // them (their mounts then fail (ECONNABORTED) rather than hang); 0 = forever.
  std::chrono::seconds fuse_keeper_orphan_timeout{300};
  // When this plugin stops while it alone holds connections an agent handed over (the agent
  // and the plugin restarting together), how long it stays for the next agent to take them;
  // the pod's grace period covers it.
  std::chrono::seconds fuse_keeper_handover{40};
  InlinePolicy inline_volumes;

  // Non-empty node id, absolute paths, state dir inside kubeletDir when enforced.
  Status Validate() const;
};

// Reads the YAML file at `path` (empty = no file) into `config`, then fills topology from
// `getenv` (SPOKE_REGION / SPOKE_ZONE) where the file left it empty, and the state dir
// default. Errors name the key.
Status LoadNodeConfigFile(const std::string& path, NodeConfig* config,
                          const std::function<const char*(const char*)>& getenv);
// Same, from YAML text (tests).
Status LoadNodeConfigString(std::string_view yaml, NodeConfig* config,
                            const std::function<const char*(const char*)>& getenv);

}  // namespace spoke::node
