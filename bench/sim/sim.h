// spoke-sim engine: replays an access trace through the real prefetcher (AccessTracker,
// experts, PrefetchScheduler) and a real EvictionPolicy (LruPolicy, NoThrashPolicy) over an
// in-memory cache model, with a simulated WAN. Discrete-event, virtual time: no mount, no
// network, no threads, fully deterministic.
//
// WAN model: at most `max_requests` block reads in flight (the libnfs pool); a request
// occupies the link for length / bandwidth (FIFO), then arrives one RTT later. Queued demand
// reads always start before queued prefetches and have `demand_reserved` slots of their own; a
// demand read of a block whose prefetch is still queued promotes it. The fetcher accepts prefetches
// up to `fetcher_prefetch_bytes` queued or in flight (PrefetchSink::Submit returns false beyond).
//
// Loader model: each worker runs its op list (open, read, close, compute, hint, barrier);
// a read blocks the worker until all its blocks are there. A block read is a hit (cached),
// late (its prefetch is in flight: the worker waits for the rest of it) or a demand miss
// (neither: fetched at demand priority).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache-agent/prefetch/prefetch_scheduler.h"

namespace spoke::sim {

struct TraceFile {
  std::string path;
  uint64_t size = 0;
};

struct Op {
  enum class Kind : uint8_t { kOpen, kRead, kClose, kCompute, kHint, kBarrier };
  Kind kind = Kind::kCompute;
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  double seconds = 0;  // kCompute
  uint32_t epoch = 0;  // kRead: which epoch (0-based) for the per-epoch figures
  uint32_t batch = 0;  // kRead: global batch number within the trace
  std::string text;    // kHint: lines for .spoke-hints
};

struct Trace {
  std::string name;
  std::string description;
  std::vector<TraceFile> files;
  std::vector<std::vector<Op>> workers;
  uint64_t cache_bytes = 0;
  uint32_t epochs = 0;
  uint64_t DatasetBytes() const;
};

struct WanConfig {
  double rtt_seconds = 0.060;
  double bandwidth_bytes_per_s = 1.25e9;  // 10 Gbit/s
  uint32_t max_requests = 256;            // block reads in flight over the pool
  uint32_t demand_reserved = 32;          // pool slots prefetches may not take
};

enum class Mode { kOff, kReadAhead, kExperts, kExpertsHints };
enum class Policy { kLru, kNoThrash };
std::string_view ModeName(Mode m);
std::string_view PolicyName(Policy p);

struct SimConfig {
  WanConfig wan;
  Mode mode = Mode::kExperts;
  Policy policy = Policy::kNoThrash;
  uint32_t block_size = 1 << 20;
  uint64_t fetcher_prefetch_bytes = 96ull << 20;
  uint64_t max_inflight_bytes = 64ull << 20;    // scheduler's
  uint64_t space_budget_bytes = 0;              // 0 = the trace's cache size
  agent::PrefetchScheduler::ExpertSet experts;  // tracker experts (hints only in kExpertsHints)
  bool read_ahead = true;  // add SequentialPredictor (the read-ahead expert) in modes >= kReadAhead
  bool walk_tree = true;   // AddTreeFile for every file before the run
  // The scheduler asks the cache before a prefetch crosses the WAN (PrefetchSink::WouldAdmit);
  // off: every prefetch is fetched and the policy may refuse it on arrival.
  bool admission_before_fetch = true;
  // Called after every read with the virtual time (tests watch budgets evolve).
  std::function<void(double now, const agent::PrefetchScheduler&)> on_read;
};

struct EpochResult {
  uint64_t block_reads = 0;
  uint64_t hit_blocks = 0;
  uint64_t late_blocks = 0;
  uint64_t demand_miss_blocks = 0;
  double stall_seconds = 0;  // summed over workers
  double end_seconds = 0;
  double churn = 0;        // share of the cache's blocks at the previous epoch end gone at this one
  uint64_t wan_bytes = 0;  // blocks that arrived over the WAN during the epoch
  double HitRate() const { return block_reads ? double(hit_blocks) / block_reads : 0; }
};

struct SimResult {
  std::string trace;
  Mode mode = Mode::kOff;
  Policy policy = Policy::kLru;
  uint64_t dataset_bytes = 0, cache_bytes = 0;
  uint64_t block_reads = 0, hit_blocks = 0, late_blocks = 0, demand_miss_blocks = 0;
  uint64_t first_batch_demand_misses = 0;  // in batch 0 (the hint test's warm-up)
  uint64_t after_first_batch_demand_misses = 0;
  double stall_seconds = 0;
  double elapsed_seconds = 0;
  uint64_t wan_bytes = 0, wan_demand_bytes = 0, wan_prefetch_bytes = 0;
  uint64_t refused_admission_bytes = 0;  // fetched but the policy refused to cache them
  uint64_t max_inflight_seen = 0;        // fetcher prefetch bytes, sampled at every Submit
  uint64_t max_outstanding_seen = 0;     // scheduler outstanding bytes, sampled per read
  uint32_t workers = 0;
  std::vector<EpochResult> epochs;
  agent::PrefetchStats prefetch;
  double DemandMissRate() const {
    return block_reads ? double(demand_miss_blocks) / block_reads : 0;
  }
};

SimResult RunSim(const Trace& trace, const SimConfig& config);

}  // namespace spoke::sim
