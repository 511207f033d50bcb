#include "common/metrics.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace spoke::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<uint64_t>(std::llround(std::max(v, 0.0) * 1e6)),
                        std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::Counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    out[i] = acc;
  }
  return out;
}

double Histogram::Sum() const { return static_cast<double>(sum_micros_.load()) / 1e6; }
uint64_t Histogram::Count() const { return Counts().back(); }

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

Registry::Family& Registry::GetFamily(const std::string& name, const std::string& help, Type type) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    // A bug: one name registered as two types.
    throw std::logic_error("metric " + name + " registered with two types");
  }
  return it->second;
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  MutexLock lock(mu_);
  auto& f = GetFamily(name, help, Type::kCounter);
  auto& slot = f.counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  MutexLock lock(mu_);
  auto& f = GetFamily(name, help, Type::kGauge);
  auto& slot = f.gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const Labels& labels, const std::vector<double>& bounds) {
  MutexLock lock(mu_);
  auto& f = GetFamily(name, help, Type::kHistogram);
  auto& slot = f.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

void Registry::RemoveLabeled(const std::string& key, const std::string& value) {
  // Removed series leave the exposition but stay allocated for the rest of the process:
  // GetCounter's references stay valid, so a late update from a component still winding
  // down (a hub call in flight when its volume is unmounted) writes into a detached metric,
  // not into freed memory. A few dozen small objects per unmount.
  static std::mutex retired_mu;
  static auto* retired = new std::vector<std::shared_ptr<void>>();
  MutexLock lock(mu_);
  std::lock_guard<std::mutex> retired_lock(retired_mu);
  auto drop = [&](auto& m) {
    for (auto it = m.begin(); it != m.end();) {
      auto l = it->first.find(key);
      if (l != it->first.end() && l->second == value) {
        retired->push_back(std::shared_ptr<void>(std::move(it->second)));
        it = m.erase(it);
      } else {
        ++it;
      }
    }
  };
  for (auto& [name, f] : families_) {
    drop(f.counters);
    drop(f.gauges);
    drop(f.histograms);
  }
}

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

std::string LabelText(const Labels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  std::string s;
  for (const auto& [k, v] : labels) {
    s += (s.empty() ? "" : ",") + k + "=\"" + EscapeLabel(v) + "\"";
  }
  if (!extra_key.empty()) s += (s.empty() ? "" : ",") + extra_key + "=\"" + extra_value + "\"";
  return s.empty() ? "" : "{" + s + "}";
}

std::string Num(double v) {
  if (std::isinf(v)) return "+Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string Registry::Render() const {
  MutexLock lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, c] : f.counters) {
      out += name + LabelText(labels) + " " + std::to_string(c->Value()) + "\n";
    }
    for (const auto& [labels, g] : f.gauges) {
      out += name + LabelText(labels) + " " + std::to_string(g->Value()) + "\n";
    }
    for (const auto& [labels, h] : f.histograms) {
      auto counts = h->Counts();
      for (size_t i = 0; i < h->bounds().size(); ++i) {
        out += name + "_bucket" + LabelText(labels, "le", Num(h->bounds()[i])) + " " +
               std::to_string(counts[i]) + "\n";
      }
      out += name + "_bucket" + LabelText(labels, "le", "+Inf") + " " +
             std::to_string(counts.back()) + "\n";
      out += name + "_sum" + LabelText(labels) + " " + Num(h->Sum()) + "\n";
      out += name + "_count" + LabelText(labels) + " " + std::to_string(counts.back()) + "\n";
    }
  }
  return out;
}

}  // namespace spoke::metrics
