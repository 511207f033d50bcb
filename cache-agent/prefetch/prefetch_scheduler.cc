#include "cache-agent/prefetch/prefetch_scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "cache-agent/prefetch/directory_order_predictor.h"
#include "cache-agent/prefetch/epoch_replay_predictor.h"
#include "cache-agent/prefetch/epoch_working_set_predictor.h"

namespace spoke::agent {

Status PrefetchScheduler::Config::Validate() const {
  if (block_size == 0) return Fail(Code::kInvalidArgument, "prefetch: block_size must be > 0");
  if (space_budget_bytes < block_size) {
    return Fail(Code::kInvalidArgument, "prefetch: space_budget_bytes must be >= block_size");
  }
  if (max_inflight_bytes < block_size) {
    return Fail(Code::kInvalidArgument, "prefetch: max_inflight_bytes must be >= block_size");
  }
  if (max_request_blocks == 0) {
    return Fail(Code::kInvalidArgument, "prefetch: max_request_blocks must be > 0");
  }
  if (!(precision_decay > 0 && precision_decay < 1)) {
    return Fail(Code::kInvalidArgument, "prefetch: precision_decay must be in (0, 1)");
  }
  if (!(prior_precision >= 0 && prior_precision <= 1)) {
    return Fail(Code::kInvalidArgument, "prefetch: prior_precision must be in [0, 1]");
  }
  if (!(cutoff >= 0 && cutoff < 1)) {
    return Fail(Code::kInvalidArgument, "prefetch: cutoff must be in [0, 1)");
  }
  if (!(unproven_share >= 0 && unproven_share <= 1)) {
    return Fail(Code::kInvalidArgument, "prefetch: unproven_share must be in [0, 1]");
  }
  if (!(coverage_decay > 0 && coverage_decay < 1)) {
    return Fail(Code::kInvalidArgument, "prefetch: coverage_decay must be in (0, 1)");
  }
  AccessTracker::Config t = tracker;
  t.block_size = block_size;
  if (auto st = hints.Validate(); !st) return st;
  return t.Validate();
}

namespace {
AccessTracker::Config TrackerConfig(const PrefetchScheduler::Config& c) {
  AccessTracker::Config t = c.tracker;
  t.block_size = c.block_size;
  return t;
}
}  // namespace

PrefetchScheduler::PrefetchScheduler(Config config, const Clock& clock, PrefetchSink& sink)
    : config_(config), clock_(clock), sink_(sink), tracker_(TrackerConfig(config)) {
  assert(config_.Validate().has_value());
  last_event_ = clock_.Now();
}

PrefetchScheduler::~PrefetchScheduler() = default;

ExpertId PrefetchScheduler::AddExpert(std::unique_ptr<Predictor> expert) {
  MutexLock lock(mu_);
  assert(experts_.size() < 254);
  Expert e;
  e.predictor = std::move(expert);
  e.id = static_cast<ExpertId>(experts_.size() + 1);
  e.precision = config_.prior_precision;
  experts_.push_back(std::move(e));
  UpdateAllowancesLocked(SpaceLimitLocked(sink_.InFlightBytes()));
  return experts_.back().id;
}

// The experts keep a reference to the tracker and use it only when the scheduler calls them,
// under mu_: handing it over needs no lock, and the analysis cannot follow the later uses.
void PrefetchScheduler::AddTrackerExperts(const ExpertSet& set) NO_THREAD_SAFETY_ANALYSIS {
  if (set.hints) {
    auto h = std::make_unique<HintPredictor>(tracker_, presence_, config_.hints);
    HintPredictor* raw = h.get();
    AddExpert(std::move(h));
    MutexLock lock(mu_);
    hints_ = raw;
  }
  if (set.replay) AddExpert(std::make_unique<EpochReplayPredictor>(tracker_, presence_));
  if (set.directory) AddExpert(std::make_unique<DirectoryOrderPredictor>(tracker_, presence_));
  if (set.working_set) {
    AddExpert(std::make_unique<EpochWorkingSetPredictor>(tracker_, presence_));
  }
}

void PrefetchScheduler::AddTreeFile(std::string_view path, uint64_t file_id, uint64_t version,
                                    uint64_t size) {
  MutexLock lock(mu_);
  tracker_.AddTreeFile(path, file_id, version, size);
}

void PrefetchScheduler::ForgetFile(std::string_view path) {
  MutexLock lock(mu_);
  const auto f = tracker_.Find(path);
  if (!f) return;
  for (Expert& x : experts_) {
    if (auto* t = dynamic_cast<TrackerExpert*>(x.predictor.get())) t->OnForget(*f);
  }
  tracker_.Forget(*f);
}

void PrefetchScheduler::ForgetFiles(std::span<const std::string> paths) {
  if (paths.empty()) return;
  MutexLock lock(mu_);
  std::vector<bool> dying(tracker_.file_count());
  std::vector<FileIndex> files;
  files.reserve(paths.size());
  for (const std::string& path : paths) {
    const auto f = tracker_.Find(path);
    if (!f || dying[*f]) continue;  // unknown, or named twice
    dying[*f] = true;
    files.push_back(*f);
  }
  if (files.empty()) return;
  for (Expert& x : experts_) {
    if (auto* t = dynamic_cast<TrackerExpert*>(x.predictor.get())) t->OnForgetMany(files, dying);
  }
  tracker_.ForgetMany(files);
}

bool PrefetchScheduler::Presence::Present(const TrackedFile& f, uint64_t block) const {
  s_.mu_.AssertHeld();  // experts ask only while the scheduler calls them, under its mu_
  return s_.PresentLocked(s_.Key(f.file_id, f.version, block));
}

bool PrefetchScheduler::PresentLocked(const BlockKey& key) const {
  return pending_.contains(key) || declined_.contains(key) || sink_.Has(key);
}

PrefetchScheduler::Expert* PrefetchScheduler::ExpertById(ExpertId id) {
  if (id == kDemand || id > experts_.size()) return nullptr;
  return &experts_[id - 1];
}

void PrefetchScheduler::OnOpen(const OpenEvent& e) {
  MutexLock lock(mu_);
  last_event_ = clock_.Now();
  const uint64_t verdicts_before = verdicts_applied_;
  DrainVerdictsLocked();
  tracker_.OnOpen(e);
  for (Expert& x : experts_) x.predictor->OnOpen(e);
  // An open reads nothing yet: its first read says whether the file was there.
  MaybeScheduleLocked(/*hit=*/true, verdicts_before);
}

void PrefetchScheduler::MaybeScheduleLocked(bool hit, uint64_t verdicts_before) {
  if (last_pass_idle_ && hit && verdicts_applied_ == verdicts_before &&
      tracker_.epoch() == idle_epoch_) {
    ++skipped_passes_;
    return;
  }
  ScheduleLocked();
}

void PrefetchScheduler::OnRead(const ReadEvent& e) {
  MutexLock lock(mu_);
  last_event_ = clock_.Now();
  const uint64_t verdicts_before = verdicts_applied_;
  DrainVerdictsLocked();
  tracker_.OnRead(e);
  if (e.length > 0) {
    const uint64_t first = e.offset / config_.block_size;
    const uint64_t last = (e.offset + e.length - 1) / config_.block_size;
    for (uint64_t b = first; b <= last; ++b) {
      const BlockKey key = Key(e.file_id, e.version, b);
      auto it = pending_.find(key);
      if (it != pending_.end()) {
        const ExpertId by = it->second.expert;
        ApplyVerdictLocked(key, Verdict::kUsed);
        CoverageLocked(by);
      } else if (!e.hit) {
        ++demand_miss_blocks_;
        CoverageLocked(kDemand);
      }
    }
  }
  for (Expert& x : experts_) x.predictor->OnRead(e);
  ExpireLocked();
  MaybeScheduleLocked(e.hit, verdicts_before);
}

void PrefetchScheduler::OnClose(const CloseEvent& e) {
  MutexLock lock(mu_);
  tracker_.OnClose(e);
  for (Expert& x : experts_) x.predictor->OnClose(e);
}

void PrefetchScheduler::Tick() {
  MutexLock lock(mu_);
  DrainVerdictsLocked();
  if (clock_.Now() - last_event_ > config_.idle_release && !pending_.empty()) {
    ReleaseAllLocked();
    return;
  }
  ExpireLocked();
  ScheduleLocked();
}

void PrefetchScheduler::RecordDemandMiss(std::chrono::nanoseconds latency) {
  miss_reads_.fetch_add(1, std::memory_order_relaxed);
  miss_nanos_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(latency.count(), 0)),
                        std::memory_order_relaxed);
}

