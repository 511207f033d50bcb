#pragma once
#include <string_view>
namespace spoke {
// The build's version (CMake project version), reported by CSI Identity and --version.
std::string_view Version();
inline constexpr std::string_view kDriverName = "spoke.csi.dev";
}  // namespace spoke
