// SequentialPredictor: per-open-file read-ahead. The window starts small, doubles while
// reads stay sequential (up to a maximum) and resets on a far seek, so one reader of a
// large file soon keeps many blocks in flight, and random readers cost little.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cache-agent/prefetch/predictor.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class SequentialPredictor final : public Predictor {
 public:
  struct Config {
    uint32_t initial_blocks = 2;  // first read-ahead: cheap if the reader is not sequential
    uint32_t max_blocks = 64;     // 64 x 1 MiB in flight ~ 1 GB/s over a 60 ms RTT
    Status Validate() const;
  };
  static constexpr ExpertId kExpertId = 1;

  explicit SequentialPredictor(const Config& config);
  std::string_view name() const override { return "sequential"; }
  void OnOpen(const OpenEvent& e) override EXCLUDES(mu_);
  void OnRead(const ReadEvent& e) override EXCLUDES(mu_);
  void OnClose(const CloseEvent& e) override EXCLUDES(mu_);
  void Predict(uint64_t budget_bytes, uint32_t block_size,
               std::vector<PrefetchRequest>* out) override EXCLUDES(mu_);

  // The current window of an open file in blocks (0 when unknown). For tests and figures.
  uint32_t WindowBlocks(uint64_t handle) const EXCLUDES(mu_);

 private:
  struct Stream {
    std::string path;
    uint64_t file_id = 0;
    uint64_t version = 0;
    uint64_t size = 0;
    uint64_t next_offset = 0;  // where a sequential reader reads next
    uint32_t window = 0;       // blocks ahead of next_offset
    bool started = false;
    bool pending = false;  // read since the last Predict
    uint64_t last_read = 0;
  };
  Config config_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Stream> streams_ GUARDED_BY(mu_);
  uint64_t reads_ GUARDED_BY(mu_) = 0;
};

}  // namespace spoke::agent