HintCounts PrefetchScheduler::AddHints(std::string_view text) {
  MutexLock lock(mu_);
  if (hints_ == nullptr) {
    HintCounts c;
    for (char ch : text) c.rejected += ch == '\n';
    return c;
  }
  HintCounts c = hints_->AddHints(text);
  ScheduleLocked();
  return c;
}

HintCounts PrefetchScheduler::FlushHints() {
  MutexLock lock(mu_);
  if (hints_ == nullptr) return {};
  HintCounts c = hints_->FlushHints();
  ScheduleLocked();
  return c;
}

HintCounts PrefetchScheduler::AddHintPaths(std::span<const std::string> paths) {
  MutexLock lock(mu_);
  if (hints_ == nullptr) return HintCounts{0, static_cast<uint32_t>(paths.size())};
  HintCounts c = hints_->AddHintPaths(paths);
  ScheduleLocked();
  return c;
}

void PrefetchScheduler::OnPrefetchUsed(const BlockKey& key, ExpertId) {
  if (key.volume != config_.volume_key) return;
  MutexLock lock(verdict_mu_);
  verdicts_.emplace_back(key, true);
}

void PrefetchScheduler::OnPrefetchWasted(const BlockKey& key, ExpertId) {
  if (key.volume != config_.volume_key) return;
  MutexLock lock(verdict_mu_);
  verdicts_.emplace_back(key, false);
}

