#include "bench/loader/stats.h"

#include <algorithm>
#include <cstdio>

namespace spoke::bench {

std::vector<double> WindowRates(const std::vector<BatchRecord>& records, uint32_t window) {
  std::vector<double> rates(records.size(), 0.0);
  if (window == 0) window = 1;
  uint64_t in_window = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    in_window += records[i].samples;
    if (i >= window) in_window -= records[i - window].samples;
    const double start = i >= window ? records[i - window].completion_s : 0.0;
    const double span = records[i].completion_s - start;
    rates[i] = span > 0 ? static_cast<double>(in_window) / span : 0.0;
  }
  return rates;
}

Summary Summarize(const std::vector<BatchRecord>& records, uint32_t accelerators,
                  const SummaryOptions& options) {
  Summary s;
  s.accelerators = accelerators;
  s.batches = records.size();
  if (records.empty()) return s;
  for (const auto& r : records) {
    s.samples += r.samples;
    s.bytes += r.bytes;
    s.data_wait_s += r.data_wait_s;
    s.compute_s += r.compute_s;
    s.max_data_wait_s = std::max(s.max_data_wait_s, r.data_wait_s);
    s.total_time_s = std::max(s.total_time_s, r.completion_s);
  }
  s.time_to_first_batch_s = records.front().dispatch_s;
  if (s.total_time_s > 0) {
    s.samples_per_s = static_cast<double>(s.samples) / s.total_time_s;
    s.au = s.compute_s / (s.total_time_s * accelerators);
  }

  const uint32_t window = std::max<uint32_t>(1, options.window);
  const auto rates = WindowRates(records, window);
  const size_t n = rates.size();
  const size_t trailing = std::clamp<size_t>(
      static_cast<size_t>(static_cast<double>(n) * options.steady_fraction), 1, n);
  std::vector<double> tail(rates.end() - static_cast<ptrdiff_t>(trailing), rates.end());
  std::nth_element(tail.begin(), tail.begin() + static_cast<ptrdiff_t>(tail.size() / 2),
                   tail.end());
  s.steady_samples_per_s = tail[tail.size() / 2];

  // The first full window (or the whole run when shorter than one window) at 95 %.
  const size_t first_full = std::min<size_t>(window, n) - 1;
  s.warmup_batches = n;
  for (size_t i = first_full; i < n; ++i) {
    if (rates[i] >= options.warmup_threshold * s.steady_samples_per_s) {
      s.warmup_batches = i + 1 - std::min<size_t>(window, i + 1);
      break;
    }
  }
  for (size_t i = s.warmup_batches; i < n; ++i) {
    if (records[i].data_wait_s > 0.1 * records[i].compute_s) ++s.stalled_batches_after_warmup;
  }
  return s;
}

void WriteCsv(std::ostream& out, const std::vector<BatchRecord>& records, uint32_t window) {
  const auto rates = WindowRates(records, window);
  out << "seq,epoch,batch,worker,accelerator,samples,bytes,data_wait_ms,compute_ms,ready_s,"
         "dispatch_s,completion_s,window_samples_per_s\n";
  char line[512];
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    std::snprintf(line, sizeof(line), "%llu,%u,%u,%u,%u,%u,%llu,%.3f,%.3f,%.6f,%.6f,%.6f,%.3f\n",
                  static_cast<unsigned long long>(r.seq), r.epoch, r.batch, r.worker, r.accelerator,
                  r.samples, static_cast<unsigned long long>(r.bytes), r.data_wait_s * 1e3,
                  r.compute_s * 1e3, r.ready_s, r.dispatch_s, r.completion_s, rates[i]);
    out << line;
  }
}

nlohmann::json SummaryToJson(const Summary& s) {
  return {
      {"batches", s.batches},
      {"samples", s.samples},
      {"bytes_read", s.bytes},
      {"accelerators", s.accelerators},
      {"total_time_s", s.total_time_s},
      {"samples_per_s", s.samples_per_s},
      {"steady_samples_per_s", s.steady_samples_per_s},
      {"au", s.au},
      {"time_to_first_batch_s", s.time_to_first_batch_s},
      {"warmup_batches", s.warmup_batches},
      {"data_wait_s", s.data_wait_s},
      {"compute_s", s.compute_s},
      {"max_data_wait_s", s.max_data_wait_s},
      {"stalled_batches_after_warmup", s.stalled_batches_after_warmup},
  };
}

void PrintSummary(std::ostream& out, const Summary& s) {
  char buf[1024];
  std::snprintf(
      buf, sizeof(buf),
      "batches                 %llu\n"
      "samples                 %llu\n"
      "bytes read              %llu (%.1f MB)\n"
      "total time              %.2f s\n"
      "samples/s (overall)     %.1f\n"
      "samples/s (steady)      %.1f\n"
      "accelerator util (AU)   %.1f %% (%u accelerator(s))\n"
      "time to first batch     %.3f s\n"
      "warm-up                 %llu batches\n"
      "data wait               %.2f s total, %.3f s max\n"
      "stalls after warm-up    %llu batches\n",
      static_cast<unsigned long long>(s.batches), static_cast<unsigned long long>(s.samples),
      static_cast<unsigned long long>(s.bytes), static_cast<double>(s.bytes) / 1e6, s.total_time_s,
      s.samples_per_s, s.steady_samples_per_s, s.au * 100.0, s.accelerators,
      s.time_to_first_batch_s, static_cast<unsigned long long>(s.warmup_batches), s.data_wait_s,
      s.max_data_wait_s, static_cast<unsigned long long>(s.stalled_batches_after_warmup));
  out << buf;
}

}  // namespace spoke::bench
