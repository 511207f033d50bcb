// Outside Kubernetes nobody runs the fd keeper for the agent: the agent starts one itself
// (detached, in its own session, so that it outlives every agent process) when none answers
// at the configured socket. In Kubernetes the node plugin embeds the keeper and the chart
// turns this off (fuseKeeperStart: false).
#pragma once

#if !__has_include("spoke_layer/exe.h")
#error "wrong-way include: cache-agent/exe/ is not among this target's dependencies"
#endif

#include <chrono>
#include <string>

#include "common/status.h"

namespace spoke::agent {

// Ok when a keeper answers at `socket` (already running, or started here and answering within
// `timeout`). The keeper binary is spoke-fuse-keeper next to this executable, or in the build
// tree's cache-agent/keeper/, or on PATH; its log goes to `log_file`. kUnavailable otherwise.
Status EnsureFuseKeeper(const std::string& socket, const std::string& log_file,
                        std::chrono::milliseconds timeout);

}  // namespace spoke::agent
