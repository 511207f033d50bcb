// The seam between the agent's control plane (gRPC service, mount state, restore on start)
// and the data plane (a Volume served by a FUSE session, assembled in exe/). The control
// plane only sees MountedVolume and VolumeMounter; tests give it fakes.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache-agent/volume/volume_figures.h"
#include "common/fd_passing.h"
#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

class MountedVolume {
 public:
  virtual ~MountedVolume() = default;
  virtual const std::string& volume_id() const = 0;
  virtual const std::string& target_path() const = 0;
  virtual const VolumeContext& context() const = 0;
  virtual bool read_only() const = 0;

  // Figures for VolumeStats; asks the hub for FSSTAT (bounded by the hub timeout; on
  // failure hub_reachable=false and the error is kept, the call still succeeds).
  virtual VolumeFigures Figures() = 0;
  // Fetches every block under `path_prefix` (relative; "" = all) into the cache, calling
  // `progress` now and then. Stops early when `cancelled` becomes true (client went away).
  // `options`: a rate limit, a verify pass (volume_figures.h).
  virtual Status Warmup(const std::string& path_prefix, const WarmupOptions& options,
                        const std::function<void(const WarmupFigures&)>& progress,
                        const std::atomic<bool>& cancelled) = 0;
  // Drops cached blocks under `path_prefix` ("" = the whole volume). Returns blocks dropped.
  virtual Result<uint64_t> Evict(const std::string& path_prefix) = 0;
  virtual HintFigures Hint(const std::vector<std::string>& paths) = 0;
  // Ends the FUSE session and unmounts the target (lazily if busy). Idempotent.
  virtual Status Unmount() = 0;

  // Agent restarts (docs/agent-restarts.md). The /dev/fuse fd serving the mount (-1: none)
  // and the JSON object a successor needs to take the connection over (the recorded INIT).
  virtual int fuse_fd() const { return -1; }
  virtual std::string takeover_json() const { return "{}"; }
  // Stops serving without unmounting: requests wait in the kernel for the next agent, which
  // takes the connection over from the keeper. kTimeout when requests read were left
  // unanswered after `timeout` (the successor's resend covers them on Linux 6.9+).
  virtual Status HandOver(std::chrono::milliseconds /*timeout*/) { return Ok(); }
  // True once the connection was aborted (an adopted one whose lost requests could not be
  // resent): the mount is dead and must be re-created.
  virtual bool connection_lost() const { return false; }
};

class VolumeMounter {
 public:
  virtual ~VolumeMounter() = default;
  // Mounts the volume through FUSE at `target_path` (which exists). kUnavailable when the
  // hub cannot be reached within its timeout, kInvalidArgument for a bad context.
  virtual Result<std::unique_ptr<MountedVolume>> Mount(const std::string& volume_id,
                                                       const VolumeContext& context,
                                                       const std::string& target_path,
                                                       bool read_only) = 0;
  // Serves a live FUSE connection an earlier agent mounted at `target_path`: `fuse_fd` is the
  // keeper's duplicate, `takeover_json` what that agent's takeover_json() returned.
  virtual Result<std::unique_ptr<MountedVolume>> Adopt(const std::string& /*volume_id*/,
                                                       const VolumeContext& /*context*/,
                                                       const std::string& /*target_path*/,
                                                       bool /*read_only*/, UniqueFd /*fuse_fd*/,
                                                       const std::string& /*takeover_json*/) {
    return Fail(Code::kInternal, "this mounter cannot take FUSE connections over");
  }
};

}  // namespace spoke::agent