void PrefetchScheduler::DrainVerdictsLocked() {
  std::vector<std::pair<BlockKey, bool>> v;
  {
    MutexLock lock(verdict_mu_);
    v.swap(verdicts_);
  }
  for (const auto& [key, used] : v) {
    auto it = pending_.find(key);
    if (it == pending_.end()) continue;  // read already (OnRead) or expired
    const ExpertId by = it->second.expert;
    ApplyVerdictLocked(key, used ? Verdict::kUsed : Verdict::kWasted);
    if (used) CoverageLocked(by);
  }
}

PrefetchScheduler::Expert* PrefetchScheduler::RemovePendingLocked(const BlockKey& key,
                                                                  uint64_t* bytes) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return nullptr;
  Expert* x = ExpertById(it->second.expert);
  *bytes = it->second.bytes;
  pending_.erase(it);
  --outstanding_blocks_;
  outstanding_bytes_ -= *bytes;
  if (x != nullptr) {
    --x->outstanding;
    x->outstanding_bytes -= *bytes;
  }
  return x;
}

void PrefetchScheduler::ReleaseAllLocked() {
  while (!pending_.empty()) {
    const BlockKey key = pending_.begin()->first;
    if (pending_.begin()->second.epoch != kOrdered) sink_.Abandon(key);
    uint64_t bytes = 0;
    Expert* x = RemovePendingLocked(key, &bytes);
    if (x != nullptr) ++x->released;
  }
  deadlines_ = {};
  epoch_pending_.clear();
}

void PrefetchScheduler::ApplyVerdictLocked(const BlockKey& key, Verdict v) {
  uint64_t bytes = 0;
  Expert* x = RemovePendingLocked(key, &bytes);
  if (x == nullptr) return;
  ++verdicts_applied_;
  ++x->verdicts;
  const double hit = v == Verdict::kUsed ? 1.0 : 0.0;
  x->precision += config_.precision_decay * (hit - x->precision);
  if (v == Verdict::kUsed) {
    ++x->used;
    used_bytes_ += bytes;
  } else {
    ++x->wasted;
    wasted_bytes_ += bytes;
    if (v == Verdict::kExpired) ++x->expired;
  }
}

void PrefetchScheduler::CoverageLocked(ExpertId served_by) {
  for (Expert& x : experts_) {
    const double hit = x.id == served_by ? 1.0 : 0.0;
    x.coverage += config_.coverage_decay * (hit - x.coverage);
  }
}

