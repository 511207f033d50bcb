// EpochWorkingSetPredictor: the files an epoch is certain to read.
//  - First epoch, before any history: the volume's whole walked tree (AddTreeFile), in walk
//    order, is the working set. Fetched in the background; the scheduler's space budget
//    keeps it within the cache, the fetcher serves demand misses first.
//  - Later epochs: the files read last epoch and not yet read in this one.
// The order inside an epoch is unknown (usually a fresh permutation), so every block is
// given the same predicted_use: half the blocks still to come this epoch (the expected
// position of a random one). Files already read this epoch or present in the cache are
// skipped by a cursor that only moves forward within an epoch.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <span>
#include <vector>

#include "cache-agent/prefetch/tracker_expert.h"

namespace spoke::agent {

class EpochWorkingSetPredictor final : public TrackerExpert {
 public:
  EpochWorkingSetPredictor(const AccessTracker& tracker, const BlockPresence& presence)
      : TrackerExpert(tracker, presence) {}

  std::string_view name() const override { return "working-set"; }
  void Predict(uint64_t budget_bytes, uint32_t block_size,
               std::vector<PrefetchRequest>* out) override;
  void OnForget(FileIndex f) override;
  void OnForgetMany(std::span<const FileIndex> files, const std::vector<bool>& dying) override;

 private:
  uint64_t epoch_ = ~uint64_t{0};
  size_t cursor_ = 0;              // into the epoch's candidate list
  size_t candidate_count_ = 0;     // size of the candidate list when last counted
  uint64_t candidate_blocks_ = 0;  // blocks of the candidate list, for predicted_use
  uint64_t blocks_read_at_start_ = 0;
};

}  // namespace spoke::agent
