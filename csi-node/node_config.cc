#include "csi-node/node_config.h"

#include "common/config.h"
#include "csi-node/mounter.h"

namespace spoke::node {
namespace {

Status Apply(ConfigReader& r, NodeConfig* c,
             const std::function<const char*(const char*)>& getenv) {
  if (r.Has("kubeletDir")) {
    c->kubelet_dir = r.String("kubeletDir", c->kubelet_dir);
    c->kubelet_dir_enforced = true;
    if (c->kubelet_dir.empty() || c->kubelet_dir.front() != '/') {
      r.Reject("kubeletDir", "must be an absolute path, got '" + c->kubelet_dir + "'");
    }
  }
  c->state_dir = r.String("stateDir", c->state_dir);
  {
    ConfigReader topo = r.Child("topology");
    c->region = topo.String("region", c->region);
    c->zone = topo.String("zone", c->zone);
    if (auto s = topo.Finish(); !s) return s;
  }
  double seconds = r.Seconds("agentTimeoutSeconds",
                             std::chrono::duration<double>(c->agent_timeout).count(), 1, 600);
  c->agent_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  c->fuse_keeper_socket = r.String("fuseKeeperSocket", c->fuse_keeper_socket);
  if (auto s = r.Finish(); !s) return s;

  if (c->region.empty() && getenv) {
    if (const char* v = getenv("SPOKE_REGION")) c->region = v;
  }
  if (c->zone.empty() && getenv) {
    if (const char* v = getenv("SPOKE_ZONE")) c->zone = v;
  }
  if (c->state_dir.empty()) c->state_dir = CleanPath(c->kubelet_dir) + "/plugins/spoke.csi.dev";
  return Ok();
}

}  // namespace

Status NodeConfig::Validate() const {
  if (node_id.empty()) return Fail(Code::kInvalidArgument, "--node-id is required");
  if (agent_socket.empty() || agent_socket.front() != '/') {
    return Fail(Code::kInvalidArgument,
                "--agent-socket must be an absolute path, got '" + agent_socket + "'");
  }
  if (state_dir.empty() || state_dir.front() != '/') {
    return Fail(Code::kInvalidArgument,
                "stateDir must be an absolute path, got '" + state_dir + "'");
  }
  if (!fuse_keeper_socket.empty() && fuse_keeper_socket.front() != '/') {
    return Fail(Code::kInvalidArgument,
                "fuseKeeperSocket must be an absolute path, got '" + fuse_keeper_socket + "'");
  }
  if (agent_timeout.count() <= 0) {
    return Fail(Code::kInvalidArgument, "agentTimeoutSeconds must be positive");
  }
  return Ok();
}

Status LoadNodeConfigString(std::string_view yaml, NodeConfig* config,
                            const std::function<const char*(const char*)>& getenv) {
  SPOKE_TRY(auto r, ConfigReader::LoadString(yaml, "node config"));
  return Apply(r, config, getenv);
}

Status LoadNodeConfigFile(const std::string& path, NodeConfig* config,
                          const std::function<const char*(const char*)>& getenv) {
  if (path.empty()) return LoadNodeConfigString("{}", config, getenv);
  SPOKE_TRY(auto r, ConfigReader::LoadFile(path));
  return Apply(r, config, getenv);
}

}  // namespace spoke::node
