// The fd keeper embedded in spoke-csi-node. The node plugin stages every volume and is not
// restarted with the cache agent, so it holds a duplicate of each /dev/fuse connection the
// agent serves: an agent crash or a DaemonSet upgrade of the agent leaves every pod mount
// connected, and the new agent takes the connections back from here. The agent keeps its own
// duplicates too, so a restart of this plugin loses nothing (the agent re-puts on reconnect).
#pragma once

#include <memory>

#include "common/fd_keeper.h"
#include "common/status.h"
#include "csi-node/node_config.h"

namespace spoke::node {

// Starts the keeper on config.fuse_keeper_socket (creating its directory, 0755, if missing).
// Returns nullptr when no socket is configured. kAlreadyExists when another process serves the
// socket; kIo for socket errors.
Result<std::unique_ptr<FdKeeperServer>> StartFuseKeeper(const NodeConfig& config);

}  // namespace spoke::node
