// EpochReplayPredictor: the previous epoch's open order, replayed. When the current epoch
// follows it (each open lands at most `window` positions past the cursor in the previous
// order), it proposes the files that follow the cursor there, skipping files already read
// this epoch: one file ahead with no run (exploration), then 2^run files, bounded by the
// budget. Once confident (run >= `wrap_run`) it runs past the end of the previous order
// into its beginning: the next epoch will replay it too, so the epoch boundary does not
// stall. A shuffled epoch never builds a run, so the expert stays at one file of guesses
// per open, and its precision (and so its budget) drops.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <span>
#include <vector>

#include "cache-agent/prefetch/tracker_expert.h"

namespace spoke::agent {

class EpochReplayPredictor final : public TrackerExpert {
 public:
  struct Options {
    uint32_t window = 16;   // loader workers reorder opens by this much
    uint32_t wrap_run = 8;  // in-order opens before predicting across the epoch boundary
    uint32_t max_files_ahead = 1 << 16;
  };
  EpochReplayPredictor(const AccessTracker& tracker, const BlockPresence& presence,
                       Options options);
  EpochReplayPredictor(const AccessTracker& tracker, const BlockPresence& presence)
      : EpochReplayPredictor(tracker, presence, Options{}) {}

  std::string_view name() const override { return "replay"; }
  void OnOpen(const OpenEvent& e) override;
  void OnForget(FileIndex f) override;
  void OnForgetMany(std::span<const FileIndex> files, const std::vector<bool>& dying) override;
  void Predict(uint64_t budget_bytes, uint32_t block_size,
               std::vector<PrefetchRequest>* out) override;

 private:
  void Rebuild();

  Options options_;
  uint64_t built_for_epoch_ = 0;
  std::vector<uint32_t> prev_pos_;  // FileIndex -> position in previous order + 1 (0 = absent)
  bool have_cursor_ = false;
  uint32_t cursor_ = 0;
  uint32_t run_ = 0;
  // Steps past the cursor known to be present (cached or fetching): scanning resumes there.
  size_t frontier_ = 1;
};

}  // namespace spoke::agent
