#include "common/memory_budget.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/log.h"

namespace spoke {

std::string_view MemoryBudget::UseName(Use use) {
  switch (use) {
    case Use::kPrefetch:
      return "prefetch";
    case Use::kStoreQueue:
      return "store_queue";
    case Use::kDemand:
      return "demand";
    case Use::kHints:
      return "hints";
    case Use::kMetadata:
      return "metadata";
    case Use::kStaged:
      return "staged";
    case Use::kWriteBack:
      return "write_back";
  }
  return "unknown";
}

Status MemoryBudget::Config::Validate() const {
  if (total_bytes == 0) return Fail(Code::kInvalidArgument, "memory budget: must be > 0 bytes");
  if (!(demand_reserve_share >= 0 && demand_reserve_share < 1)) {
    return Fail(Code::kInvalidArgument, "memory budget: demand_reserve_share must be in [0, 1)");
  }
  return Ok();
}

namespace {
uint64_t BackgroundLimit(const MemoryBudget::Config& c) {
  const auto reserve =
      static_cast<uint64_t>(static_cast<double>(c.total_bytes) * c.demand_reserve_share);
  return c.total_bytes - std::min(reserve, c.total_bytes);
}
}  // namespace

MemoryBudget::MemoryBudget(const Config& config)
    : config_(config), background_limit_(BackgroundLimit(config)) {
  if (auto st = config_.Validate(); !st) {
    log::Error("invalid memory budget", {{"error", st.error().ToString()}});
    std::abort();
  }
}

uint64_t MemoryBudget::LimitOf(Level level) const {
  return level == Level::kDemand ? config_.total_bytes : background_limit_;
}

void MemoryBudget::TakeLocked(Use use, uint64_t bytes) {
  used_[static_cast<int>(use)] += bytes;
  used_total_ += bytes;
  peak_ = std::max(peak_, used_total_);
  PublishLocked(use);
}

void MemoryBudget::RefuseLocked(Use use) {
  refusals_[static_cast<int>(use)]++;
  if (auto* c = refusal_counters_[static_cast<int>(use)]; c != nullptr) c->Inc();
}

void MemoryBudget::PublishLocked(Use use) {
  if (auto* g = used_gauges_[static_cast<int>(use)]; g != nullptr) {
    g->Set(static_cast<int64_t>(used_[static_cast<int>(use)]));
  }
  if (peak_gauge_ != nullptr) peak_gauge_->Set(static_cast<int64_t>(peak_));
}

bool MemoryBudget::TryAcquire(Use use, uint64_t bytes, Level level) {
  MutexLock lock(mu_);
  if (HeldLocked() + bytes > LimitOf(level)) {
    RefuseLocked(use);
    return false;
  }
  TakeLocked(use, bytes);
  return true;
}

bool MemoryBudget::AcquireWait(Use use, uint64_t bytes,
                               std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  // A request larger than the whole background share could never be met: refuse it now.
  const bool fits = bytes <= background_limit_ && room_cv_.wait_until(lock, deadline, [&] {
    mu_.AssertHeld();
    return HeldLocked() + bytes <= background_limit_;
  });
  if (!fits) {
    RefuseLocked(use);
    return false;
  }
  TakeLocked(use, bytes);
  return true;
}

void MemoryBudget::Charge(Use use, uint64_t bytes) {
  MutexLock lock(mu_);
  TakeLocked(use, bytes);
}

void MemoryBudget::Release(Use use, uint64_t bytes) {
  {
    MutexLock lock(mu_);
    uint64_t& u = used_[static_cast<int>(use)];
    if (bytes > u) {
      // Only a bug gets here; clamp rather than wrap so the figures stay meaningful.
      log::Error("memory budget: release of more than held",
                 {{"use", std::string(UseName(use))}, {"bytes", bytes}, {"held", u}});
      bytes = u;
    }
    u -= bytes;
    used_total_ -= bytes;
    PublishLocked(use);
  }
  room_cv_.notify_all();
}

bool MemoryBudget::TryMove(Use from, Use to, uint64_t bytes, Level level) {
  MutexLock lock(mu_);
  if (HeldLocked() > LimitOf(level)) {
    RefuseLocked(to);
    return false;
  }
  uint64_t& f = used_[static_cast<int>(from)];
  const uint64_t n = std::min(bytes, f);
  f -= n;
  used_[static_cast<int>(to)] += n;
  PublishLocked(from);
  PublishLocked(to);
  return true;
}

void MemoryBudget::Move(Use from, Use to, uint64_t bytes) {
  MutexLock lock(mu_);
  uint64_t& f = used_[static_cast<int>(from)];
  const uint64_t n = std::min(bytes, f);
  f -= n;
  used_[static_cast<int>(to)] += n;
  PublishLocked(from);
  PublishLocked(to);
}

uint64_t MemoryBudget::used() const {
  MutexLock lock(mu_);
  return used_total_;
}

uint64_t MemoryBudget::used(Use use) const {
  MutexLock lock(mu_);
  return used_[static_cast<int>(use)];
}

uint64_t MemoryBudget::resident() const {
  MutexLock lock(mu_);
  return resident_;
}

uint64_t MemoryBudget::SetResident(uint64_t bytes) {
  bool fell = false;
  uint64_t used = 0;
  {
    MutexLock lock(mu_);
    used = used_total_;
    fell = bytes < resident_;
    resident_ = bytes;
    if (resident_gauge_ != nullptr) resident_gauge_->Set(static_cast<int64_t>(bytes));
  }
  if (fell) room_cv_.notify_all();  // background waiters may fit now
  return used;
}

uint64_t MemoryBudget::peak() const {
  MutexLock lock(mu_);
  return peak_;
}

uint64_t MemoryBudget::refusals(Use use) const {
  MutexLock lock(mu_);
  return refusals_[static_cast<int>(use)];
}

void MemoryBudget::ExportTo(metrics::Registry& registry) {
  registry.GetGauge("spoke_memory_budget_bytes", "The agent's memory budget (memoryBudgetBytes)")
      .Set(static_cast<int64_t>(config_.total_bytes));
  registry
      .GetGauge("spoke_memory_background_limit_bytes",
                "Where prefetch and hints stop; the rest of the budget is kept for demand")
      .Set(static_cast<int64_t>(background_limit_));
  MutexLock lock(mu_);
  peak_gauge_ =
      &registry.GetGauge("spoke_memory_peak_bytes", "Highest memory accounted against the budget");
  resident_gauge_ = &registry.GetGauge(
      "spoke_memory_resident_bytes",
      "The agent's anonymous resident memory over its start, checked against the budget's "
      "levels with what is accounted");
  resident_gauge_->Set(static_cast<int64_t>(resident_));
  for (int i = 0; i < kUses; ++i) {
    metrics::Labels labels{{"use", std::string(UseName(static_cast<Use>(i)))}};
    used_gauges_[i] = &registry.GetGauge("spoke_memory_used_bytes",
                                         "Memory accounted against the budget, per use", labels);
    refusal_counters_[i] = &registry.GetCounter(
        "spoke_memory_refusals_total",
        "Requests the memory budget refused, per use (prefetch back-pressure, hints rejected, "
        "demand blocks not cached)",
        labels);
    refusal_counters_[i]->Inc(refusals_[i]);
    PublishLocked(static_cast<Use>(i));
  }
}

}  // namespace spoke
