// ResidentWatch: tells a MemoryBudget, every `period`, how much anonymous memory the process
// holds over what it held when the watch started (/proc/self/statm: resident minus shared
// pages). The budget checks its levels against that as well as against what it accounts
// (memory_budget.h), so what no account covers still stops prefetch and hints: libnfs reads
// each hub reply into a buffer of its own, libfuse's workers keep request buffers as large as
// the writes they were sent, the allocator keeps what was freed into its heaps, the spare
// block vectors. Without it a faster fill could hold the accounted bytes and all of those at
// once, past the budget (bench/RESULTS.md, "Where a shard READ's time goes"). When the agent
// holds more than an eighth of the budget beyond what it accounts, the watch gives glibc's free
// heap pages back to the kernel (malloc_trim): at once when it has grown since the last trim,
// at most once a second when it has not.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include "common/memory_budget.h"
#include "common/thread_annotations.h"

namespace spoke {

// Anonymous resident bytes of this process, or nullopt when /proc/self/statm cannot be read.
std::optional<uint64_t> AnonResidentBytes();

class ResidentWatch {
 public:
  // Starts sampling at once; `budget` must outlive the watch. The first sample is the start.
  ResidentWatch(MemoryBudget& budget, std::chrono::milliseconds period);
  ~ResidentWatch();
  ResidentWatch(const ResidentWatch&) = delete;
  ResidentWatch& operator=(const ResidentWatch&) = delete;

  uint64_t start_bytes() const { return start_; }

 private:
  void Run();
  uint64_t OverStart(uint64_t bytes) const { return bytes > start_ ? bytes - start_ : 0; }

  MemoryBudget& budget_;
  const std::chrono::milliseconds period_;
  const int statm_fd_;  // /proc/self/statm, kept open: a sample is one pread
  const uint64_t start_;
  Mutex mu_;
  CondVar stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  static constexpr uint64_t kTrimWorthRepeating = 1 << 20;
  // The watch's thread only.
  std::chrono::steady_clock::time_point last_trim_{};
  uint64_t left_by_last_trim_ = 0;  // over the start, just after the last trim
  std::thread thread_;
};

}  // namespace spoke
