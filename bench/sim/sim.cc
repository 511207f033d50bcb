#include "bench/sim/sim.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "cache-agent/cache/lru_policy.h"
#include "cache-agent/cache/nothrash_policy.h"
#include "cache-agent/prefetch/clock.h"
#include "cache-agent/prefetch/sequential_predictor.h"

namespace spoke::sim {

using agent::AdmissionHint;
using agent::BlockKey;
using agent::BlockKeyHash;
using agent::ExpertId;
using agent::kDemand;

uint64_t Trace::DatasetBytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

std::string_view ModeName(Mode m) {
  switch (m) {
    case Mode::kOff:
      return "off";
    case Mode::kReadAhead:
      return "read-ahead";
    case Mode::kExperts:
      return "experts";
    case Mode::kExpertsHints:
      return "experts+hints";
  }
  return "?";
}

std::string_view PolicyName(Policy p) { return p == Policy::kLru ? "lru" : "nothrash"; }

namespace {

constexpr uint64_t kVolume = 1;
constexpr uint64_t kVersion = 1;

class EventQueue {
 public:
  void At(double t, std::function<void()> fn) { q_.push(Event{t, seq_++, std::move(fn)}); }
  bool RunOne(double* now) {
    if (q_.empty()) return false;
    Event e = q_.top();
    q_.pop();
    *now = e.t;
    e.fn();
    return true;
  }

 private:
  struct Event {
    double t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> q_;
  uint64_t seq_ = 0;
};

// The BlockCache's bookkeeping without the data: byte quota, the policy, the listener.
class SimCache {
 public:
  SimCache(uint64_t capacity, agent::EvictionPolicy& policy)
      : capacity_(capacity), policy_(policy) {}
  void SetListener(agent::CacheListener* l) { listener_ = l; }
  bool Contains(const BlockKey& k) const { return blocks_.contains(k); }
  // BlockCache::WouldAdmit: room, or a victim the policy would give.
  uint64_t FreeBytes() const { return capacity_ > used_ ? capacity_ - used_ : 0; }
  bool WouldAdmit(const BlockKey& k, uint64_t len, const AdmissionHint& hint) const {
    return blocks_.contains(k) || used_ + len <= capacity_ || policy_.WouldAdmit(hint);
  }
  bool Read(const BlockKey& k) {
    auto it = blocks_.find(k);
    if (it == blocks_.end()) return false;
    policy_.OnAccess(k);
    if (it->second.origin != kDemand && !it->second.read && listener_) {
      listener_->OnPrefetchUsed(k, it->second.origin);
    }
    it->second.read = true;
    return true;
  }
  bool Put(const BlockKey& k, uint64_t len, const AdmissionHint& hint) {
    if (blocks_.contains(k)) return true;
    while (used_ + len > capacity_) {
      auto victim = policy_.PickVictim(k, hint);
      if (!victim || !blocks_.contains(*victim)) return false;
      Remove(*victim);
    }
    blocks_.emplace(k, Block{len, hint.origin, false});
    used_ += len;
    policy_.OnInsert(k, hint);
    return true;
  }
  void ReportRefused(const BlockKey& k, ExpertId origin) {
    if (listener_) listener_->OnPrefetchWasted(k, origin);
  }
  std::vector<BlockKey> Keys() const {
    std::vector<BlockKey> out;
    out.reserve(blocks_.size());
    for (const auto& [k, b] : blocks_) out.push_back(k);
    return out;
  }

 private:
  struct Block {
    uint64_t len;
    ExpertId origin;
    bool read;
  };
  void Remove(const BlockKey& k) {
    auto it = blocks_.find(k);
    if (it->second.origin != kDemand && !it->second.read && listener_) {
      listener_->OnPrefetchWasted(k, it->second.origin);
    }
    used_ -= it->second.len;
    blocks_.erase(it);
    policy_.OnRemove(k);
  }
  uint64_t capacity_;
  uint64_t used_ = 0;
  agent::EvictionPolicy& policy_;
  agent::CacheListener* listener_ = nullptr;
  std::unordered_map<BlockKey, Block, BlockKeyHash> blocks_;
};

// The fetcher + WAN. Implements PrefetchSink for the scheduler.
class SimFetcher final : public agent::PrefetchSink {
 public:
  SimFetcher(const SimConfig& c, EventQueue& q, const double& now, SimCache& cache,
             const std::vector<TraceFile>& files, SimResult& r)
      : c_(c), q_(q), now_(now), cache_(cache), files_(files), r_(r) {}
  void SetScheduler(agent::PrefetchScheduler* s) { scheduler_ = s; }
  // The loader's epoch (index into SimResult::epochs) for the per-epoch WAN bytes.
  void SetEpoch(const size_t* epoch) { epoch_ = epoch; }

