// Identity of one cached block: which volume, which file, which version of its content,
// which block. A changed file (new size/mtime) has a new version, so stale blocks are never
// served: they are simply never asked for again and age out.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <string_view>

namespace spoke::agent {

struct BlockKey {
  uint64_t volume = 0;   // VolumeKey(volume id)
  uint64_t file_id = 0;  // NFS fileid
  uint64_t version = 0;  // FileAttr::ContentVersion()
  uint64_t index = 0;    // block number: offset / block size

  bool operator==(const BlockKey&) const = default;
};

// Stable 64-bit key of a volume id string (persisted in block headers).
uint64_t VolumeKey(std::string_view volume_id);

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    uint64_t h = k.volume;
    h = (h ^ k.file_id) * 0x9E3779B97F4A7C15ull;
    h = (h ^ k.version) * 0x9E3779B97F4A7C15ull;
    h = (h ^ k.index) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// Who brought a block into the cache: 0 = a demand read, otherwise a prefetch expert's id
// (see prefetch/predictor.h). Used to score experts: a prefetched block read before it is
// evicted counts as a hit for its expert.
using ExpertId = uint8_t;
inline constexpr ExpertId kDemand = 0;

// How soon a block is expected to be read, for eviction decisions. Lower is sooner;
// kUnknownUse when nobody predicted it.
inline constexpr double kUnknownUse = 1e300;

struct AdmissionHint {
  ExpertId origin = kDemand;
  double predicted_use = kUnknownUse;  // prefetcher's estimate (seconds from now, or a rank)
};

}  // namespace spoke::agent
