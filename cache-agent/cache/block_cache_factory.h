// Everything a caller needs to open the block cache: OpenBlockCache and MakeLruPolicy.
//   auto cache = OpenBlockCache(config, MakeLruPolicy(), &registry);
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <memory>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/eviction_policy.h"
#include "common/metrics.h"

namespace spoke::agent {

// Same as OpenBlockCache(config, policy, &metrics).
inline Result<std::unique_ptr<BlockCache>> OpenBlockCache(const BlockCache::Config& config,
                                                          std::unique_ptr<EvictionPolicy> policy,
                                                          metrics::Registry& metrics) {
  return OpenBlockCache(config, std::move(policy), &metrics);
}

}  // namespace spoke::agent
