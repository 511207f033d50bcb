// The seam between the agent's control plane (gRPC service, mount state, restore on start)
// and the data plane (VolumeFs behind a FUSE session). The control plane only sees
// MountedVolume and VolumeMounter; tests give it fakes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

struct ExpertFigures {
  std::string name;
  double precision = 0;
  double coverage = 0;
  uint64_t predicted_blocks = 0;
  uint64_t used_blocks = 0;
  uint64_t wasted_blocks = 0;
  uint64_t budget_bytes = 0;
};

struct VolumeFigures {
  uint64_t cache_bytes = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t hub_read_bytes = 0;
  uint64_t cache_read_bytes = 0;
  uint64_t checksum_failures = 0;
  bool hub_reachable = true;
  std::string last_hub_error;
  uint64_t hub_total_bytes = 0;
  uint64_t hub_available_bytes = 0;
  uint64_t hub_used_bytes = 0;
  uint64_t hub_total_inodes = 0;
  uint64_t hub_free_inodes = 0;
  uint64_t prefetched_bytes_used = 0;
  uint64_t prefetched_bytes_wasted = 0;
  double demand_miss_latency_ms_avg = 0;
  std::vector<ExpertFigures> experts;
};

struct WarmupFigures {
  uint64_t files_total = 0;
  uint64_t files_done = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_from_hub = 0;
};

struct HintFigures {
  uint32_t accepted = 0;
  uint32_t rejected = 0;
};

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
  virtual Status Warmup(const std::string& path_prefix,
                        const std::function<void(const WarmupFigures&)>& progress,
                        const std::atomic<bool>& cancelled) = 0;
  // Drops cached blocks under `path_prefix` ("" = the whole volume). Returns blocks dropped.
  virtual Result<uint64_t> Evict(const std::string& path_prefix) = 0;
  virtual HintFigures Hint(const std::vector<std::string>& paths) = 0;
  // Ends the FUSE session and unmounts the target (lazily if busy). Idempotent.
  virtual Status Unmount() = 0;
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
};

}  // namespace spoke::agent
