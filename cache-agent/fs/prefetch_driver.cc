#include "cache-agent/fs/prefetch_driver.h"

#include "cache-agent/prefetch/sequential_predictor.h"

namespace spoke::agent {

PrefetchDriver::PrefetchDriver(BlockFetcher& fetcher, uint64_t prefetch_budget_bytes)
    : fetcher_(fetcher), budget_(prefetch_budget_bytes) {}

std::unique_ptr<PrefetchDriver> PrefetchDriver::ForMode(PrefetchMode mode, BlockFetcher& fetcher,
                                                        uint64_t read_ahead_max_bytes) {
  auto d = std::make_unique<PrefetchDriver>(fetcher, 4 * read_ahead_max_bytes);
  if (mode == PrefetchMode::kOff) return d;
  SequentialPredictor::Config sc;
  sc.max_blocks = static_cast<uint32_t>(
      std::max<uint64_t>(sc.initial_blocks, read_ahead_max_bytes / fetcher.block_size()));
  d->Add(std::make_unique<SequentialPredictor>(sc));
  return d;
}

void PrefetchDriver::Add(std::unique_ptr<Predictor> predictor) {
  std::lock_guard<std::mutex> lock(mu_);
  predictors_.push_back(std::move(predictor));
}

void PrefetchDriver::OnOpen(const OpenEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : predictors_) p->OnOpen(e);
}

void PrefetchDriver::OnClose(const CloseEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : predictors_) p->OnClose(e);
}

void PrefetchDriver::OnRead(const ReadEvent& e) {
  std::vector<PrefetchRequest> proposals;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (predictors_.empty()) return;
    for (auto& p : predictors_) p->OnRead(e);
    uint64_t in_flight = fetcher_.PrefetchBytesInFlight();
    uint64_t budget = in_flight >= budget_ ? 0 : budget_ - in_flight;
    for (auto& p : predictors_) {
      p->Predict(budget, fetcher_.block_size(), &proposals);
    }
  }
  for (const auto& r : proposals) {
    if (!fetcher_.Prefetch(r)) break;  // over budget: the next read asks again
  }
}

}  // namespace spoke::agent
