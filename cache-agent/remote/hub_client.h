// The hub client a volume's address asks for: LibnfsRemote for NFSv3, Nfs4Remote for NFSv4.1. Both
// are RemoteFs; everything above (metadata, cache, peers, keeper) is the same.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <memory>
#include <string>

#include "cache-agent/remote/libnfs_remote.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

struct HubClient {
  std::unique_ptr<RemoteFs> remote;
  std::string name;  // "host:port", for logs and errors
};

// Connects to <share>/<root> of `hub` with the protocol hub.nfs_version names.
Result<HubClient> ConnectHub(const HubAddress& hub, const std::string& root,
                             const LibnfsRemote::Config& config, metrics::Registry* registry,
                             const metrics::Labels& labels = {});

}  // namespace spoke::agent
