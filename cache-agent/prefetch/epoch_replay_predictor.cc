#include "cache-agent/prefetch/epoch_replay_predictor.h"

#include <algorithm>

namespace spoke::agent {

EpochReplayPredictor::EpochReplayPredictor(const AccessTracker& tracker,
                                           const BlockPresence& presence, Options options)
    : TrackerExpert(tracker, presence), options_(options) {}

void EpochReplayPredictor::Rebuild() {
  built_for_epoch_ = tracker_.epoch();
  prev_pos_.assign(tracker_.file_count(), 0);
  const auto& prev = tracker_.previous_order();
  for (size_t i = 0; i < prev.size(); ++i) prev_pos_[prev[i]] = static_cast<uint32_t>(i + 1);
  // Keep the run across the boundary: a replayed epoch continues the last one's run.
  if (have_cursor_ && run_ > 0) {
    cursor_ = 0;
    frontier_ = 1;
  } else {
    have_cursor_ = false;
  }
}

void EpochReplayPredictor::OnOpen(const OpenEvent&) {
  if (tracker_.epoch() == 0) return;
  if (built_for_epoch_ != tracker_.epoch()) Rebuild();
  const auto f = tracker_.last_opened();
  if (!f) return;
  if (*f >= prev_pos_.size()) prev_pos_.resize(tracker_.file_count(), 0);
  if (prev_pos_[*f] == 0) return;  // a file the last epoch did not read: no evidence
  const uint32_t pos = prev_pos_[*f] - 1;
  if (have_cursor_) {
    if (pos > cursor_ && pos <= cursor_ + options_.window) {
      ++run_;
      frontier_ = frontier_ > pos - cursor_ ? frontier_ - (pos - cursor_) : 1;
      cursor_ = pos;
      return;
    }
    if (pos == cursor_ && run_ > 0) return;  // the first file after a boundary
    if (pos < cursor_ && pos + options_.window >= cursor_) return;  // interleaved worker
  }
  have_cursor_ = true;
  cursor_ = pos;
  run_ = 0;
  frontier_ = 1;
}

void EpochReplayPredictor::OnForget(FileIndex f) {
  if (tracker_.epoch() == 0 || built_for_epoch_ != tracker_.epoch()) return;  // rebuilt later
  if (f >= prev_pos_.size() || prev_pos_[f] == 0) return;
  const uint32_t pos = prev_pos_[f] - 1;
  prev_pos_[f] = 0;  // the slot's next file was not in the last epoch
  const auto& prev = tracker_.previous_order();
  for (size_t i = pos + 1; i < prev.size(); ++i) --prev_pos_[prev[i]];
  if (have_cursor_ && cursor_ > pos) --cursor_;
}

void EpochReplayPredictor::OnForgetMany(std::span<const FileIndex>,
                                        const std::vector<bool>& dying) {
  if (tracker_.epoch() == 0 || built_for_epoch_ != tracker_.epoch()) return;  // rebuilt later
  // One pass over the previous order: each survivor moves down by the forgotten files before
  // it, and the cursor by those before it (OnForget: a file at a position below the cursor).
  const auto& prev = tracker_.previous_order();
  uint32_t gone = 0;
  uint32_t gone_before_cursor = 0;
  for (size_t i = 0; i < prev.size(); ++i) {
    const FileIndex f = prev[i];
    if (f >= prev_pos_.size() || prev_pos_[f] == 0) continue;
    if (f < dying.size() && dying[f]) {
      if (prev_pos_[f] - 1 < cursor_) ++gone_before_cursor;
      prev_pos_[f] = 0;
      ++gone;
    } else {
      prev_pos_[f] -= gone;
    }
  }
  if (have_cursor_) cursor_ -= gone_before_cursor;
}

void EpochReplayPredictor::Predict(uint64_t budget_bytes, uint32_t block_size,
                                   std::vector<PrefetchRequest>* out) {
  if (!have_cursor_ || tracker_.epoch() == 0 || built_for_epoch_ != tracker_.epoch()) return;
  const auto& prev = tracker_.previous_order();
  if (prev.empty()) return;
  uint64_t budget = budget_bytes;
  const uint64_t files_ahead = std::min<uint64_t>(
      options_.max_files_ahead, run_ >= 16 ? uint64_t{1} << 16 : uint64_t{1} << run_);
  const bool wrap = run_ >= options_.wrap_run;
  double rank = 0;
  uint64_t looked = 0;
  const size_t n = prev.size();
  bool contiguous = true;  // every file between frontier_ and step was present
  for (size_t step = frontier_;
       step < (wrap ? n : n - cursor_) && looked < files_ahead && budget > 0; ++step) {
    const size_t i = cursor_ + step;
    const bool wrapped = i >= n;
    const FileIndex f = prev[wrapped ? i - n : i];
    if (!wrapped && tracker_.ReadThisEpoch(f)) {
      if (contiguous) frontier_ = step + 1;
      continue;
    }
    ++looked;
    const uint64_t blocks = tracker_.file(f).Blocks(block_size);
    const Emit e = EmitFile(f, 0, blocks, rank, &budget, out);
    if (contiguous && e.all_present) {
      frontier_ = step + 1;
    } else {
      contiguous = false;
    }
    rank += static_cast<double>(blocks);
  }
}

}  // namespace spoke::agent
