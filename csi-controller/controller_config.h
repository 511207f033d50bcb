// spoke-csi-controller settings (YAML, read once at start-up through common/config.h).
//   hubTimeoutSeconds: 10      # bound on every hub call; a StorageClass may override it
//   archivePrefix: archived-   # onDelete=archive renames <dir> to <prefix><dir>-<UTC time>
//   scratchDirMode: "0777"     # mode of the directories created for scratch volumes
//   logLevel: info
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace spoke::controller {

struct ControllerConfig {
  // 10 s: a mount is a few round trips, so even a 200 ms WAN answers with a wide margin; a
  // dead hub fails the CSI call with Unavailable instead of the sidecar's deadline (run
  // csi-provisioner with --timeout above this bound).
  double hub_timeout_seconds = 10;
  // Archived volumes stay next to the live ones, visibly marked.
  std::string archive_prefix = "archived-";
  // Scratch volumes are written by pods running as arbitrary uids: world-writable, like
  // csi-driver-nfs's default.
  uint32_t scratch_dir_mode = 0777;
  std::string log_level = "info";

  // Reads the keys above from `reader` and calls reader.Finish(). kInvalidArgument naming
  // the key.
  static Result<ControllerConfig> Read(ConfigReader& reader);
  // Missing path -> kNotFound.
  static Result<ControllerConfig> Load(const std::string& path);
};

}  // namespace spoke::controller