  uint64_t Length(const BlockKey& k) const {
    const uint64_t size = files_[k.file_id - 1].size;
    return std::min<uint64_t>(c_.block_size, size - k.index * c_.block_size);
  }

  bool Submit(const agent::PrefetchRequest& req) override {
    const uint64_t bytes = req.block_count * c_.block_size;
    if (prefetch_bytes_ + bytes > c_.fetcher_prefetch_bytes) return false;
    for (uint64_t i = 0; i < req.block_count; ++i) {
      const BlockKey k{kVolume, req.file_id, req.version, req.first_block + i};
      if (Has(k)) continue;
      Fetch& f = fetches_[k];
      f.origin = req.expert;
      f.predicted_use = req.predicted_use + static_cast<double>(i);
      f.len = Length(k);
      prefetch_bytes_ += f.len;
      prefetch_q_.push_back(k);
    }
    r_.max_inflight_seen = std::max(r_.max_inflight_seen, prefetch_bytes_);
    Pump();
    return true;
  }
  uint64_t InFlightBytes() const override { return prefetch_bytes_; }
  bool Has(const BlockKey& k) const override { return cache_.Contains(k) || fetches_.contains(k); }
  bool WouldAdmit(const BlockKey& k, const AdmissionHint& hint) const override {
    return !c_.admission_before_fetch || cache_.WouldAdmit(k, Length(k), hint);
  }
  uint64_t FreeCacheBytes() const override { return cache_.FreeBytes(); }
  bool Pending(const BlockKey& k) const { return fetches_.contains(k); }

  // A demand read of `k`: fetched at demand priority unless it is already being fetched.
  // `done` runs when the block is there.
  void Demand(const BlockKey& k, std::function<void()> done) {
    auto it = fetches_.find(k);
    if (it != fetches_.end()) {
      it->second.waiters.push_back(std::move(done));
      if (!it->second.started && !it->second.urgent) {
        it->second.urgent = true;
        demand_q_.push_back(k);
        Pump();
      }
      return;
    }
    Fetch& f = fetches_[k];
    f.origin = kDemand;
    f.len = Length(k);
    f.urgent = true;
    f.waiters.push_back(std::move(done));
    demand_q_.push_back(k);
    Pump();
  }

 private:
  struct Fetch {
    ExpertId origin = kDemand;
    double predicted_use = agent::kUnknownUse;
    uint64_t len = 0;
    bool started = false;
    bool urgent = false;
    std::vector<std::function<void()>> waiters;
  };

  void Pump() {
    const uint32_t prefetch_slots = c_.wan.max_requests > c_.wan.demand_reserved
                                        ? c_.wan.max_requests - c_.wan.demand_reserved
                                        : 1;
    while (active_ < c_.wan.max_requests) {
      BlockKey k;
      if (!Next(&demand_q_, &k) && !(active_ < prefetch_slots && Next(&prefetch_q_, &k))) return;
      Fetch& f = fetches_[k];
      f.started = true;
      ++active_;
      link_free_ =
          std::max(now_, link_free_) + static_cast<double>(f.len) / c_.wan.bandwidth_bytes_per_s;
      q_.At(link_free_ + c_.wan.rtt_seconds, [this, k] { Complete(k); });
    }
  }
  bool Next(std::deque<BlockKey>* q, BlockKey* out) {
    while (!q->empty()) {
      const BlockKey k = q->front();
      q->pop_front();
      auto it = fetches_.find(k);
      if (it != fetches_.end() && !it->second.started) {
        *out = k;
        return true;
      }
    }
    return false;
  }
  void Complete(const BlockKey& k) {
    --active_;
    auto node = fetches_.extract(k);
    Fetch& f = node.mapped();
    r_.wan_bytes += f.len;
    if (epoch_ != nullptr && !r_.epochs.empty()) {
      r_.epochs[std::min(*epoch_, r_.epochs.size() - 1)].wan_bytes += f.len;
    }
    if (f.origin == kDemand) {
      r_.wan_demand_bytes += f.len;
    } else {
      r_.wan_prefetch_bytes += f.len;
      prefetch_bytes_ -= f.len;
    }
    if (!cache_.Put(k, f.len, AdmissionHint{f.origin, f.predicted_use})) {
      r_.refused_admission_bytes += f.len;
      // Fetched but not kept: for the expert that is the same as evicted unread.
      if (f.origin != kDemand && f.waiters.empty()) cache_.ReportRefused(k, f.origin);
    }
    for (auto& w : f.waiters) w();
    if (scheduler_ != nullptr) scheduler_->Tick();
    Pump();
  }

