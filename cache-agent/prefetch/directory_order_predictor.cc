#include "cache-agent/prefetch/directory_order_predictor.h"

#include <algorithm>

namespace spoke::agent {

DirectoryOrderPredictor::DirectoryOrderPredictor(const AccessTracker& tracker,
                                                 const BlockPresence& presence, Options options)
    : TrackerExpert(tracker, presence), options_(options) {}

void DirectoryOrderPredictor::OnOpen(const OpenEvent&) {
  const auto f = tracker_.last_opened();
  if (!f) return;
  const DirIndex dir = tracker_.DirectoryOf(*f);
  const uint32_t pos = tracker_.PositionInDirectory(*f);
  if (have_cursor_ && dir == dir_) {
    if (pos > cursor_ && pos <= cursor_ + options_.window) {
      ++run_;
      cursor_ = pos;
      return;
    }
    if (pos <= cursor_ && pos + options_.window >= cursor_) return;  // interleaved worker
  }
  dir_ = dir;
  cursor_ = pos;
  have_cursor_ = true;
  run_ = 0;
}

void DirectoryOrderPredictor::OnForget(FileIndex f) {
  if (!have_cursor_ || tracker_.DirectoryOf(f) != dir_) return;
  const uint32_t pos = tracker_.PositionInDirectory(f);
  if (pos > cursor_) return;
  // The listing closes over the file: the cursor keeps pointing past the files opened.
  if (cursor_ == 0) {
    have_cursor_ = false;
    run_ = 0;
  } else {
    --cursor_;
  }
}

void DirectoryOrderPredictor::OnForgetMany(std::span<const FileIndex> files,
                                           const std::vector<bool>&) {
  if (!have_cursor_) return;
  // OnForget one file at a time moves the cursor down once per file at or before it; in the
  // listing as it is now (nothing forgotten yet), that is once per such file, and when they
  // are all of the files up to the cursor the cursor goes.
  uint32_t at_or_before = 0;
  for (FileIndex f : files) {
    if (tracker_.DirectoryOf(f) == dir_ && tracker_.PositionInDirectory(f) <= cursor_) {
      ++at_or_before;
    }
  }
  if (at_or_before > cursor_) {
    have_cursor_ = false;
    run_ = 0;
  } else {
    cursor_ -= at_or_before;
  }
}

void DirectoryOrderPredictor::Predict(uint64_t budget_bytes, uint32_t block_size,
                                      std::vector<PrefetchRequest>* out) {
  if (!have_cursor_) return;
  uint64_t budget = budget_bytes;
  const auto& listing = tracker_.Directory(dir_);
  const uint64_t files_ahead =
      std::min<uint64_t>(options_.max_files_ahead, run_ >= 16 ? 1u << 16 : 1u << run_);
  double rank = 0;
  uint64_t looked = 0;
  for (size_t i = cursor_ + 1; i < listing.size() && looked < files_ahead && budget > 0; ++i) {
    const FileIndex f = listing[i];
    if (tracker_.ReadThisEpoch(f)) continue;
    ++looked;
    const uint64_t blocks = tracker_.file(f).Blocks(block_size);
    EmitFile(f, 0, blocks, rank, &budget, out);
    rank += static_cast<double>(blocks);
  }
}

}  // namespace spoke::agent
