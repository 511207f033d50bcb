#include "csi-controller/controller_config.h"

#include "common/log.h"
#include "common/volume.h"

namespace spoke::controller {

Result<ControllerConfig> ControllerConfig::Read(ConfigReader& reader) {
  ControllerConfig c;
  c.hub_timeout_seconds = reader.Seconds("hubTimeoutSeconds", c.hub_timeout_seconds, 1, 600);
  c.archive_prefix = reader.String("archivePrefix", c.archive_prefix);
  if (c.archive_prefix.empty()) {
    reader.Reject("archivePrefix", "must not be empty (archived and live volumes would clash)");
  } else if (c.archive_prefix.find('/') != std::string::npos ||
             !NormalizeRelativePath(c.archive_prefix, "archivePrefix")) {
    reader.Reject("archivePrefix",
                  "must be a plain file-name prefix, got '" + c.archive_prefix + "'");
  }
  std::string mode = reader.String("scratchDirMode", "0777");
  auto parsed = ParseInt(mode, 0, 07777);
  bool octal = !mode.empty() && mode.find_first_not_of("01234567") == std::string::npos;
  if (!octal || !parsed) {
    reader.Reject("scratchDirMode", "must be an octal mode like 0777 or 0770, got '" + mode + "'");
  } else {
    c.scratch_dir_mode = static_cast<uint32_t>(std::stoul(mode, nullptr, 8));
  }
  c.log_level = reader.Enum("logLevel", c.log_level, {"debug", "info", "warn", "error"});
  SPOKE_RETURN_IF_ERROR(reader.Finish());
  return c;
}

Result<ControllerConfig> ControllerConfig::Load(const std::string& path) {
  SPOKE_TRY(auto reader, ConfigReader::LoadFile(path));
  return Read(reader);
}

}  // namespace spoke::controller
