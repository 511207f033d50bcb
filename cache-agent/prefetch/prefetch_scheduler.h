// PrefetchScheduler: runs the experts of one volume and decides what is fetched. Volume
// events (OnOpen/OnRead/OnClose) and the cache's verdicts (OnPrefetchUsed/Wasted) score each
// expert's precision; the space and bandwidth budgets follow that precision; every block is
// submitted once, by the most precise expert that proposed it. The rules and why they hold a
// wrong expert to a few blocks: docs/design.md, "How the scheduler scores and budgets".
//
// Threading: every method is thread-safe. Events and Tick call the experts and the sink under
// the scheduler's lock (the sink takes the fetcher's and the cache's); the CacheListener
// methods only queue a verdict under a leaf lock. Callers must not hold the fetcher's or the
// cache's locks when calling OnOpen/OnRead/OnClose/Tick.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/block_key.h"
#include "cache-agent/prefetch/access_tracker.h"
#include "cache-agent/prefetch/clock.h"
#include "cache-agent/prefetch/hint_predictor.h"
#include "cache-agent/prefetch/predictor.h"
#include "cache-agent/prefetch/tracker_expert.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

// Where the scheduler sends its decisions: the fetcher (BlockFetcher in the agent, a fake
// in tests, the simulated WAN in spoke-sim).
class PrefetchSink {
 public:
  virtual ~PrefetchSink() = default;
  // Queues the request's blocks at prefetch priority (behind every demand read); each block
  // is stored with AdmissionHint{request.expert, request.predicted_use + i}. Returns false
  // when the fetcher is over its own budget: nothing was queued.
  virtual bool Submit(const PrefetchRequest& request) = 0;
  // Prefetch bytes queued or in flight (not demand reads).
  virtual uint64_t InFlightBytes() const = 0;
  // True when the block is cached or being fetched.
  virtual bool Has(const BlockKey& key) const = 0;
  // True when the block, once fetched, would be kept until read: the cache would admit it
  // with `hint` now (BlockCache::WouldAdmit), or the fetcher has room to hold it in memory
  // (BlockFetcher's staging buffer, for a full cache). The scheduler does not send a block
  // over the WAN that would be dropped on arrival.
  virtual bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const = 0;
  // Bytes the cache can still take without evicting anything (BlockCache::FreeBytes).
  virtual uint64_t FreeCacheBytes() const = 0;
  // The scheduler gave up a set prediction (within_epoch) of `key` unread: its epoch ended or
  // the volume went idle. A sink holding the block in memory for it alone (the fetcher's
  // staging buffer holds such blocks without a ttl) drops it.
  virtual void Abandon(const BlockKey&) {}
};

struct ExpertStats {
  ExpertId id = kDemand;
  std::string name;
  double precision = 0;
  double coverage = 0;
  uint64_t predicted_blocks = 0;  // submitted to the fetcher
  uint64_t used_blocks = 0;
  uint64_t wasted_blocks = 0;    // evicted unread, or expired (below)
  uint64_t expired_blocks = 0;   // not read within the horizon
  uint64_t released_blocks = 0;  // given up without a verdict (the volume went idle)
  uint64_t outstanding_blocks = 0;
  bool proven = false;        // has had a verdict: its budget follows its precision
  uint64_t budget_bytes = 0;  // current allowance of outstanding bytes
};

struct PrefetchStats {
  uint64_t epoch = 0;
  std::vector<ExpertStats> experts;
  uint64_t prefetched_bytes_used = 0;
  uint64_t prefetched_bytes_wasted = 0;
  uint64_t demand_miss_blocks = 0;  // blocks read that were neither cached nor prefetched
  uint64_t demand_miss_reads = 0;   // RecordDemandMiss calls
  double demand_miss_seconds = 0;   // their summed latency
  uint64_t inflight_bytes = 0;      // fetcher's prefetch bytes in flight
  uint64_t outstanding_bytes = 0;   // submitted and without verdict
  uint64_t space_budget_bytes = 0;
  uint64_t max_inflight_bytes = 0;
  uint64_t sink_refusals = 0;              // Submit returned false
  uint64_t admission_declined_blocks = 0;  // not fetched: the cache would not admit them
  uint64_t hints_accepted = 0;
  uint64_t hints_rejected = 0;
  uint64_t hints_pending = 0;
  uint64_t hints_pending_bytes = 0;  // accounted memory of the queued hints
  uint64_t hints_unresolved = 0;     // dropped: named no file of the volume
  uint64_t tracked_files = 0;        // files the access tracker knows (walked or opened)
  uint64_t tracker_slots = 0;        // its file slots, live and free (the peak of the above)

