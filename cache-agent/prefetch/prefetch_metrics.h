// PrefetchMetrics: publishes a volume's PrefetchStats in the agent's metrics registry.
//   spoke_prefetch_precision_ppm{volume,expert}        gauge, decayed precision x 1e6
//   spoke_prefetch_coverage_ppm{volume,expert}         gauge, decayed coverage x 1e6
//   spoke_prefetch_budget_bytes{volume,expert}         gauge, the expert's allowance
//   spoke_prefetch_predicted_blocks_total{volume,expert}  counter, blocks submitted
//   spoke_prefetch_used_blocks_total{volume,expert}    counter
//   spoke_prefetch_wasted_blocks_total{volume,expert}  counter
//   spoke_prefetch_bytes_used_total{volume}, spoke_prefetch_bytes_wasted_total{volume}
//   spoke_prefetch_inflight_bytes{volume}, spoke_prefetch_outstanding_bytes{volume}
//   spoke_prefetch_epoch{volume}, spoke_prefetch_demand_miss_blocks_total{volume}
//   spoke_prefetch_hints_total{volume,result="accepted|rejected"}
//   spoke_prefetch_hints_dropped_total{volume,reason="unresolved"}
//   spoke_prefetch_hints_pending_bytes{volume}
// (metrics::Gauge holds integers, hence _ppm; PromQL: spoke_prefetch_precision_ppm / 1e6.)
// Call Update() before each scrape (or from the agent's periodic tick); counters advance by
// the difference to the previous Update.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <map>
#include <string>

#include "cache-agent/prefetch/prefetch_scheduler.h"
#include "common/metrics.h"

namespace spoke::agent {

class PrefetchMetrics {
 public:
  PrefetchMetrics(metrics::Registry& registry, std::string volume_id);
  void Update(const PrefetchStats& stats);

 private:
  struct Last {
    uint64_t predicted = 0, used = 0, wasted = 0;
  };
  void Advance(metrics::Counter& c, uint64_t now, uint64_t* last);

  metrics::Registry& registry_;
  std::string volume_;
  std::map<std::string, Last> last_;
  uint64_t last_used_bytes_ = 0, last_wasted_bytes_ = 0, last_miss_blocks_ = 0;
  uint64_t last_hints_accepted_ = 0, last_hints_rejected_ = 0, last_hints_unresolved_ = 0;
};

}  // namespace spoke::agent
