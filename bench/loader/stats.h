// Per-batch records and the run summary (MLPerf Storage style).
//
// Definitions (all times in seconds since the run started):
//  - window rate r_i: samples in batches (i-w, i] / (completion_i - completion_{i-w}), with
//    completion_{-1} = 0; for i < w-1 the window is the batches [0, i].
//  - steady-state samples/s: the median of r_i over the trailing steady_fraction of batches
//    (default: the last half of the run).
//  - warm-up batches: the index of the first batch of the first full window whose rate
//    reaches warmup_threshold (95 %) of the steady state, i.e. how many batches ran before it.
//  - AU (accelerator utilisation): total compute time / (total time x accelerators).
//  - time to first batch: when the first batch was handed to an accelerator.
//  - total time: when the last batch finished computing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace spoke::bench {

struct BatchRecord {
  uint64_t seq = 0;  // position in the whole run
  uint32_t epoch = 0;
  uint32_t batch = 0;  // index inside the epoch
  uint32_t worker = 0;
  uint32_t accelerator = 0;
  uint32_t samples = 0;
  uint64_t bytes = 0;
  double data_wait_s = 0;  // the accelerator sat idle this long waiting for this batch
  double compute_s = 0;
  double ready_s = 0;       // the worker finished building it
  double dispatch_s = 0;    // handed to the accelerator
  double completion_s = 0;  // dispatch + compute
};

struct SummaryOptions {
  uint32_t window = 10;            // batches in the moving window
  double steady_fraction = 0.5;    // trailing share of batches whose median is steady state
  double warmup_threshold = 0.95;  // share of steady state that ends the warm-up
};

struct Summary {
  uint64_t batches = 0;
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint32_t accelerators = 1;
  double total_time_s = 0;
  double samples_per_s = 0;  // samples / total time
  double steady_samples_per_s = 0;
  double au = 0;
  double time_to_first_batch_s = 0;
  uint64_t warmup_batches = 0;
  double data_wait_s = 0;  // sum over batches
  double compute_s = 0;    // sum over batches
  double max_data_wait_s = 0;
  uint64_t stalled_batches_after_warmup = 0;  // data wait > 10 % of compute after the warm-up
};

// records in seq order, completion times non-decreasing.
std::vector<double> WindowRates(const std::vector<BatchRecord>& records, uint32_t window);
Summary Summarize(const std::vector<BatchRecord>& records, uint32_t accelerators,
                  const SummaryOptions& options = {});

void WriteCsv(std::ostream& out, const std::vector<BatchRecord>& records, uint32_t window);
nlohmann::json SummaryToJson(const Summary& s);
void PrintSummary(std::ostream& out, const Summary& s);

}  // namespace spoke::bench
