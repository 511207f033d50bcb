#include "cache-agent/cache/block_key.h"

#include <xxhash.h>

namespace spoke::agent {

uint64_t VolumeKey(std::string_view volume_id) {
  return XXH3_64bits(volume_id.data(), volume_id.size());
}

}  // namespace spoke::agent
