// Predictor: one expert of the prefetcher. It watches the volume's accesses and proposes
// blocks to fetch before they are asked for. The first one is SequentialPredictor
// (per-open read-ahead); the prefetcher adds directory-order, epoch-replay, epoch-working-set
// and hint experts beside it. Predictors only predict; a scheduler decides what is fetched
// (budgets, demand first, cache space), and the fetcher does the I/O.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache-agent/cache/block_key.h"

namespace spoke::agent {

using SteadyTime = std::chrono::steady_clock::time_point;

// One open file of the volume (FUSE file handle).
struct OpenEvent {
  uint64_t handle = 0;
  std::string path;  // relative to the volume root
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  SteadyTime time{};
};

struct ReadEvent {
  uint64_t handle = 0;
  std::string path;
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t file_size = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool hit = false;  // every block it touched was cached
  SteadyTime time{};
};

struct CloseEvent {
  uint64_t handle = 0;
  SteadyTime time{};
};

// A proposal: blocks [first_block, first_block + block_count) of a file.
struct PrefetchRequest {
  std::string path;
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t file_size = 0;
  uint64_t first_block = 0;
  uint64_t block_count = 0;
  double predicted_use = kUnknownUse;  // lower = needed sooner (rank or seconds)
  ExpertId expert = kDemand;           // set by the scheduler from the predictor's id
  // A set prediction: the blocks are read some time in the current epoch, in an unknown
  // order (predicted_use is then only an expected position, for eviction). The scheduler
  // judges such a block against the epoch (used if read before the epoch ends), not
  // against its rank: a shuffled loader reads most of them long after any fixed rank.
  bool within_epoch = false;
};

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::string_view name() const = 0;
  // True when the predictions are the job's own disclosure (hints), not a guess from its
  // past: the scheduler budgets such an expert at its prior before its first verdict.
  virtual bool disclosed() const { return false; }

  virtual void OnOpen(const OpenEvent& e) {}
  virtual void OnRead(const ReadEvent& e) {}
  virtual void OnClose(const CloseEvent& e) {}

  // Appends proposals, most urgent first, totalling about `budget_bytes` (of the blocks' own
  // lengths; the last one may pass it).
  // Blocks already cached or in flight may be proposed again: the scheduler filters them.
  virtual void Predict(uint64_t budget_bytes, uint32_t block_size,
                       std::vector<PrefetchRequest>* out) = 0;
};

}  // namespace spoke::agent
