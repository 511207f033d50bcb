// SequentialPredictor: per-open-file read-ahead. The window starts small, doubles while
// reads stay sequential (up to a maximum) and resets on a far seek, so one reader of a
// large file soon keeps many blocks in flight, and random readers cost little. Once the
// last `whole_files_to_learn` files closed were read whole from their start (record shards,
// streamed one after another), a file read from its start gets the largest window at its
// first read: growing it again from two blocks cost each shard a round trip per doubling.
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
    uint32_t initial_blocks = 2;        // first read-ahead: cheap if the reader is not sequential
    uint32_t max_blocks = 64;           // 64 x 1 MiB in flight ~ 1 GB/s over a 60 ms RTT
    uint32_t whole_files_to_learn = 2;  // 0: every file starts at initial_blocks
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
    bool from_start = false;  // first read at offset 0, and no far seek since
    bool pending = false;     // read since the last Predict
    uint64_t last_read = 0;
  };
  Config config_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Stream> streams_ GUARDED_BY(mu_);
  uint64_t reads_ GUARDED_BY(mu_) = 0;
  // Files closed in a row after being read whole from their start (a file left before its
  // half resets it; other closes leave it).
  uint32_t whole_files_ GUARDED_BY(mu_) = 0;
};

}  // namespace spoke::agent
