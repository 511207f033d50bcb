#include "cache-agent/prefetch/prefetch_metrics.h"

#include <cmath>

namespace spoke::agent {

PrefetchMetrics::PrefetchMetrics(metrics::Registry& registry, std::string volume_id)
    : registry_(registry), volume_(std::move(volume_id)) {}

void PrefetchMetrics::Advance(metrics::Counter& c, uint64_t now, uint64_t* last) {
  if (now > *last) c.Inc(now - *last);
  *last = now;
}

void PrefetchMetrics::Update(const PrefetchStats& s) {
  const metrics::Labels vol{{"volume", volume_}};
  for (const ExpertStats& e : s.experts) {
    const metrics::Labels l{{"volume", volume_}, {"expert", e.name}};
    registry_
        .GetGauge("spoke_prefetch_precision_ppm",
                  "Decayed precision of a prefetch expert (blocks read before eviction), x1e6", l)
        .Set(std::llround(e.precision * 1e6));
    registry_
        .GetGauge("spoke_prefetch_coverage_ppm",
                  "Decayed share of non-cached block reads served by the expert, x1e6", l)
        .Set(std::llround(e.coverage * 1e6));
    registry_
        .GetGauge("spoke_prefetch_budget_bytes", "Outstanding prefetch bytes the expert may hold",
                  l)
        .Set(static_cast<int64_t>(e.budget_bytes));
    Last& last = last_[e.name];
    Advance(registry_.GetCounter("spoke_prefetch_predicted_blocks_total",
                                 "Blocks an expert had prefetched", l),
            e.predicted_blocks, &last.predicted);
    Advance(registry_.GetCounter("spoke_prefetch_used_blocks_total",
                                 "Prefetched blocks read before eviction", l),
            e.used_blocks, &last.used);
    Advance(registry_.GetCounter("spoke_prefetch_wasted_blocks_total",
                                 "Prefetched blocks evicted or expired unread", l),
            e.wasted_blocks, &last.wasted);
  }
  Advance(registry_.GetCounter("spoke_prefetch_bytes_used_total",
                               "Prefetched bytes read before eviction", vol),
          s.prefetched_bytes_used, &last_used_bytes_);
  Advance(registry_.GetCounter("spoke_prefetch_bytes_wasted_total",
                               "Prefetched bytes evicted or expired unread", vol),
          s.prefetched_bytes_wasted, &last_wasted_bytes_);
  Advance(registry_.GetCounter("spoke_prefetch_demand_miss_blocks_total",
                               "Blocks read that were neither cached nor prefetched", vol),
          s.demand_miss_blocks, &last_miss_blocks_);
  registry_.GetGauge("spoke_prefetch_inflight_bytes", "Prefetch bytes queued or in flight", vol)
      .Set(static_cast<int64_t>(s.inflight_bytes));
  registry_
      .GetGauge("spoke_prefetch_outstanding_bytes", "Prefetched bytes without a verdict yet", vol)
      .Set(static_cast<int64_t>(s.outstanding_bytes));
  registry_.GetGauge("spoke_prefetch_epoch", "Epochs the access tracker has seen", vol)
      .Set(static_cast<int64_t>(s.epoch));
  Advance(registry_.GetCounter("spoke_prefetch_hints_total", "Hint lines received",
                               {{"volume", volume_}, {"result", "accepted"}}),
          s.hints_accepted, &last_hints_accepted_);
  Advance(registry_.GetCounter("spoke_prefetch_hints_total", "Hint lines received",
                               {{"volume", volume_}, {"result", "rejected"}}),
          s.hints_rejected, &last_hints_rejected_);
  Advance(registry_.GetCounter("spoke_prefetch_hints_dropped_total",
                               "Queued hints dropped: they named no file of the volume",
                               {{"volume", volume_}, {"reason", "unresolved"}}),
          s.hints_unresolved, &last_hints_unresolved_);
  registry_.GetGauge("spoke_prefetch_hints_pending_bytes", "Accounted memory of queued hints", vol)
      .Set(static_cast<int64_t>(s.hints_pending_bytes));
}

}  // namespace spoke::agent
