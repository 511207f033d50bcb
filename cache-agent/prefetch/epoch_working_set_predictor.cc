#include "cache-agent/prefetch/epoch_working_set_predictor.h"

#include <algorithm>

namespace spoke::agent {

void EpochWorkingSetPredictor::OnForget(FileIndex f) {
  if (epoch_ != tracker_.epoch()) return;  // the next Predict starts over
  const auto& candidates = epoch_ == 0 ? tracker_.tree_order() : tracker_.previous_order();
  const auto it = std::find(candidates.begin(), candidates.end(), f);
  if (it == candidates.end()) return;
  if (static_cast<size_t>(it - candidates.begin()) < cursor_) --cursor_;
  candidate_count_ = ~size_t{0};  // recount the blocks
}

void EpochWorkingSetPredictor::OnForgetMany(std::span<const FileIndex>,
                                            const std::vector<bool>& dying) {
  if (epoch_ != tracker_.epoch()) return;  // the next Predict starts over
  // One pass over the candidates: the cursor moves down by the forgotten ones before it.
  const auto& candidates = epoch_ == 0 ? tracker_.tree_order() : tracker_.previous_order();
  size_t before_cursor = 0;
  bool any = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const FileIndex f = candidates[i];
    if (f >= dying.size() || !dying[f]) continue;
    any = true;
    if (i < cursor_) ++before_cursor;
  }
  if (!any) return;
  cursor_ -= before_cursor;
  candidate_count_ = ~size_t{0};  // recount the blocks
}

void EpochWorkingSetPredictor::Predict(uint64_t budget_bytes, uint32_t block_size,
                                       std::vector<PrefetchRequest>* out) {
  const bool first = tracker_.epoch() == 0;
  const auto& candidates = first ? tracker_.tree_order() : tracker_.previous_order();
  if (epoch_ != tracker_.epoch()) {
    epoch_ = tracker_.epoch();
    cursor_ = 0;
    candidate_count_ = 0;
    candidate_blocks_ = 0;
    blocks_read_at_start_ = tracker_.blocks_read();
  }
  // The tree arrives from the metadata walk after the first predictions: recount when the
  // list grows, or every prediction of the first epoch gets a rank near 0 and expires
  // (counted wasted) long before a shuffled loader reaches it.
  if (candidate_count_ != candidates.size()) {
    candidate_count_ = candidates.size();
    candidate_blocks_ = 0;
    for (FileIndex f : candidates) candidate_blocks_ += tracker_.file(f).Blocks(block_size);
  }
  uint64_t budget = budget_bytes;
  const uint64_t read = tracker_.blocks_read() - blocks_read_at_start_;
  const double remaining =
      candidate_blocks_ > read ? static_cast<double>(candidate_blocks_ - read) : 1.0;
  const double rank = remaining / 2;
  bool contiguous = true;
  for (size_t i = cursor_; i < candidates.size() && budget > 0; ++i) {
    const FileIndex f = candidates[i];
    if (tracker_.ReadThisEpoch(f)) {
      if (contiguous) cursor_ = i + 1;
      continue;
    }
    const size_t first_new = out->size();
    const Emit e = EmitFile(f, 0, tracker_.file(f).Blocks(block_size), rank, &budget, out);
    for (size_t k = first_new; k < out->size(); ++k) (*out)[k].within_epoch = true;
    if (contiguous && e.all_present) {
      cursor_ = i + 1;
    } else {
      contiguous = false;
    }
  }
}

}  // namespace spoke::agent