void PrefetchScheduler::ExpireEpochsLocked() {
  const uint64_t now = tracker_.blocks_read();
  if (tracker_.epoch() != seen_epoch_) {
    seen_epoch_ = tracker_.epoch();
    epoch_started_at_ = now;
  }
  // The slack covers reads of the old epoch that the tracker counts in the new one.
  if (now < epoch_started_at_ + config_.min_horizon_blocks) return;
  while (!epoch_pending_.empty() && epoch_pending_.begin()->first < seen_epoch_) {
    const auto node = epoch_pending_.extract(epoch_pending_.begin());
    for (const BlockKey& key : node.mapped()) {
      auto it = pending_.find(key);
      if (it != pending_.end() && it->second.epoch == node.key()) {
        ApplyVerdictLocked(key, Verdict::kExpired);
        sink_.Abandon(key);
      }
    }
  }
}

void PrefetchScheduler::ExpireLocked() {
  ExpireEpochsLocked();
  const uint64_t now = tracker_.blocks_read();
  while (!deadlines_.empty() && deadlines_.top().at <= now) {
    const Deadline d = deadlines_.top();
    deadlines_.pop();
    auto it = pending_.find(d.key);
    if (it != pending_.end() && it->second.deadline == d.at) {
      ApplyVerdictLocked(d.key, Verdict::kExpired);
    }
  }
}

uint64_t PrefetchScheduler::SpaceLimitLocked(uint64_t inflight) const {
  const uint64_t free = sink_.FreeCacheBytes();
  return config_.space_budget_bytes + (free > inflight ? free - inflight : 0);
}

void PrefetchScheduler::UpdateAllowancesLocked(uint64_t space_limit) {
  // Only demonstrated precision earns budget: an expert without verdicts must not outrank
  // (or out-budget) one that was proven right, whatever the prior.
  const auto earned = [](const Expert& x) { return x.verdicts > 0 || x.predictor->disclosed(); };
  double best = 0;
  for (const Expert& x : experts_) {
    if (earned(x) && x.precision >= config_.cutoff) best = std::max(best, x.precision);
  }
  const uint64_t floor = uint64_t{config_.exploration_blocks} * config_.block_size;
  for (Expert& x : experts_) {
    uint64_t a = 0;
    if (!earned(x)) {
      // Exploration is paid from the configured budget, never from the free room.
      a = static_cast<uint64_t>(static_cast<double>(config_.space_budget_bytes) *
                                config_.unproven_share);
    } else if (best > 0 && x.precision >= config_.cutoff) {
      const double r = x.precision / best;
      a = static_cast<uint64_t>(static_cast<double>(space_limit) * r * r);
    }
    x.allowance = std::max(a, floor);
  }
}

struct PrefetchScheduler::SchedulePass {
  uint64_t inflight = 0;  // the sink's bytes in flight, read again after each submit
  uint64_t space = 0;     // SpaceLimitLocked at the start of the pass
  uint64_t now = 0;       // the block clock
  uint64_t submitted = 0;
};

void PrefetchScheduler::ScheduleLocked() {
  last_pass_idle_ = false;  // until the pass below has looked at every expert
  if (experts_.empty()) return;
  SchedulePass pass;
  pass.inflight = sink_.InFlightBytes();
  pass.space = SpaceLimitLocked(pass.inflight);
  UpdateAllowancesLocked(pass.space);
  if (pass.inflight + config_.block_size > config_.max_inflight_bytes) return;

  const std::vector<Expert*> order = ExpertsProvenFirstLocked();
  pass.now = tracker_.blocks_read();
  ForgetStaleDeclinesLocked(pass.now);
  for (Expert* x : order) {
    if (!ScheduleExpertLocked(*x, pass)) return;
  }
  last_pass_idle_ = pass.submitted == 0;
  idle_epoch_ = tracker_.epoch();
}

