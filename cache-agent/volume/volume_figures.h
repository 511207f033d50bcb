// What the control plane learns about one volume: its figures (VolumeStats), warm-up
// progress and hint verdicts. One type per thing; agent_service.cc maps them to the proto.
#pragma once

#if !__has_include("spoke_layer/volume.h")
#error "wrong-way include: cache-agent/volume/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache-agent/prefetch/clock.h"
#include "cache-agent/prefetch/prefetch_scheduler.h"  // ExpertStats

namespace spoke::agent {

// The agent's memory budget (shared by every volume); all zero without one.
struct MemoryFigures {
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t prefetch_bytes = 0;
  uint64_t store_queue_bytes = 0;
  uint64_t demand_bytes = 0;
  uint64_t hints_bytes = 0;
  uint64_t metadata_bytes = 0;
  uint64_t staged_bytes = 0;
  uint64_t write_back_bytes = 0;
  uint64_t refusals = 0;  // every use
};

struct VolumeFigures {
  uint64_t cache_bytes = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t hub_read_bytes = 0;
  uint64_t cache_read_bytes = 0;
  uint64_t checksum_failures = 0;
  bool hub_reachable = true;
  std::string last_hub_error;
  uint64_t hub_total_bytes = 0;
  uint64_t hub_available_bytes = 0;
  uint64_t hub_used_bytes = 0;
  uint64_t hub_total_inodes = 0;
  uint64_t hub_free_inodes = 0;
  uint64_t prefetched_bytes_used = 0;
  uint64_t prefetched_bytes_wasted = 0;
  double demand_miss_latency_ms_avg = 0;   // the fetcher's: per read that waited for the hub
  std::vector<ExpertStats> experts;        // the prefetcher's own figures
  uint64_t hints_rejected = 0;             // hint lines refused (invalid or over a bound)
  uint64_t hints_unresolved = 0;           // queued hints dropped: they named no file
  uint64_t metadata_inodes = 0;            // inodes the metadata cache holds
  uint64_t admission_declined_blocks = 0;  // prefetches not fetched: nowhere to keep them
  // The fetcher's staging buffer (BlockFetcher: prefetched blocks held while the cache is full).
  uint64_t staged_blocks_held = 0;
  uint64_t staged_bytes_held = 0;
  uint64_t staged_blocks = 0;
  uint64_t staged_hits = 0;
  uint64_t staged_dropped = 0;  // full, expired, memory refused
  uint64_t staged_evicted = 0;
  MemoryFigures memory;
};

struct WarmupFigures {
  uint64_t files_total = 0;
  uint64_t files_done = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_from_hub = 0;
  // The verify pass (WarmupOptions::verify): cached blocks read back and found good; blocks
  // fetched again because the cached one failed its check, was missing, or belonged to an
  // older version of its file; files whose version on the hub had changed.
  uint64_t blocks_verified = 0;
  uint64_t blocks_repaired = 0;
  uint64_t files_changed = 0;
};

// How one warm-up runs.
struct WarmupOptions {
  // Bytes per second the warm-up may ask the hub (or the peers) for; 0 = no limit. Readers
  // are never held by it (WarmRateLimiter).
  uint64_t rate_bytes_per_second = 0;
  // After the warm-up: re-read every cached block of the files (each checked against its
  // stored checksum), compare each file's version with the hub's attributes, and fetch again
  // what is bad, missing or stale.
  bool verify = false;
  // Time for the rate limit: null = the system's (tests give a ManualClock and a sleep that
  // advances it).
  const Clock* clock = nullptr;
  std::function<void(SteadyTime until)> sleep_until;
};

struct HintFigures {
  uint32_t accepted = 0;
  uint32_t rejected = 0;
};

}  // namespace spoke::agent