  const SimConfig& c_;
  EventQueue& q_;
  const double& now_;
  SimCache& cache_;
  const std::vector<TraceFile>& files_;
  SimResult& r_;
  agent::PrefetchScheduler* scheduler_ = nullptr;
  const size_t* epoch_ = nullptr;
  std::unordered_map<BlockKey, Fetch, BlockKeyHash> fetches_;
  std::deque<BlockKey> demand_q_, prefetch_q_;
  uint32_t active_ = 0;
  double link_free_ = 0;
  uint64_t prefetch_bytes_ = 0;
};

class SimClock final : public agent::Clock {
 public:
  explicit SimClock(const double& now) : now_(now) {}
  agent::SteadyTime Now() const override {
    return agent::SteadyTime(std::chrono::nanoseconds(static_cast<int64_t>(now_ * 1e9)));
  }

 private:
  const double& now_;
};

class Runner {
 public:
  Runner(const Trace& t, const SimConfig& c)
      : t_(t), c_(c), clock_(now_), fetcher_(c, q_, now_, cache_, t.files, r_) {
    r_.trace = t.name;
    r_.mode = c.mode;
    r_.policy = c.policy;
    r_.dataset_bytes = t.DatasetBytes();
    r_.cache_bytes = t.cache_bytes;
    r_.workers = static_cast<uint32_t>(t.workers.size());
    r_.epochs.resize(t.epochs);
    if (c.mode != Mode::kOff) {
      agent::PrefetchScheduler::Config sc;
      sc.volume_key = kVolume;
      sc.block_size = c.block_size;
      sc.max_inflight_bytes = c.max_inflight_bytes;
      sc.space_budget_bytes = c.space_budget_bytes ? c.space_budget_bytes : t.cache_bytes;
      scheduler_ = std::make_unique<agent::PrefetchScheduler>(sc, clock_, fetcher_);
      if (c.read_ahead) {
        scheduler_->AddExpert(
            std::make_unique<agent::SequentialPredictor>(agent::SequentialPredictor::Config{}));
      }
      if (c.mode == Mode::kExperts || c.mode == Mode::kExpertsHints) {
        agent::PrefetchScheduler::ExpertSet set = c.experts;
        set.hints = set.hints && c.mode == Mode::kExpertsHints;
        scheduler_->AddTrackerExperts(set);
      }
      if (c.walk_tree) {
        for (size_t i = 0; i < t.files.size(); ++i) {
          scheduler_->AddTreeFile(t.files[i].path, i + 1, kVersion, t.files[i].size);
        }
      }
      cache_.SetListener(scheduler_.get());
      fetcher_.SetScheduler(scheduler_.get());
    }
    fetcher_.SetEpoch(&epoch_done_);
    workers_.resize(t.workers.size());
  }

  SimResult Run() {
    for (size_t w = 0; w < workers_.size(); ++w) {
      q_.At(0, [this, w] { Step(w); });
    }
    while (q_.RunOne(&now_)) {
    }
    r_.elapsed_seconds = now_;
    for (const auto& e : r_.epochs) {
      r_.block_reads += e.block_reads;
      r_.hit_blocks += e.hit_blocks;
      r_.late_blocks += e.late_blocks;
      r_.demand_miss_blocks += e.demand_miss_blocks;
      r_.stall_seconds += e.stall_seconds;
    }
    if (scheduler_) r_.prefetch = scheduler_->Stats();
    return std::move(r_);
  }

 private:
  struct Worker {
    size_t pc = 0;
    uint64_t handle = 0;
    uint32_t waiting = 0;
  };

  agent::EvictionPolicy& PolicyRef() {
    if (c_.policy == Policy::kLru) return lru_;
    return nothrash_;
  }

  void Step(size_t w) {
    Worker& wk = workers_[w];
    const auto& ops = t_.workers[w];
    while (wk.pc < ops.size()) {
      const Op& op = ops[wk.pc++];
      switch (op.kind) {
        case Op::Kind::kOpen: {
          wk.handle = (uint64_t{w} << 32) | ++handles_;
          if (scheduler_) {
            agent::OpenEvent e;
            e.handle = wk.handle;
            e.path = t_.files[op.file].path;
            e.file_id = op.file + 1;
            e.version = kVersion;
            e.size = t_.files[op.file].size;
            e.time = clock_.Now();
            scheduler_->OnOpen(e);
          }
          break;
        }
        case Op::Kind::kClose:
          if (scheduler_) scheduler_->OnClose(agent::CloseEvent{wk.handle, clock_.Now()});
          break;
        case Op::Kind::kCompute:
          q_.At(now_ + op.seconds, [this, w] { Step(w); });
          return;
        case Op::Kind::kHint:
          if (scheduler_ && c_.mode == Mode::kExpertsHints) scheduler_->AddHints(op.text);
          break;
        case Op::Kind::kBarrier:
          if (Barrier(w)) break;
          return;
        case Op::Kind::kRead:
          if (Read(w, op)) break;
          return;
      }
    }
  }