std::vector<PrefetchScheduler::Expert*> PrefetchScheduler::ExpertsProvenFirstLocked() {
  std::vector<Expert*> order;
  order.reserve(experts_.size());
  for (Expert& x : experts_) order.push_back(&x);
  std::stable_sort(order.begin(), order.end(), [](const Expert* a, const Expert* b) {
    const bool pa = a->verdicts > 0 || a->predictor->disclosed();
    const bool pb = b->verdicts > 0 || b->predictor->disclosed();
    if (pa != pb) return pa;  // proven experts first
    return a->precision > b->precision;
  });
  return order;
}

void PrefetchScheduler::ForgetStaleDeclinesLocked(uint64_t now) {
  if (!declined_.empty() && (now >= declined_until_ || tracker_.epoch() != declined_epoch_)) {
    declined_.clear();  // the cache moved on: ask again
  }
}

// Asks the cache before the block crosses the WAN; remembers a refusal (docs/design.md,
// "Admission before fetch"). Disclosed orders (hints) are exact: their blocks are fetched and
// the policy decides at store time, because a rank compared now against ranks given earlier
// would refuse blocks that are due soon.
bool PrefetchScheduler::AdmittedLocked(const PrefetchRequest& p, uint64_t block, const Expert& by,
                                       uint64_t now) {
  if (by.predictor->disclosed()) return true;
  const BlockKey key = Key(p.file_id, p.version, block);
  const double use = p.predicted_use + static_cast<double>(block - p.first_block);
  if (sink_.WouldAdmit(key, AdmissionHint{by.id, use})) return true;
  if (declined_.empty()) {
    declined_until_ = now + config_.min_horizon_blocks;
    declined_epoch_ = tracker_.epoch();
  }
  declined_.insert(key);
  ++declined_total_;
  return false;
}

bool PrefetchScheduler::ScheduleExpertLocked(Expert& x, SchedulePass& pass) {
  const uint64_t bs = config_.block_size;
  if (outstanding_bytes_ + bs > pass.space) return false;
  if (x.outstanding_bytes + bs > x.allowance) return true;
  const uint64_t budget =
      std::min({x.allowance - x.outstanding_bytes, pass.space - outstanding_bytes_,
                config_.max_inflight_bytes - pass.inflight});
  proposals_.clear();
  x.predictor->Predict(budget, static_cast<uint32_t>(bs), &proposals_);
  for (const PrefetchRequest& p : proposals_) {
    if (!SubmitProposalLocked(p, x, pass)) return false;
    if (pass.inflight + bs > config_.max_inflight_bytes) return false;
    if (outstanding_bytes_ + bs > pass.space) return false;
    if (x.outstanding_bytes + bs > x.allowance) break;
  }
  return true;
}

bool PrefetchScheduler::SubmitProposalLocked(const PrefetchRequest& p, Expert& x,
                                             SchedulePass& pass) {
  const uint64_t bs = config_.block_size;
  const uint64_t file_blocks = (p.file_size + bs - 1) / bs;
  const uint64_t end = std::min(p.first_block + p.block_count, file_blocks);
  uint64_t b = p.first_block;
  while (b < end) {
    // Skip what is outstanding, cached or being fetched (de-dup across experts).
    if (PresentLocked(Key(p.file_id, p.version, b)) || !AdmittedLocked(p, b, x, pass.now)) {
      ++b;
      continue;
    }
    uint64_t bytes = 0;
    const uint64_t n = AbsentRunLocked(p, b, end, x, pass, bytes);
    if (n == 0) break;
    PrefetchRequest r = p;
    r.first_block = b;
    r.block_count = n;
    r.predicted_use = p.predicted_use + static_cast<double>(b - p.first_block);
    r.expert = x.id;
    if (!sink_.Submit(r)) {
      ++sink_refusals_;
      return false;  // the fetcher is full: retry on the next event or Tick
    }
    ++pass.submitted;
    pass.inflight = sink_.InFlightBytes();
    TrackSubmittedLocked(r, x, pass.now);
    outstanding_blocks_ += n;
    outstanding_bytes_ += bytes;
    x.outstanding += n;
    x.outstanding_bytes += bytes;
    x.predicted += n;
    b += n;
  }
  return true;
}

