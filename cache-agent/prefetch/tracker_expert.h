// TrackerExpert: base of the experts that predict from the AccessTracker's view of the
// volume (directory order, epoch replay, epoch working set, hints). The scheduler owns the
// tracker and updates it before it forwards an event to an expert, so an expert reads the
// tracker's state as of the event it is handling.
//
// BlockPresence lets an expert skip blocks that are cached, being fetched, or already
// predicted by someone, so its budget goes to blocks that still need fetching (proposing
// cached blocks would be harmless, but it would waste the expert's budget).
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <span>
#include <vector>

#include "cache-agent/prefetch/access_tracker.h"
#include "cache-agent/prefetch/predictor.h"

namespace spoke::agent {

class BlockPresence {
 public:
  virtual ~BlockPresence() = default;
  // True when block `block` of `f` is cached, in flight, or already handed to the fetcher.
  virtual bool Present(const TrackedFile& f, uint64_t block) const = 0;
};

class TrackerExpert : public Predictor {
 public:
  TrackerExpert(const AccessTracker& tracker, const BlockPresence& presence)
      : tracker_(tracker), presence_(presence) {}

  // `f` is about to leave the tracker (AccessTracker::Forget): positions the expert keeps in
  // the tracker's orders or listings after it will shift down by one, and its slot may come
  // back as another file. Called under the scheduler's lock, before the tracker changes.
  virtual void OnForget(FileIndex f) {}
  // `files` (distinct, live) are about to leave the tracker together
  // (AccessTracker::ForgetMany); `dying` marks them (indexed by FileIndex, file_count()
  // entries). The expert must end as OnForget for each, each followed by the tracker's
  // Forget, would leave it. Called under the scheduler's lock, before the tracker changes:
  // every call sees the tracker with all of `files` still in it. The default calls OnForget
  // for each, which is right for an expert whose per-file state does not depend on
  // positions; one that keeps positions, or whose OnForget is O(files), overrides it with
  // one pass (a relisting may find 100k files gone at once).
  virtual void OnForgetMany(std::span<const FileIndex> files, const std::vector<bool>& dying) {
    for (FileIndex f : files) OnForget(f);
  }

 protected:
  struct Emit {
    uint64_t blocks = 0;       // blocks proposed
    bool all_present = false;  // every block of the range was present (nothing proposed)
  };
  // Proposes the blocks of [first, first + max_blocks) of `f` (clipped to the file) that
  // are not present, as runs, while `*budget_bytes` lasts (the last one may pass it). Block
  // i gets predicted_use `rank + (i - first)`. Takes each block's own length (a small
  // file's one block is its size, not a whole block) off `*budget_bytes`: counted in whole
  // blocks, a pass over files of 100 KB proposed a tenth of the bytes the link could carry.
  Emit EmitFile(FileIndex f, uint64_t first, uint64_t max_blocks, double rank,
                uint64_t* budget_bytes, std::vector<PrefetchRequest>* out) const;

  const AccessTracker& tracker_;
  const BlockPresence& presence_;
};

}  // namespace spoke::agent