  double DemandMissLatencyMsAvg() const {
    return demand_miss_reads == 0 ? 0 : demand_miss_seconds * 1e3 / demand_miss_reads;
  }
};

class PrefetchScheduler final : public CacheListener {
 public:
  struct Config {
    uint64_t volume_key = 0;        // BlockKey::volume of this volume's blocks
    uint32_t block_size = 1 << 20;  // the cache's block size
    // Prefetch bytes in flight: about bandwidth x RTT (10 Gbit/s x 60 ms = 75 MB) keeps the
    // WAN busy; more only queues at the fetcher.
    uint64_t max_inflight_bytes = 64ull << 20;
    // Unverified prefetched bytes: the cache space prefetching may take on credit. The
    // agent sets the volume's share of the cache; required.
    uint64_t space_budget_bytes = 0;
    uint32_t max_request_blocks = 16;   // one Submit covers at most this many blocks
    double precision_decay = 1.0 / 16;  // weight of one verdict
    double prior_precision = 0.5;       // an unproven expert: half right
    double cutoff = 0.4;                // below: exploration budget only
    double unproven_share = 1.0 / 8;    // of space_budget, for an expert without verdicts
    uint32_t exploration_blocks = 4;    // a failed expert keeps probing with this many
    uint64_t min_horizon_blocks = 256;  // expiry slack (block reads)
    double coverage_decay = 1.0 / 256;  // weight of one non-cached block read
    // A volume nobody read for this long releases its outstanding predictions (expired):
    // the job stopped; its space budget should not stay claimed.
    std::chrono::nanoseconds idle_release = std::chrono::minutes(2);
    AccessTracker::Config tracker;  // block_size is overridden with block_size
    // The hint expert's bounds (per volume) and the agent's memory budget its queue draws on.
    HintPredictor::Options hints;
    Status Validate() const;
  };

  // Which of the tracker-based experts AddTrackerExperts installs.
  struct ExpertSet {
    bool directory = true;
    bool replay = true;
    bool working_set = true;
    bool hints = true;
  };

  // `config` must be valid (Validate) — an invalid one is a bug and asserts.
  PrefetchScheduler(Config config, const Clock& clock, PrefetchSink& sink);
  ~PrefetchScheduler() override;
  PrefetchScheduler(const PrefetchScheduler&) = delete;
  PrefetchScheduler& operator=(const PrefetchScheduler&) = delete;

  // --- set-up (any time, thread-safe) ---
  // Adds an expert (e.g. SequentialPredictor). Returns its ExpertId (1, 2, ...).
  ExpertId AddExpert(std::unique_ptr<Predictor> expert);
  // Adds DirectoryOrder, EpochReplay, EpochWorkingSet and Hint predictors as selected.
  void AddTrackerExperts(const ExpertSet& set);
  // For experts built outside: they must only be used through this scheduler.
  const AccessTracker& tracker() const NO_THREAD_SAFETY_ANALYSIS { return tracker_; }
  const BlockPresence& presence() const { return presence_; }
  // Metadata walk: every regular file of the volume, in walk order.
  void AddTreeFile(std::string_view path, uint64_t file_id, uint64_t version, uint64_t size);
  // The file at `path` left the volume (unlinked, renamed over, removed on the hub): the
  // tracker forgets it, so that its memory follows the live files. Unknown paths are ignored.
  void ForgetFile(std::string_view path);
  // ForgetFile for each path, in one pass over the tracker's orders and one batch call per
  // expert (TrackerExpert::OnForgetMany, AccessTracker::ForgetMany) instead of one per file:
  // a relisting may find 100k files gone, and a per-file forget is O(files).
  void ForgetFiles(std::span<const std::string> paths);

