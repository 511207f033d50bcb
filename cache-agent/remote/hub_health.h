// HubHealth: what a hub client records of every finished request — its latency
// (spoke_hub_request_seconds) and failures (spoke_hub_errors_total) by operation — and the
// health RemoteFs::Reachable/LastError report: unreachable after a request failed for want of
// an answer (kTimeout, kUnavailable), reachable again once one succeeds. Thread-safe.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <atomic>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class HubHealth {
 public:
  // `registry` must outlive this; `labels` go on every series (e.g. the volume).
  HubHealth(metrics::Registry& registry, metrics::Labels labels)
      : registry_(registry), labels_(std::move(labels)) {}

  // A request `op` ended after `seconds`, failed with `error` or not (null).
  void Record(const char* op, double seconds, const Error* error) {
    metrics::Labels l = labels_;
    l["op"] = op;
    registry_.GetHistogram("spoke_hub_request_seconds", "Hub request latency (retries included)", l)
        .Observe(seconds);
    if (error != nullptr) {
      l["code"] = std::string(CodeName(error->code()));
      registry_.GetCounter("spoke_hub_errors_total", "Hub requests that failed", l).Inc();
      if (error->code() == Code::kTimeout || error->code() == Code::kUnavailable) {
        reachable_.store(false);
        MutexLock lock(mu_);
        last_error_ = error->message();
      }
    } else if (!reachable_.load()) {
      reachable_.store(true);
      MutexLock lock(mu_);
      last_error_.clear();
    }
  }

  bool Reachable() const { return reachable_.load(); }
  std::string LastError() const {
    MutexLock lock(mu_);
    return last_error_;
  }

 private:
  metrics::Registry& registry_;
  const metrics::Labels labels_;
  std::atomic<bool> reachable_{true};
  mutable Mutex mu_;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace spoke::agent
