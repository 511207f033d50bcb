#include "cache-agent/prefetch/tracker_expert.h"

#include <algorithm>

namespace spoke::agent {

TrackerExpert::Emit TrackerExpert::EmitFile(FileIndex index, uint64_t first, uint64_t max_blocks,
                                            double rank, uint64_t* budget_bytes,
                                            std::vector<PrefetchRequest>* out) const {
  Emit emit;
  const TrackedFile& f = tracker_.file(index);
  const uint64_t end = std::min(f.Blocks(tracker_.block_size()), first + max_blocks);
  bool any_missing = false;
  PrefetchRequest* run = nullptr;
  for (uint64_t b = first; b < end; ++b) {
    if (presence_.Present(f, b)) {
      run = nullptr;
      continue;
    }
    any_missing = true;
    if (*budget_bytes == 0) break;
    if (run != nullptr && run->first_block + run->block_count == b) {
      ++run->block_count;
    } else {
      PrefetchRequest r;
      r.path = tracker_.Path(index);
      r.file_id = f.file_id;
      r.version = f.version;
      r.file_size = f.size;
      r.first_block = b;
      r.block_count = 1;
      r.predicted_use = rank + static_cast<double>(b - first);
      out->push_back(std::move(r));
      run = &out->back();
    }
    const uint64_t bs = tracker_.block_size();
    *budget_bytes -= std::min(*budget_bytes, std::min<uint64_t>(bs, f.size - b * bs));
    ++emit.blocks;
  }
  emit.all_present = !any_missing;
  return emit;
}

}  // namespace spoke::agent
