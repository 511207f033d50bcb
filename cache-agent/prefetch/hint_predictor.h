// HintPredictor: a job discloses the paths it will read, in order, and they are fetched
// ahead of it. Two channels feed it, both through PrefetchScheduler (which serialises
// access): the agent API (MountedVolume::Hint -> AddHintPaths) and the control file
// `<mount>/.spoke-hints` (kHintFileName), to which a job writes one path per line; VolumeFs
// hands each write's bytes to AddHints (a line split across writes is joined: the parser
// keeps the unterminated tail until the next write or FlushHints).
//
// A hint path is relative to the volume root. Rejected (counted, skipped, never resolved):
// empty lines, absolute paths, any ".." component, NUL bytes, a path longer than
// kMaxHintPath or a component longer than kMaxHintComponent. "a//b" and "./a/./b" are
// normalised to "a/b" (so `find . -type f` output is accepted as it is), a trailing "\r" is
// dropped; a path of only "." parts is empty. An accepted path that names no file known to the
// volume when it comes up for prefetching is dropped (counted as unresolved).
//
// Memory: the queued hints of a volume hold at most `max_pending` lines and
// `max_pending_bytes` bytes (HintBytes: the path twice, in the queue and in the lookup
// map, plus the bookkeeping around them); a hint beyond either bound is rejected (counted)
// rather than queued, so a job flooding `.spoke-hints` cannot grow the agent. With the
// agent's MemoryBudget (Options::memory) the queued bytes are also taken from it (background
// level): a hint it has no room for is rejected and counted (budget_rejected).
//
// Hints are consumed as the job opens the hinted files; a hint left behind by more than
// `stale_after` later consumed hints is dropped (the job skipped it).
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache-agent/prefetch/tracker_expert.h"
#include "common/memory_budget.h"
#include "common/status.h"
#include "common/volume.h"

namespace spoke::agent {

inline constexpr std::string_view kHintFileName = spoke::kHintFileName;
inline constexpr size_t kMaxHintPath = 4096;      // PATH_MAX
inline constexpr size_t kMaxHintComponent = 255;  // NAME_MAX

// Validates and normalises one hint line. kInvalidArgument with the reason.
Result<std::string> NormalizeHintPath(std::string_view line);

struct HintCounts {
  uint32_t accepted = 0;
  uint32_t rejected = 0;
};

class HintPredictor final : public TrackerExpert {
 public:
  struct Options {
    size_t max_pending = 1 << 20;              // queued hints; more are rejected (memory bound)
    uint64_t max_pending_bytes = 64ull << 20;  // their accounted bytes (HintBytes)
    size_t stale_after = 4096;                 // see header
    size_t max_scan = 8192;                    // hints looked at per Predict call
    MemoryBudget* memory = nullptr;            // the agent's (optional; must outlive)
    Status Validate() const;
  };
  HintPredictor(const AccessTracker& tracker, const BlockPresence& presence, Options options);
  HintPredictor(const AccessTracker& tracker, const BlockPresence& presence)
      : HintPredictor(tracker, presence, Options{}) {}
  ~HintPredictor() override;  // gives the queued hints' bytes back to the budget

  std::string_view name() const override { return "hints"; }
  bool disclosed() const override { return true; }

  // Parses newline-separated paths. A final line without '\n' is kept until more text
  // arrives or FlushHints() (a write may end mid-line).
  HintCounts AddHints(std::string_view text);
  HintCounts FlushHints();
  HintCounts AddHintPaths(std::span<const std::string> paths);

  void OnOpen(const OpenEvent& e) override;
  void Predict(uint64_t budget_bytes, uint32_t block_size,
               std::vector<PrefetchRequest>* out) override;

  size_t pending() const { return pending_; }
  // Bytes accounted for the queued hints (at most Options::max_pending_bytes).
  uint64_t pending_bytes() const { return pending_bytes_; }
  // Accounted cost of one queued hint of `path_length` bytes.
  static uint64_t HintBytes(size_t path_length);
  uint64_t unresolved() const { return unresolved_; }
  // Hints rejected because the agent's memory budget had no room (part of total_rejected).
  uint64_t budget_rejected() const { return budget_rejected_; }
  uint64_t total_accepted() const { return total_.accepted; }
  uint64_t total_rejected() const { return total_.rejected; }

 private:
  void AddLine(std::string_view line, HintCounts* counts);
  void PopConsumed();

  struct Entry {
    std::string path;
    bool consumed = false;
    bool counted = false;  // consumed while not at the head (in consumed_past_head_)
  };
  Options options_;
  std::deque<Entry> queue_;
  uint64_t base_ = 0;  // sequence number of queue_.front()
  // path -> its queued sequence numbers, oldest first (a path is rarely queued more than a
  // few times: a vector, where a deque would hold a 512-byte node per path).
  std::unordered_map<std::string, std::vector<uint64_t>> waiting_;
  size_t pending_ = 0;
  uint64_t pending_bytes_ = 0;  // HintBytes of every entry in queue_
  size_t consumed_past_head_ = 0;
  std::string partial_;
  uint64_t unresolved_ = 0;
  uint64_t budget_rejected_ = 0;
  HintCounts total_;
};

}  // namespace spoke::agent