  // --- events from VolumeFs ---
  void OnOpen(const OpenEvent& e);
  // Call as soon as the cache lookup is done (before waiting for missed blocks), so that
  // prefetches start one round trip earlier.
  void OnRead(const ReadEvent& e);
  void OnClose(const CloseEvent& e);
  // Re-plans without an event: call when prefetch bytes complete (the in-flight budget
  // freed) and from a timer.
  void Tick();
  // Latency of one read that waited for the hub (demand miss): the simulator's figure. In the
  // agent the BlockFetcher times demand misses (VolumeFigures, spoke_demand_miss_seconds).
  void RecordDemandMiss(std::chrono::nanoseconds latency);

  // --- hints (HintPredictor; counted as rejected when no hint expert is installed) ---
  HintCounts AddHints(std::string_view text);
  HintCounts FlushHints();
  HintCounts AddHintPaths(std::span<const std::string> paths);

  // --- CacheListener (register with BlockCache::SetListener, or fan out to it) ---
  void OnPrefetchUsed(const BlockKey& key, ExpertId expert) override;
  void OnPrefetchWasted(const BlockKey& key, ExpertId expert) override;

  PrefetchStats Stats() const;

 private:
  struct Expert {
    std::unique_ptr<Predictor> predictor;
    ExpertId id = kDemand;
    double precision = 0;
    double coverage = 0;
    uint64_t predicted = 0, used = 0, wasted = 0, expired = 0, released = 0;
    uint64_t verdicts = 0;
    uint64_t outstanding = 0;        // blocks
    uint64_t outstanding_bytes = 0;  // their bytes (short last blocks count what they hold)
    uint64_t allowance = 0;          // bytes
  };
  struct Pending {
    ExpertId expert = kDemand;
    uint64_t deadline = 0;  // block clock (ordered predictions)
    uint64_t bytes = 0;
    uint64_t epoch = kOrdered;  // the epoch of a set prediction (within_epoch)
  };
  static constexpr uint64_t kOrdered = ~uint64_t{0};
  struct Deadline {
    uint64_t at;
    BlockKey key;
    bool operator>(const Deadline& o) const { return at > o.at; }
  };
  class Presence final : public BlockPresence {
   public:
    explicit Presence(PrefetchScheduler& s) : s_(s) {}
    bool Present(const TrackedFile& f, uint64_t block) const override;

   private:
    PrefetchScheduler& s_;
  };
  enum class Verdict { kUsed, kWasted, kExpired };

  BlockKey Key(uint64_t file_id, uint64_t version, uint64_t block) const {
    return BlockKey{config_.volume_key, file_id, version, block};
  }
  bool PresentLocked(const BlockKey& key) const REQUIRES(mu_);
  void DrainVerdictsLocked() REQUIRES(mu_);
  void ApplyVerdictLocked(const BlockKey& key, Verdict v) REQUIRES(mu_);
  // Drops `key` from the outstanding set; returns its expert (nullptr if unknown) and bytes.
  Expert* RemovePendingLocked(const BlockKey& key, uint64_t* bytes) REQUIRES(mu_);
  void ReleaseAllLocked() REQUIRES(mu_);
  void ExpireLocked() REQUIRES(mu_);
  void ExpireEpochsLocked() REQUIRES(mu_);
  // The space prefetching may hold now: space_budget_bytes plus the cache's free room not
  // already claimed by the prefetch bytes in flight (see "Budgets").
  uint64_t SpaceLimitLocked(uint64_t inflight) const REQUIRES(mu_);
  void UpdateAllowancesLocked(uint64_t space_limit) REQUIRES(mu_);
  void ScheduleLocked() REQUIRES(mu_);
  // ScheduleLocked's steps. A pass's budgets and clock, kept across its experts.
  struct SchedulePass;
  std::vector<Expert*> ExpertsProvenFirstLocked() REQUIRES(mu_);
  void ForgetStaleDeclinesLocked(uint64_t now) REQUIRES(mu_);
  // Asks one expert for proposals within its allowance and submits them. False when the pass
  // must stop (no room left, or the fetcher is full).
  bool ScheduleExpertLocked(Expert& x, SchedulePass& pass) REQUIRES(mu_);
  // Submits the absent, admitted blocks of `p` in runs; false when the fetcher refused one.
  bool SubmitProposalLocked(const PrefetchRequest& p, Expert& x, SchedulePass& pass) REQUIRES(mu_);
  // Whether the cache would keep `block` of `p`; remembers a refusal.
  bool AdmittedLocked(const PrefetchRequest& p, uint64_t block, const Expert& by, uint64_t now)
      REQUIRES(mu_);
  // The number of blocks from `b` (absent and admitted) that fit every budget; their bytes
  // in `bytes`.
  uint64_t AbsentRunLocked(const PrefetchRequest& p, uint64_t b, uint64_t end, const Expert& x,
                           const SchedulePass& pass, uint64_t& bytes) REQUIRES(mu_);
  // Makes the blocks of a submitted request pending, until their epoch ends or a deadline.
  void TrackSubmittedLocked(const PrefetchRequest& r, const Expert& x, uint64_t now) REQUIRES(mu_);
  void ListInEpochLocked(const BlockKey& key) REQUIRES(mu_);
  // OnOpen/OnRead: a schedule pass unless nothing it looks at changed since the last one,
  // which went through every expert and found nothing to fetch (a warm working set: every
  // prediction is cached). Skipped passes would only re-check what is present; a miss, a
  // verdict or a new epoch always schedules, and Tick always does (the driver ticks every
  // few tens of ms), so a skip delays nothing by more than a tick.
  void MaybeScheduleLocked(bool hit, uint64_t verdicts_before) REQUIRES(mu_);
  Expert* ExpertById(ExpertId id) REQUIRES(mu_);
  void CoverageLocked(ExpertId served_by) REQUIRES(mu_);

