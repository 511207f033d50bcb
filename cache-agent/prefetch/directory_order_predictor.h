// DirectoryOrderPredictor: after file k of a directory listing (sorted by name) is opened,
// files k+1, k+2, ... of that listing come next. Confidence grows with the run of opens
// that followed the listing: with no run it proposes one file ahead (cheap exploration),
// after r consecutive in-order opens 2^r files (up to `max_files_ahead`). Several workers
// that split an ordered listing open files slightly out of order: an open up to `window`
// positions ahead of the cursor still counts as in order, one behind it is neutral.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <span>
#include <string_view>
#include <vector>

#include "cache-agent/prefetch/tracker_expert.h"

namespace spoke::agent {

class DirectoryOrderPredictor final : public TrackerExpert {
 public:
  struct Options {
    uint32_t max_files_ahead = 256;  // bounded by the scheduler's budget anyway
    uint32_t window = 16;            // loader workers interleave this many files
  };
  DirectoryOrderPredictor(const AccessTracker& tracker, const BlockPresence& presence,
                          Options options);
  DirectoryOrderPredictor(const AccessTracker& tracker, const BlockPresence& presence)
      : DirectoryOrderPredictor(tracker, presence, Options{}) {}

  std::string_view name() const override { return "directory"; }
  void OnOpen(const OpenEvent& e) override;
  void OnForget(FileIndex f) override;
  void OnForgetMany(std::span<const FileIndex> files, const std::vector<bool>& dying) override;
  void Predict(uint64_t budget_bytes, uint32_t block_size,
               std::vector<PrefetchRequest>* out) override;

 private:
  Options options_;
  DirIndex dir_ = 0;  // valid with have_cursor_
  bool have_cursor_ = false;
  uint32_t cursor_ = 0;  // highest listing position opened in the current run
  uint32_t run_ = 0;
};

}  // namespace spoke::agent
