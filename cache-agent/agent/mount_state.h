// The agent's mount table on disk (stateDir/mounts.json): which volumes it had mounted where,
// so that a restarted agent mounts them again before kubelet or anyone notices. Written
// atomically (temp file + fsync + rename + directory fsync) on every change.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <string>
#include <vector>

#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

struct MountRecord {
  std::string volume_id;
  StringMap volume_context;
  std::string target_path;
  bool read_only = false;
  bool operator==(const MountRecord&) const = default;
};

// Missing file -> empty list. kInvalidArgument when the file is not a mount table (the
// message names the entry and field), kIo when it cannot be read.
Result<std::vector<MountRecord>> ReadMountState(const std::string& path);
// kIo when the directory is not writable or the disk fails.
Status WriteMountState(const std::string& path, const std::vector<MountRecord>& records);

}  // namespace spoke::agent
