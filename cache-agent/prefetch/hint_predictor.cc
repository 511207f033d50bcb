#include "cache-agent/prefetch/hint_predictor.h"

#include <algorithm>
#include <string>

namespace spoke::agent {

Result<std::string> NormalizeHintPath(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return Fail(Code::kInvalidArgument, "hint: empty path");
  if (line.size() > kMaxHintPath) return Fail(Code::kInvalidArgument, "hint: path too long");
  if (line.front() == '/') return Fail(Code::kInvalidArgument, "hint: absolute path");
  if (line.find('\0') != std::string_view::npos) {
    return Fail(Code::kInvalidArgument, "hint: NUL byte in path");
  }
  std::string out;
  out.reserve(line.size());
  size_t start = 0;
  while (start <= line.size()) {
    size_t end = line.find('/', start);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view part = line.substr(start, end - start);
    if (part == "..") return Fail(Code::kInvalidArgument, "hint: '..' component");
    if (part.size() > kMaxHintComponent) {
      return Fail(Code::kInvalidArgument, "hint: path component too long");
    }
    if (!part.empty() && part != ".") {  // "./a/b" (find's output) is "a/b"
      if (!out.empty()) out.push_back('/');
      out.append(part);
    }
    start = end + 1;
  }
  if (out.empty()) return Fail(Code::kInvalidArgument, "hint: empty path");
  return out;
}

Status HintPredictor::Options::Validate() const {
  if (max_pending == 0) return Fail(Code::kInvalidArgument, "hints: max_pending must be > 0");
  if (max_pending_bytes < HintBytes(kMaxHintPath)) {
    return Fail(Code::kInvalidArgument, "hints: max_pending_bytes must hold one longest hint (" +
                                            std::to_string(HintBytes(kMaxHintPath)) + " bytes)");
  }
  if (max_scan == 0) return Fail(Code::kInvalidArgument, "hints: max_scan must be > 0");
  return Ok();
}

HintPredictor::HintPredictor(const AccessTracker& tracker, const BlockPresence& presence,
                             Options options)
    : TrackerExpert(tracker, presence), options_(options) {}

HintPredictor::~HintPredictor() {
  if (options_.memory != nullptr && pending_bytes_ > 0) {
    options_.memory->Release(MemoryBudget::Use::kHints, pending_bytes_);
  }
}

uint64_t HintPredictor::HintBytes(size_t path_length) {
  // The path's heap block (with malloc's overhead) in queue_ and again as a key of waiting_,
  // a queue Entry, a hash node with its vector, the vector's element and a bucket.
  // HintPredictor.ChargesAtLeastTheHeapAQueuedHintHolds measures it.
  return 2 * (uint64_t{path_length} + 24) + sizeof(Entry) + 160;
}

void HintPredictor::AddLine(std::string_view line, HintCounts* counts) {
  auto path = NormalizeHintPath(line);
  if (!path || pending_ >= options_.max_pending ||
      pending_bytes_ + HintBytes(path->size()) > options_.max_pending_bytes) {
    ++counts->rejected;
    return;
  }
  if (options_.memory != nullptr &&
      !options_.memory->TryAcquire(MemoryBudget::Use::kHints, HintBytes(path->size()))) {
    ++budget_rejected_;
    ++counts->rejected;
    return;
  }
  ++counts->accepted;
  pending_bytes_ += HintBytes(path->size());
  waiting_[*path].push_back(base_ + queue_.size());
  queue_.push_back(Entry{std::move(*path), false});
  ++pending_;
}

HintCounts HintPredictor::AddHints(std::string_view text) {
  HintCounts counts;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(text);
      if (partial_.size() > kMaxHintPath + 1) {  // cannot become valid: reject it now
        ++counts.rejected;
        partial_.clear();
      }
      break;
    }
    if (partial_.empty()) {
      AddLine(text.substr(0, nl), &counts);
    } else {
      partial_.append(text.substr(0, nl));
      AddLine(partial_, &counts);
      partial_.clear();
    }
    text.remove_prefix(nl + 1);
  }
  total_.accepted += counts.accepted;
  total_.rejected += counts.rejected;
  return counts;
}

HintCounts HintPredictor::FlushHints() {
  HintCounts counts;
  if (!partial_.empty()) {
    AddLine(partial_, &counts);
    partial_.clear();
  }
  total_.accepted += counts.accepted;
  total_.rejected += counts.rejected;
  return counts;
}

HintCounts HintPredictor::AddHintPaths(std::span<const std::string> paths) {
  HintCounts counts;
  for (const auto& p : paths) {
    if (p.find('\n') != std::string::npos) {
      ++counts.rejected;
      continue;
    }
    AddLine(p, &counts);
  }
  total_.accepted += counts.accepted;
  total_.rejected += counts.rejected;
  return counts;
}

void HintPredictor::PopConsumed() {
  while (!queue_.empty()) {
    Entry& head = queue_.front();
    if (!head.consumed) {
      if (consumed_past_head_ <= options_.stale_after) break;
      // The job skipped this hint: drop it.
      auto it = waiting_.find(head.path);
      if (it != waiting_.end()) {
        it->second.erase(it->second.begin());
        if (it->second.empty()) waiting_.erase(it);
      }
      --pending_;
    } else if (head.counted) {
      --consumed_past_head_;
    }
    pending_bytes_ -= HintBytes(head.path.size());
    if (options_.memory != nullptr) {
      options_.memory->Release(MemoryBudget::Use::kHints, HintBytes(head.path.size()));
    }
    queue_.pop_front();
    ++base_;
  }
  if (queue_.empty()) consumed_past_head_ = 0;
}

void HintPredictor::OnOpen(const OpenEvent&) {
  const auto f = tracker_.last_opened();
  if (!f) return;
  auto it = waiting_.find(tracker_.Path(*f));
  if (it == waiting_.end()) return;
  const uint64_t seq = it->second.front();
  it->second.erase(it->second.begin());
  if (it->second.empty()) waiting_.erase(it);
  Entry& entry = queue_[seq - base_];
  entry.consumed = true;
  --pending_;
  if (seq != base_) {
    entry.counted = true;
    ++consumed_past_head_;
  }
  PopConsumed();
}

void HintPredictor::Predict(uint64_t budget_bytes, uint32_t block_size,
                            std::vector<PrefetchRequest>* out) {
  uint64_t budget = budget_bytes;
  double rank = 0;
  size_t scanned = 0;
  bool dropped = false;
  for (size_t i = 0; i < queue_.size() && budget > 0 && scanned < options_.max_scan; ++i) {
    Entry& e = queue_[i];
    if (e.consumed) continue;
    ++scanned;
    const auto f = tracker_.Find(e.path);
    if (!f) {
      // Names nothing the volume has: drop it (it would hold memory and scan time forever).
      ++unresolved_;
      auto it = waiting_.find(e.path);
      if (it != waiting_.end()) {
        std::erase(it->second, base_ + i);
        if (it->second.empty()) waiting_.erase(it);
      }
      e.consumed = true;
      --pending_;
      if (i != 0) {
        e.counted = true;
        ++consumed_past_head_;
      }
      dropped = true;
      continue;
    }
    const uint64_t blocks = tracker_.file(*f).Blocks(block_size);
    EmitFile(*f, 0, blocks, rank, &budget, out);
    rank += static_cast<double>(blocks);
  }
  if (dropped) PopConsumed();
}

}  // namespace spoke::agent
