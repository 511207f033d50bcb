// PrefetchDriver: the one place where VolumeFs meets the prefetcher. It tells the
// predictors about opens/reads/closes and hands their proposals to BlockFetcher::Prefetch
// within the fetcher's prefetch budget. The prefetcher's scheduler replaces this class.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/prefetch/predictor.h"
#include "common/volume.h"

namespace spoke::agent {

class PrefetchDriver {
 public:
  PrefetchDriver(BlockFetcher& fetcher, uint64_t prefetch_budget_bytes);

  // The predictors a volume's prefetch mode asks for: off = none, readahead = sequential,
  // auto = every available expert (for now the sequential one too).
  static std::unique_ptr<PrefetchDriver> ForMode(PrefetchMode mode, BlockFetcher& fetcher,
                                                 uint64_t read_ahead_max_bytes);

  void Add(std::unique_ptr<Predictor> predictor);
  bool empty() const { return predictors_.empty(); }

  void OnOpen(const OpenEvent& e);
  void OnRead(const ReadEvent& e);  // also asks for and issues prefetches
  void OnClose(const CloseEvent& e);

 private:
  BlockFetcher& fetcher_;
  uint64_t budget_;
  std::mutex mu_;  // predictors are not thread-safe by contract
  std::vector<std::unique_ptr<Predictor>> predictors_;
};

}  // namespace spoke::agent
