#include "cache-agent/prefetch/sequential_predictor.h"

#include <algorithm>

namespace spoke::agent {

Status SequentialPredictor::Config::Validate() const {
  if (initial_blocks < 1) return Fail(Code::kInvalidArgument, "initial_blocks: must be >= 1");
  if (max_blocks < initial_blocks)
    return Fail(Code::kInvalidArgument, "max_blocks: must be >= initial_blocks");
  return Ok();
}

SequentialPredictor::SequentialPredictor(const Config& config) : config_(config) {}

void SequentialPredictor::OnOpen(const OpenEvent& e) {
  MutexLock lock(mu_);
  Stream& s = streams_[e.handle];
  s = Stream{};
  s.path = e.path;
  s.file_id = e.file_id;
  s.version = e.version;
  s.size = e.size;
}

void SequentialPredictor::OnRead(const ReadEvent& e) {
  MutexLock lock(mu_);
  Stream& s = streams_[e.handle];
  s.path = e.path;
  s.file_id = e.file_id;
  s.version = e.version;
  s.size = e.file_size;
  // "Sequential" tolerates the small reorderings of a multi-threaded FUSE queue: anything
  // that starts within the current window from where the last read ended.
  uint64_t slack = static_cast<uint64_t>(std::max<uint32_t>(s.window, 1)) * (1u << 20);
  bool sequential = s.started && e.offset >= s.next_offset - std::min(s.next_offset, slack) &&
                    e.offset <= s.next_offset + slack;
  if (!s.started && e.offset == 0 && config_.whole_files_to_learn > 0 &&
      whole_files_ >= config_.whole_files_to_learn) {
    s.window = config_.max_blocks;  // files here are read whole: this one likely too
    s.from_start = true;
  } else if (!s.started || !sequential) {
    s.window = config_.initial_blocks;  // first read or a far seek: start small again
    s.from_start = !s.started && e.offset == 0;
  } else if (e.offset + e.length > s.next_offset) {
    s.window = std::min(config_.max_blocks, s.window * 2);
  }
  s.started = true;
  s.next_offset = std::max(e.offset + e.length, sequential ? s.next_offset : 0);
  s.pending = true;
  s.last_read = ++reads_;
}

void SequentialPredictor::OnClose(const CloseEvent& e) {
  MutexLock lock(mu_);
  auto it = streams_.find(e.handle);
  if (it == streams_.end()) return;
  const Stream& s = it->second;
  if (s.started && s.size > 0) {
    if (s.from_start && s.next_offset >= s.size) {
      whole_files_ = std::min(whole_files_ + 1, config_.whole_files_to_learn);
    } else if (s.next_offset < s.size / 2 || !s.from_start) {
      whole_files_ = 0;
    }
  }
  streams_.erase(it);
}

uint32_t SequentialPredictor::WindowBlocks(uint64_t handle) const {
  MutexLock lock(mu_);
  auto it = streams_.find(handle);
  return it == streams_.end() ? 0 : it->second.window;
}

void SequentialPredictor::Predict(uint64_t budget_bytes, uint32_t block_size,
                                  std::vector<PrefetchRequest>* out) {
  MutexLock lock(mu_);
  // Most recently read streams first.
  std::vector<Stream*> pending;
  for (auto& [h, s] : streams_) {
    if (s.pending) pending.push_back(&s);
  }
  std::sort(pending.begin(), pending.end(),
            [](const Stream* a, const Stream* b) { return a->last_read > b->last_read; });
  uint64_t budget_blocks = budget_bytes / block_size;
  for (Stream* s : pending) {
    s->pending = false;
    if (budget_blocks == 0) break;
    uint64_t file_blocks = (s->size + block_size - 1) / block_size;
    uint64_t first = (s->next_offset + block_size - 1) / block_size;
    // The block being read now is the reader's; read-ahead starts after it, unless the
    // reader stopped exactly on a boundary.
    if (first >= file_blocks) continue;
    uint64_t count = std::min<uint64_t>({s->window, file_blocks - first, budget_blocks});
    if (count == 0) continue;
    PrefetchRequest r;
    r.path = s->path;
    r.file_id = s->file_id;
    r.version = s->version;
    r.file_size = s->size;
    r.first_block = first;
    r.block_count = count;
    r.predicted_use = 0;  // right behind the reader
    r.expert = kExpertId;
    out->push_back(std::move(r));
    budget_blocks -= count;
  }
}

}  // namespace spoke::agent
