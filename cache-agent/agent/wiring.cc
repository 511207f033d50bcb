#include "cache-agent/agent/wiring.h"

#include <utility>

#include "common/log.h"

// SPOKE_HAVE_BLOCK_CACHE / SPOKE_HAVE_FUSE_MOUNTER are set by CMake when the cache and
// fuse libraries exist in the tree.
#if SPOKE_HAVE_BLOCK_CACHE
#include "cache-agent/cache/block_cache_factory.h"  // OpenBlockCache, MakeLruPolicy
#endif
#if SPOKE_HAVE_FUSE_MOUNTER
#include "cache-agent/fuse/fuse_volume_mounter.h"
#endif
#if SPOKE_HAVE_PREFETCH
#include "cache-agent/prefetch/nothrash_policy.h"
#endif

namespace spoke::agent {
namespace {

using PolicyFactory = Result<std::unique_ptr<EvictionPolicy>> (*)(const BlockCache::Config&);

struct PolicyEntry {
  std::string_view name;
  PolicyFactory make;
};

Result<std::unique_ptr<EvictionPolicy>> MakeLru(const BlockCache::Config& cache) {
#if SPOKE_HAVE_BLOCK_CACHE
  return std::unique_ptr<EvictionPolicy>(MakeLruPolicy());
#else
  return Fail(Code::kUnavailable, "this build has no block cache (cache-agent/cache)");
#endif
}

#if SPOKE_HAVE_PREFETCH
// The prefetcher's policy for working sets larger than the cache: keeps a stable subset and
// never lets a prefetch evict a block predicted to be needed sooner.
Result<std::unique_ptr<EvictionPolicy>> MakeNoThrash(const BlockCache::Config&) {
  NoThrashPolicy::Config c;
  if (auto s = c.Validate(); !s) return std::unexpected(s.error().Wrap("evictionPolicy nothrash"));
  return std::unique_ptr<EvictionPolicy>(std::make_unique<NoThrashPolicy>(c));
}
#endif

// The one place that maps evictionPolicy names to policies.
constexpr PolicyEntry kPolicies[] = {
    {"lru", &MakeLru},
#if SPOKE_HAVE_PREFETCH
    {"nothrash", &MakeNoThrash},
#endif
};

#if !SPOKE_HAVE_FUSE_MOUNTER
// Until cache-agent/fuse lands: every mount fails clearly instead of pretending.
class MissingMounter : public VolumeMounter {
 public:
  Result<std::unique_ptr<MountedVolume>> Mount(const std::string&, const VolumeContext&,
                                               const std::string&, bool) override {
    return Fail(Code::kUnavailable, "this build has no FUSE mounter (cache-agent/fuse)");
  }
};
#endif

#if !SPOKE_HAVE_BLOCK_CACHE
// Until cache-agent/cache lands: a cache that holds nothing (every read is a miss).
class NullBlockCache : public BlockCache {
 public:
  explicit NullBlockCache(const BlockCache::Config& c) : config_(c) {}
  Result<size_t> Get(const BlockKey&, char*, size_t) override {
    return Fail(Code::kNotFound, "no block cache in this build");
  }
  Status Put(const BlockKey&, const char*, size_t, const AdmissionHint&) override {
    return Fail(Code::kNoSpace, "no block cache in this build");
  }
  bool Contains(const BlockKey&) const override { return false; }
  uint64_t Evict(uint64_t, uint64_t) override { return 0; }
  uint64_t VolumeBytes(uint64_t) const override { return 0; }
  BlockCacheStats Stats() const override {
    BlockCacheStats s;
    s.capacity_bytes = config_.capacity_bytes;
    s.degraded = true;
    return s;
  }
  uint32_t block_size() const override { return config_.block_size; }
  Status Close() override { return Ok(); }
  void SetListener(CacheListener*) override {}

 private:
  BlockCache::Config config_;
};
#endif

}  // namespace

const std::vector<std::string>& EvictionPolicyNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : kPolicies) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           const BlockCache::Config& cache) {
  for (const auto& p : kPolicies) {
    if (p.name == name) return p.make(cache);
  }
  return Fail(Code::kInvalidArgument, "evictionPolicy: unknown policy '" + std::string(name) + "'");
}

Result<std::unique_ptr<BlockCache>> OpenAgentCache(const AgentConfig& config,
                                                   metrics::Registry& registry) {
  BlockCache::Config cc;
  cc.dir = config.cache_dir;
  cc.capacity_bytes = config.cache_size_bytes;
  cc.block_size = config.block_size_bytes;
#if SPOKE_HAVE_BLOCK_CACHE
  if (auto s = cc.Validate(); !s) return std::unexpected(s.error());
  auto policy = MakeEvictionPolicy(config.eviction_policy, cc);
  if (!policy) return std::unexpected(policy.error());
  // >>> WIRING: the block cache.
  return OpenBlockCache(cc, std::move(*policy), registry);
#else
  log::Warn("this build has no block cache: every read goes to the hub");
  return std::unique_ptr<BlockCache>(std::make_unique<NullBlockCache>(cc));
#endif
}

Result<std::unique_ptr<VolumeMounter>> MakeAgentMounter(const AgentConfig& config,
                                                        BlockCache& cache,
                                                        metrics::Registry& registry) {
#if SPOKE_HAVE_FUSE_MOUNTER
  // >>> WIRING: the FUSE volume mounter.
  return MakeFuseVolumeMounter(config, cache, registry);
#else
  log::Warn("this build has no FUSE mounter: every mount will fail");
  return std::unique_ptr<VolumeMounter>(std::make_unique<MissingMounter>());
#endif
}

}  // namespace spoke::agent
