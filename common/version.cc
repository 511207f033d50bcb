#include "common/version.h"
namespace spoke {
std::string_view Version() { return SPOKE_VERSION; }
}  // namespace spoke
