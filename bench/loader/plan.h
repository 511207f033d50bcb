// Epoch plans: which samples go in which batch, and which worker builds it.
//
// Map-style datasets (one sample per file), as PyTorch's DataLoader with shuffle=True: a fresh
// permutation of all samples per epoch, cut into batches of B (the last one may be short;
// drop_last=False), batch i built by worker i % W.
//
// Sharded datasets (iterable-style, as WebDataset): a fresh permutation of the shards per
// epoch; worker k streams shards k, k+W, k+2W, ... of it sequentially and cuts its own record
// stream into batches of B; the global batch order takes one batch from each worker in turn
// (skipping exhausted workers), which is how DataLoader interleaves iterable workers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/loader/dataset.h"

namespace spoke::bench {

struct ReadItem {
  uint32_t file = 0;    // index into Manifest::entries
  uint32_t record = 0;  // record inside a shard (0 for a whole-file sample)
  friend bool operator==(const ReadItem&, const ReadItem&) = default;
};

struct BatchPlan {
  uint32_t index = 0;   // position in the epoch's delivery order
  uint32_t worker = 0;  // the worker that builds it
  std::vector<ReadItem> items;
};

struct EpochPlan {
  uint32_t epoch = 0;
  std::vector<BatchPlan> batches;  // in delivery order
  // Batch indices each worker builds, in the order it builds them.
  std::vector<std::vector<uint32_t>> per_worker;
};

// A permutation of [0, n) that depends only on (seed, epoch).
std::vector<uint32_t> EpochPermutation(uint64_t seed, uint32_t epoch, uint32_t n);

// batch >= 1, workers >= 1.
EpochPlan PlanEpoch(const Manifest& manifest, uint64_t seed, uint32_t epoch, uint32_t batch,
                    uint32_t workers);

// The files the epoch will read, relative to the dataset root, in delivery order (each once).
std::vector<std::string> HintPaths(const Manifest& manifest, const EpochPlan& plan);

}  // namespace spoke::bench
