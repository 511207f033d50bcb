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
  {
    ConfigReader in = r.Child("inlineVolumes");
    InlinePolicy& p = c->inline_volumes;
    p.servers = in.StringList("servers", p.servers);
    p.share_prefixes = in.StringList("sharePrefixes", p.share_prefixes);
    p.modes = in.StringList("modes", p.modes);
    for (const auto& prefix : p.share_prefixes) {
      if (prefix.empty() || prefix.front() != '/' || (prefix.size() > 1 && prefix.back() == '/'))
        in.Reject("sharePrefixes",
                  "each must be an absolute path without a trailing '/', got '" + prefix + "'");
    }
    for (const auto& m : p.modes) {
      if (m != "dataset" && m != "scratch")
        in.Reject("modes", "each must be dataset or scratch, got '" + m + "'");
    }
    if (auto s = in.Finish(); !s) return s;
  }
  double seconds = r.Seconds("agentTimeoutSeconds",
                             std::chrono::duration<double>(c->agent_timeout).count(), 1, 600);
  c->agent_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  c->fuse_keeper_socket = r.String("fuseKeeperSocket", c->fuse_keeper_socket);
  c->fuse_keeper_orphan_timeout = std::chrono::seconds(static_cast<int64_t>(
      r.Seconds("fuseKeeperOrphanTimeoutSeconds",
                static_cast<double>(c->fuse_keeper_orphan_timeout.count()), 0, 86400)));
  c->fuse_keeper_handover = std::chrono::seconds(static_cast<int64_t>(r.Seconds(
      "fuseKeeperHandOverSeconds", static_cast<double>(c->fuse_keeper_handover.count()), 0, 600)));
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

bool UnderPrefix(const std::string& path, const std::string& prefix) {
  if (prefix == "/") return true;
  return path == prefix || (path.starts_with(prefix) && path[prefix.size()] == '/');
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

Status InlinePolicy::Check(const std::map<std::string, std::string>& attrs) const {
  auto get = [&](const char* k) {
    auto it = attrs.find(k);
    return it == attrs.end() ? std::string() : it->second;
  };
  auto refuse = [](std::string rule, std::string why) {
    return Fail(Code::kInvalidArgument, "inline volume refused by the node's " + rule + ": " + why);
  };
  if (servers.empty() || share_prefixes.empty()) {
    return refuse("inlineVolumes policy",
                  "inline volumes are not enabled on this node (no servers or sharePrefixes "
                  "allowed); use a PersistentVolumeClaim");
  }
  std::string server = get("server");
  bool server_ok = false;
  for (const auto& s : servers) server_ok = server_ok || s == server;
  if (!server_ok) {
    return refuse("inlineVolumes.servers",
                  "server '" + server + "' is not one of " + Join(servers));
  }
  std::string share = get("share");
  bool share_ok = false;
  for (const auto& p : share_prefixes) share_ok = share_ok || UnderPrefix(share, p);
  if (!share_ok) {
    return refuse("inlineVolumes.sharePrefixes",
                  "share '" + share + "' is not under " + Join(share_prefixes));
  }
  std::string mode = get("mode").empty() ? "dataset" : get("mode");
  bool mode_ok = false;
  for (const auto& m : modes) mode_ok = mode_ok || m == mode;
  if (!mode_ok) {
    return refuse("inlineVolumes.modes", "mode '" + mode + "' is not one of " + Join(modes));
  }
  for (const char* k : {"hubIdentity", "hubUid", "hubGid", "allowRoot"}) {
    if (attrs.contains(k)) {
      return refuse("inlineVolumes policy",
                    std::string(k) + " is a StorageClass parameter; a pod spec cannot set it");
    }
  }
  return Ok();
}

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