  const Config config_;
  const Clock& clock_;
  PrefetchSink& sink_;

  mutable Mutex mu_;  // everything below except the verdict queue and miss counters
  AccessTracker tracker_ GUARDED_BY(mu_);
  Presence presence_{*this};  // a view: its answers take mu_
  std::vector<Expert> experts_ GUARDED_BY(mu_);
  HintPredictor* hints_ GUARDED_BY(mu_) = nullptr;
  std::unordered_map<BlockKey, Pending, BlockKeyHash> pending_ GUARDED_BY(mu_);
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_ GUARDED_BY(mu_);
  // Set predictions by the epoch they were made in (expired when it has ended).
  std::map<uint64_t, std::vector<BlockKey>> epoch_pending_ GUARDED_BY(mu_);
  uint64_t seen_epoch_ GUARDED_BY(mu_) = 0;        // tracker epoch when last looked at
  uint64_t epoch_started_at_ GUARDED_BY(mu_) = 0;  // block clock when seen_epoch_ started
  uint64_t outstanding_blocks_ GUARDED_BY(mu_) = 0;
  uint64_t outstanding_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t used_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t wasted_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t demand_miss_blocks_ GUARDED_BY(mu_) = 0;
  uint64_t sink_refusals_ GUARDED_BY(mu_) = 0;
  uint64_t verdicts_applied_ GUARDED_BY(mu_) = 0;  // every ApplyVerdictLocked (MaybeScheduleLocked)
  bool last_pass_idle_ GUARDED_BY(mu_) =
      false;                                 // the last ScheduleLocked ended with nothing to fetch
  uint64_t idle_epoch_ GUARDED_BY(mu_) = 0;  // the tracker epoch of that pass
  uint64_t skipped_passes_ GUARDED_BY(mu_) = 0;
  // Blocks the cache would not admit (not fetched); present to the experts until
  // declined_until_ (block clock) or the epoch changes.
  std::unordered_set<BlockKey, BlockKeyHash> declined_ GUARDED_BY(mu_);
  uint64_t declined_until_ GUARDED_BY(mu_) = 0;
  uint64_t declined_epoch_ GUARDED_BY(mu_) = 0;
  uint64_t declined_total_ GUARDED_BY(mu_) = 0;
  SteadyTime last_event_ GUARDED_BY(mu_){};
  std::vector<PrefetchRequest> proposals_ GUARDED_BY(mu_);  // scratch

  Mutex verdict_mu_;  // leaf lock: CacheListener runs under the cache's lock
  std::vector<std::pair<BlockKey, bool>> verdicts_ GUARDED_BY(verdict_mu_);  // (key, used)

  std::atomic<uint64_t> miss_reads_{0};
  std::atomic<uint64_t> miss_nanos_{0};
};

}  // namespace spoke::agent