  // Returns true when all workers arrived (this one continues; the others are resumed).
  bool Barrier(size_t w) {
    barrier_waiting_.push_back(w);
    if (barrier_waiting_.size() < workers_.size()) return false;
    EpochEnd();
    auto waiting = std::move(barrier_waiting_);
    barrier_waiting_.clear();
    for (size_t x : waiting) {
      if (x != w) q_.At(now_, [this, x] { Step(x); });
    }
    return true;
  }

  void EpochEnd() {
    auto keys = cache_.Keys();
    std::unordered_set<BlockKey, BlockKeyHash> now(keys.begin(), keys.end());
    if (epoch_done_ < r_.epochs.size()) {
      EpochResult& e = r_.epochs[epoch_done_];
      e.end_seconds = now_;
      if (!last_keys_.empty()) {
        size_t gone = 0;
        for (const auto& k : last_keys_) gone += !now.contains(k);
        e.churn = static_cast<double>(gone) / static_cast<double>(last_keys_.size());
      }
    }
    ++epoch_done_;
    last_keys_ = std::move(now);
  }

  // Returns true when the read completed at once (all hits).
  bool Read(size_t w, const Op& op) {
    Worker& wk = workers_[w];
    const TraceFile& f = t_.files[op.file];
    const uint64_t end = std::min(op.offset + op.length, f.size);
    if (end <= op.offset) return true;
    const uint64_t first = op.offset / c_.block_size;
    const uint64_t last = (end - 1) / c_.block_size;
    EpochResult& ep = r_.epochs[std::min<size_t>(op.epoch, r_.epochs.size() - 1)];
    bool all_hit = true;
    bool any_miss = false;
    std::vector<BlockKey> waited;
    for (uint64_t b = first; b <= last; ++b) {
      const BlockKey k{kVolume, op.file + 1, kVersion, b};
      ++ep.block_reads;
      if (cache_.Read(k)) {
        ++ep.hit_blocks;
        continue;
      }
      all_hit = false;
      if (fetcher_.Pending(k)) {
        ++ep.late_blocks;
      } else {
        ++ep.demand_miss_blocks;
        any_miss = true;
        if (op.batch == 0) {
          ++r_.first_batch_demand_misses;
        } else {
          ++r_.after_first_batch_demand_misses;
        }
      }
      waited.push_back(k);
    }
    const double start = now_;
    if (scheduler_) {
      agent::ReadEvent e;
      e.handle = wk.handle;
      e.path = f.path;
      e.file_id = op.file + 1;
      e.version = kVersion;
      e.file_size = f.size;
      e.offset = op.offset;
      e.length = end - op.offset;
      e.hit = all_hit;
      e.time = clock_.Now();
      scheduler_->OnRead(e);
      r_.max_outstanding_seen =
          std::max(r_.max_outstanding_seen, scheduler_->Stats().outstanding_bytes);
      if (c_.on_read) c_.on_read(now_, *scheduler_);
    }
    if (waited.empty()) return true;
    wk.waiting = static_cast<uint32_t>(waited.size());
    for (const BlockKey& k : waited) {
      fetcher_.Demand(k, [this, w, k, start, any_miss, &ep] {
        cache_.Read(k);  // the read that waited for it (counts prefetch use, recency)
        if (--workers_[w].waiting > 0) return;
        ep.stall_seconds += now_ - start;
        if (any_miss && scheduler_) {
          scheduler_->RecordDemandMiss(
              std::chrono::nanoseconds(static_cast<int64_t>((now_ - start) * 1e9)));
        }
        q_.At(now_, [this, w] { Step(w); });
      });
    }
    return false;
  }

  const Trace& t_;
  const SimConfig& c_;
  double now_ = 0;
  SimClock clock_;
  EventQueue q_;
  SimResult r_;
  agent::LruPolicy lru_;
  agent::NoThrashPolicy nothrash_;
  SimCache cache_{t_.cache_bytes, PolicyRef()};
  SimFetcher fetcher_;
  std::unique_ptr<agent::PrefetchScheduler> scheduler_;
  std::vector<Worker> workers_;
  std::vector<size_t> barrier_waiting_;
  uint64_t handles_ = 0;
  size_t epoch_done_ = 0;
  std::unordered_set<BlockKey, BlockKeyHash> last_keys_;
};

}  // namespace

SimResult RunSim(const Trace& trace, const SimConfig& config) {
  Runner runner(trace, config);
  return runner.Run();
}

}  // namespace spoke::sim
