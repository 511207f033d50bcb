// Bytes as lowercase hex and back, for binary values in text files and JSON.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace spoke {

std::string ToHex(std::string_view bytes);
// kInvalidArgument "<what> is not hex" for an odd length or a non-hex digit (either case).
Result<std::string> FromHex(std::string_view hex, std::string_view what);

}  // namespace spoke
