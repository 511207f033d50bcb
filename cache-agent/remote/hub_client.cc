#include "cache-agent/remote/hub_client.h"

#include "cache-agent/remote/nfs4_remote.h"

namespace spoke::agent {

Result<HubClient> ConnectHub(const HubAddress& hub, const std::string& root,
                             const LibnfsRemote::Config& config, metrics::Registry* registry,
                             const metrics::Labels& labels) {
  const std::string name = hub.server + ":" + std::to_string(hub.nfs_port);
  if (hub.nfs_version == NfsVersion::kV3) {
    SPOKE_TRY(auto remote, LibnfsRemote::Connect(hub, root, config, registry, labels));
    return HubClient{std::move(remote), name};
  }
  SPOKE_TRY(auto remote, Nfs4Remote::Connect(hub, root, config, registry, labels));
  return HubClient{std::move(remote), name};
}

}  // namespace spoke::agent
