#include "bench/loader/plan.h"

#include <algorithm>
#include <numeric>

#include "bench/loader/random.h"

namespace spoke::bench {

std::vector<uint32_t> EpochPermutation(uint64_t seed, uint32_t epoch, uint32_t n) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  Rng rng(MixSeed(seed, epoch));
  Shuffle(perm, rng);
  return perm;
}

EpochPlan PlanEpoch(const Manifest& manifest, uint64_t seed, uint32_t epoch, uint32_t batch,
                    uint32_t workers) {
  EpochPlan plan;
  plan.epoch = epoch;
  plan.per_worker.resize(workers);
  const auto files = static_cast<uint32_t>(manifest.entries.size());
  const auto perm = EpochPermutation(seed, epoch, files);

  if (!manifest.sharded()) {
    for (uint32_t start = 0; start < files; start += batch) {
      BatchPlan b;
      b.index = static_cast<uint32_t>(plan.batches.size());
      b.worker = b.index % workers;
      const uint32_t end = std::min(files, start + batch);
      for (uint32_t i = start; i < end; ++i) b.items.push_back({perm[i], 0});
      plan.per_worker[b.worker].push_back(b.index);
      plan.batches.push_back(std::move(b));
    }
    return plan;
  }

  // Each worker's own batches, from its sequential record stream.
  std::vector<std::vector<std::vector<ReadItem>>> worker_batches(workers);
  for (uint32_t k = 0; k < workers; ++k) {
    std::vector<ReadItem> current;
    for (uint32_t s = k; s < files; s += workers) {
      const uint32_t file = perm[s];
      for (uint32_t r = 0; r < manifest.entries[file].records; ++r) {
        current.push_back({file, r});
        if (current.size() == batch) {
          worker_batches[k].push_back(std::move(current));
          current.clear();
        }
      }
    }
    if (!current.empty()) worker_batches[k].push_back(std::move(current));
  }
  // Round-robin interleave, skipping exhausted workers.
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (uint32_t k = 0; k < workers; ++k) {
      if (round >= worker_batches[k].size()) continue;
      any = true;
      BatchPlan b;
      b.index = static_cast<uint32_t>(plan.batches.size());
      b.worker = k;
      b.items = std::move(worker_batches[k][round]);
      plan.per_worker[k].push_back(b.index);
      plan.batches.push_back(std::move(b));
    }
    if (!any) break;
  }
  return plan;
}

std::vector<std::string> HintPaths(const Manifest& manifest, const EpochPlan& plan) {
  std::vector<std::string> out;
  std::vector<bool> seen(manifest.entries.size(), false);
  for (const auto& b : plan.batches) {
    for (const auto& item : b.items) {
      if (seen[item.file]) continue;
      seen[item.file] = true;
      out.push_back(manifest.entries[item.file].path);
    }
  }
  return out;
}

}  // namespace spoke::bench
