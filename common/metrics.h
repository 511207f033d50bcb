// Prometheus text-format metrics: counters, gauges and histograms with labels, lock-free on
// the hot path (atomics), rendered by Registry::Render() for /metrics.
//   auto& hits = registry.Counter("spoke_cache_hits_total", "Block reads served from cache",
//                                 {{"volume", id}});
//   hits.Inc();
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"

namespace spoke::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound plus +Inf, and the sum.
  std::vector<uint64_t> Counts() const;
  double Sum() const;
  uint64_t Count() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // non-cumulative, size bounds+1
  std::atomic<uint64_t> sum_micros_{0};               // sum in 1e-6 units
};

// Latency buckets for hub requests over a WAN (seconds).
std::vector<double> LatencyBuckets();

class Registry {
 public:
  // Returns the metric with this name and labels, creating it on first use. References stay
  // valid for the registry's lifetime. A name must always be used with the same type.
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const Labels& labels = {},
                          const std::vector<double>& bounds = LatencyBuckets());
  // Drops every series carrying label key=value (e.g. a volume that was unmounted).
  void RemoveLabeled(const std::string& key, const std::string& value);
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& GetFamily(const std::string& name, const std::string& help, Type type) REQUIRES(mu_);
  mutable Mutex mu_;
  std::map<std::string, Family> families_ GUARDED_BY(mu_);
};

// Escapes a label value for the text format.
std::string EscapeLabel(const std::string& v);

}  // namespace spoke::metrics
