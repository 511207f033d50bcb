// Small file helpers shared by the binaries.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace spoke {

// Replaces `path` with `bytes` whole: written to `path`.tmp (mode 0600), then renamed over it,
// so a reader (or the next process after a crash) sees the old content or the new, never a
// part. Not fsynced: it outlives a process crash, not a power loss. kIo (naming the file and
// errno) on failure; the temp file is removed then.
Status ReplaceFile(const std::string& path, std::string_view bytes);

}  // namespace spoke
