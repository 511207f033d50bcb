// Workload presets: dataset shape (what `gen` writes) and loader shape (what `run` uses).
// bench/loader/README.md documents each preset and how it is scaled from its source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spoke::bench {

enum class Workload { kReport, kResnet50, kUnet3d, kShards };

std::optional<Workload> ParseWorkload(std::string_view name);
std::string_view WorkloadName(Workload w);

// Sample size distribution: normal(mean, stddev) clamped to [min, max]; stddev 0 = fixed.
struct SizeDist {
  uint64_t mean = 0;
  uint64_t stddev = 0;
  uint64_t min = 0;
  uint64_t max = 0;
};

struct Preset {
  Workload workload;
  SizeDist sample_size;
  uint64_t default_samples;  // gen --samples when not given
  bool sharded;              // samples are records inside shard files read sequentially
  uint64_t shard_bytes;      // target shard size when sharded
  // Loader shape.
  uint32_t batch;
  uint32_t workers;
  uint32_t prefetch_factor;
  uint32_t accelerators;
  double compute_ms;  // per batch per accelerator
};

Preset PresetFor(Workload w);

}  // namespace spoke::bench