uint64_t PrefetchScheduler::AbsentRunLocked(const PrefetchRequest& p, uint64_t b, uint64_t end,
                                            const Expert& x, const SchedulePass& pass,
                                            uint64_t& bytes) {
  const uint64_t bs = config_.block_size;
  uint64_t n = 0;
  bytes = 0;
  while (b + n < end && n < config_.max_request_blocks) {
    const uint64_t len = std::min(bs, p.file_size - (b + n) * bs);
    if (pass.inflight + bytes + len > config_.max_inflight_bytes ||
        outstanding_bytes_ + bytes + len > pass.space ||
        x.outstanding_bytes + bytes + len > x.allowance ||
        PresentLocked(Key(p.file_id, p.version, b + n)) ||
        (n > 0 && !AdmittedLocked(p, b + n, x, pass.now))) {
      break;
    }
    bytes += len;
    ++n;
  }
  return n;
}

void PrefetchScheduler::TrackSubmittedLocked(const PrefetchRequest& r, const Expert& x,
                                             uint64_t now) {
  const uint64_t bs = config_.block_size;
  for (uint64_t i = 0; i < r.block_count; ++i) {
    const uint64_t block = r.first_block + i;
    const BlockKey key = Key(r.file_id, r.version, block);
    const uint64_t length = std::min(bs, r.file_size - block * bs);
    if (r.within_epoch) {
      pending_[key] = Pending{x.id, 0, length, tracker_.epoch()};
      ListInEpochLocked(key);
      continue;
    }
    const double rank = std::max(0.0, r.predicted_use + static_cast<double>(i));
    const uint64_t deadline = now + config_.min_horizon_blocks + static_cast<uint64_t>(2 * rank);
    pending_[key] = Pending{x.id, deadline, length, kOrdered};
    deadlines_.push(Deadline{deadline, key});
  }
}

void PrefetchScheduler::ListInEpochLocked(const BlockKey& key) {
  std::vector<BlockKey>& list = epoch_pending_[tracker_.epoch()];
  // Blocks read since stay listed: compact so a long epoch does not grow it.
  if (list.size() >= 2 * outstanding_blocks_ + 1024) {
    std::erase_if(list, [&](const BlockKey& k) REQUIRES(mu_) {
      auto p = pending_.find(k);
      return p == pending_.end() || p->second.epoch != tracker_.epoch();
    });
  }
  list.push_back(key);
}

PrefetchStats PrefetchScheduler::Stats() const {
  PrefetchStats s;
  {
    MutexLock lock(mu_);
    s.epoch = tracker_.epoch();
    s.tracked_files = tracker_.live_file_count();
    s.tracker_slots = tracker_.file_count();
    for (const Expert& x : experts_) {
      ExpertStats e;
      e.id = x.id;
      e.name = std::string(x.predictor->name());
      e.precision = x.precision;
      e.coverage = x.coverage;
      e.predicted_blocks = x.predicted;
      e.used_blocks = x.used;
      e.wasted_blocks = x.wasted;
      e.expired_blocks = x.expired;
      e.released_blocks = x.released;
      e.proven = x.verdicts > 0;
      e.outstanding_blocks = x.outstanding;
      e.budget_bytes = x.allowance;
      s.experts.push_back(std::move(e));
    }
    s.prefetched_bytes_used = used_bytes_;
    s.prefetched_bytes_wasted = wasted_bytes_;
    s.demand_miss_blocks = demand_miss_blocks_;
    s.outstanding_bytes = outstanding_bytes_;
    s.sink_refusals = sink_refusals_;
    s.admission_declined_blocks = declined_total_;
    if (hints_ != nullptr) {
      s.hints_accepted = hints_->total_accepted();
      s.hints_rejected = hints_->total_rejected();
      s.hints_pending = hints_->pending();
      s.hints_pending_bytes = hints_->pending_bytes();
      s.hints_unresolved = hints_->unresolved();
    }
  }
  s.inflight_bytes = sink_.InFlightBytes();
  s.space_budget_bytes = config_.space_budget_bytes;
  s.max_inflight_bytes = config_.max_inflight_bytes;
  s.demand_miss_reads = miss_reads_.load(std::memory_order_relaxed);
  s.demand_miss_seconds = static_cast<double>(miss_nanos_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

}  // namespace spoke::agent
