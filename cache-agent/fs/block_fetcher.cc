#include "cache-agent/fs/block_fetcher.h"

#include <algorithm>
#include <chrono>

#include "common/interrupt.h"
#include "common/log.h"

namespace spoke::agent {

Status BlockFetcher::Config::Validate() const {
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0)
    return Fail(Code::kInvalidArgument, "block_size: must be a power of two >= 4096");
  if (max_hub_inflight < 1) return Fail(Code::kInvalidArgument, "max_hub_inflight: must be >= 1");
  if (store_threads < 1) return Fail(Code::kInvalidArgument, "store_threads: must be >= 1");
  if (store_queue_bytes_max < block_size) {
    return Fail(Code::kInvalidArgument, "store_queue_bytes_max: must be >= block_size");
  }
  if (demand_reserved < 0) return Fail(Code::kInvalidArgument, "demand_reserved: must be >= 0");
  if (read_deadline <= std::chrono::milliseconds(0)) {
    return Fail(Code::kInvalidArgument, "read_deadline: must be > 0");
  }
  if (pacing.target_queue.count() < 0 || pacing.min_window == 0 ||
      pacing.min_window > pacing.max_window) {
    return Fail(Code::kInvalidArgument,
                "pacing: target_queue must be >= 0 and 0 < min_window <= max_window");
  }
  if (staging_bytes_max > 0) {
    if (staging_bytes_max < block_size) {
      return Fail(Code::kInvalidArgument, "staging_bytes_max: must be 0 (off) or >= block_size");
    }
    if (staging_ttl <= std::chrono::milliseconds(0)) {
      return Fail(Code::kInvalidArgument, "staging_ttl: must be > 0");
    }
  }
  return Ok();
}

BlockFetcher::BlockFetcher(RemoteFs& remote, BlockCache* cache, uint64_t volume_key,
                           const Config& config, metrics::Registry& registry,
                           const metrics::Labels& labels)
    : cache_(cache),
      volume_(volume_key),
      config_(config),
      reader_(
          remote, config.source, registry, labels,
          [this](const FetchPtr& f, Result<std::vector<char>> r, bool from_hub) {
            OnFetched(f, std::move(r), from_hub);
          },
          [this](const FetchPtr& f, bool busy) { return RequeueAfterSource(f, busy); }),
      dispatcher_({.max_inflight = config.max_hub_inflight,
                   .demand_reserved = config.demand_reserved,
                   .pacing = config.pacing},
                  std::chrono::steady_clock::now()) {
  hits_ =
      &registry.GetCounter("spoke_cache_hits_total",
                           "Block reads served from the cache or its staged prefetches", labels);
  misses_ = &registry.GetCounter("spoke_cache_misses_total",
                                 "Block reads that had to wait for the hub", labels);
  hub_bytes_ =
      &registry.GetCounter("spoke_hub_read_bytes_total", "Bytes read from the hub", labels);
  cache_bytes_ = &registry.GetCounter("spoke_cache_read_bytes_total",
                                      "Bytes served from the block cache", labels);
  put_failures_ = &registry.GetCounter("spoke_cache_put_failures_total",
                                       "Fetched blocks the cache did not store", labels);
  window_gauge_ = &registry.GetGauge(
      "spoke_fetch_background_window_bytes",
      "Bytes the fetcher lets on the hub at once, readers' first, warm-up and prefetch in what "
      "they leave (paced to the WAN link)",
      labels);
  window_gauge_->Set(static_cast<int64_t>(dispatcher_.window()));
  source_window_gauge_ = &registry.GetGauge(
      "spoke_fetch_peer_window_bytes",
      "Bytes the fetcher lets on the cluster's peers at once (halved when an owner is busy)",
      labels);
  source_window_gauge_->Set(static_cast<int64_t>(dispatcher_.window(kSourceRoute)));
  miss_latency_ = &registry.GetHistogram("spoke_demand_miss_seconds",
                                         "Latency of reads that waited for the hub", labels);
  base_hits_ = hits_->Value();
  base_misses_ = misses_->Value();
  base_hub_bytes_ = hub_bytes_->Value();
  base_cache_bytes_ = cache_bytes_->Value();
  if (cache_ != nullptr && config_.staging_bytes_max > 0) {
    StagingBuffer::Config sc;
    sc.max_bytes = config_.staging_bytes_max;
    sc.ttl = config_.staging_ttl;
    sc.held_ttl = std::max(sc.held_ttl, sc.ttl);
    sc.memory = config_.memory;
    staging_ = std::make_unique<StagingBuffer>(
        sc, config_.clock != nullptr ? *config_.clock : SystemClock::Get(), registry, labels);
  }
  store_queue_ = std::make_unique<StoreQueue>(config_.store_threads, config_.store_queue_bytes_max,
                                              [this](const FetchPtr& f) { Store(f); });
}

BlockFetcher::~BlockFetcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& f : table_.CancelQueued(Error(Code::kCancelled, "volume is shutting down"))) {
      UncountPrefetchLocked(*f);
      ReleaseMemoryLocked(*f);
    }
    done_cv_.notify_all();
    // Source and hub callbacks reference this fetcher; the remote bounds every call.
    done_cv_.wait(lock, [&]() REQUIRES(mu_) { return callbacks_pending_ == 0; });
  }
  store_queue_->Stop();
}

BlockKey BlockFetcher::Key(const FileRef& f, uint64_t index) const {
  return BlockKey{volume_, f.file_id, f.version, index};
}

uint32_t BlockFetcher::BlockLength(const FileRef& f, uint64_t index) const {
  uint64_t start = index * config_.block_size;
  if (start >= f.size) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(config_.block_size, f.size - start));
}

bool BlockFetcher::Cached(const FileRef& file, uint64_t index) const {
  return cache_ != nullptr && cache_->Contains(Key(file, index));
}

uint64_t BlockFetcher::CachedBytes() const {
  return cache_ == nullptr ? 0 : cache_->VolumeBytes(volume_);
}

bool BlockFetcher::Has(const BlockKey& key) const {
  if (cache_ != nullptr && cache_->Contains(key)) return true;
  if (staging_ != nullptr && staging_->Contains(key)) return true;
  MutexLock lock(mu_);
  return table_.Contains(key);
}

uint64_t BlockFetcher::CacheFreeBytes() const {
  return cache_ == nullptr ? 0 : cache_->FreeBytes();
}

double BlockFetcher::demand_miss_latency_ms_avg() const {
  uint64_t n = demand_miss_count_.load();
  return n == 0 ? 0 : demand_miss_micros_.load() / 1000.0 / static_cast<double>(n);
}

BlockFetcher::FetchPtr BlockFetcher::Join(const FileRef& file, uint64_t index,
                                          const FetchTable::Ask& ask, bool* created,
                                          bool room_taken) {
  const BlockKey key = Key(file, index);
  FetchTable::Block block{.path = file.path,
                          .offset = index * config_.block_size,
                          .length = BlockLength(file, index),
                          .written_here = file.written_here,
                          .reader = file.reader ? &*file.reader : nullptr};
  // A new fetch's route: the source's when it would take the block (a reader's ask is no
  // background; a later promotion keeps the route).
  if (config_.source != nullptr && !table_.Contains(key) &&
      config_.source->Takes(
          {key, file.path, block.offset, block.length, ask.cls != kDemandClass})) {
    block.route = kSourceRoute;
  }
  FetchTable::Joined joined = table_.Join(key, block, ask);
  BlockFetch& f = *joined.fetch;
  *created = joined.created;
  if (joined.promoted) {
    // Out of prefetch (if it was): its bytes leave the prefetch cap, its room is a reader's.
    UncountPrefetchLocked(f);
    if (f.memory_held > 0 && f.memory_use == MemoryBudget::Use::kPrefetch) {
      config_.memory->Move(MemoryBudget::Use::kPrefetch, MemoryBudget::Use::kDemand, f.memory_held);
      f.memory_use = MemoryBudget::Use::kDemand;
    }
  }
  if (!joined.created) return joined.fetch;
  if (ask.cls == kPrefetchClass) {
    f.counted_prefetch = true;
    prefetch_bytes_ += f.length;
    prefetch_blocks_++;
  }
  if (config_.memory != nullptr) {
    // Prefetch and warm-up took their room; a reader's block is charged (never refused).
    if (!room_taken) config_.memory->Charge(MemoryBudget::Use::kDemand, f.length);
    f.memory_held = f.length;
    f.memory_use =
        ask.cls == kPrefetchClass ? MemoryBudget::Use::kPrefetch : MemoryBudget::Use::kDemand;
  }
  return joined.fetch;
}

void BlockFetcher::Dispatch() {
  std::vector<FetchPtr> start;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    const SteadyTime now = std::chrono::steady_clock::now();
    while (FetchPtr f = NextToSendLocked(now)) {
      dispatcher_.OnSent(*f, now);
      callbacks_pending_++;
      start.push_back(std::move(f));
    }
  }
  for (auto& f : start) reader_.Read(f);
}

BlockFetcher::FetchPtr BlockFetcher::NextToSendLocked(SteadyTime now) {
  if (!dispatcher_.HasSlot()) return nullptr;
  FetchPtr next;
  std::vector<FetchPtr> expired;
  // Each route by its own window, most urgent class first. A background class a route's
  // window holds back holds back the less urgent ones there too; readers held back leave
  // background its one block.
  bool held[kFetchRoutes] = {false, false};
  bool no_slot = false;
  for (int cls = kDemandClass; cls < kFetchClasses && !next && !no_slot; ++cls) {
    for (FetchRoute route : {kSourceRoute, kHubRoute}) {
      if (next || no_slot || held[route]) continue;
      const FetchDispatcher::Gate gate = dispatcher_.GateFor(cls, route);
      if (gate == FetchDispatcher::Gate::kNoSlot) {
        no_slot = true;
      } else if (gate == FetchDispatcher::Gate::kWindowFull) {
        if (route == kHubRoute && table_.QueuedFrom(cls, route)) dispatcher_.OnHeldBack(now);
        held[route] = cls != kDemandClass;
      } else {
        next = table_.PopQueued(cls, now, &expired, route);
      }
    }
  }
  for (auto& f : expired) {
    ReleaseMemoryLocked(*f);
    expired_drops_++;
  }
  return next;
}

void BlockFetcher::ReleaseMemoryLocked(BlockFetch& f) {
  if (f.memory_held == 0) return;
  config_.memory->Release(f.memory_use, f.memory_held);
  f.memory_held = 0;
}

void BlockFetcher::UncountPrefetchLocked(BlockFetch& f) {
  if (!f.counted_prefetch) return;
  prefetch_bytes_ -= f.length;
  f.counted_prefetch = false;
}

void BlockFetcher::SettleLocked(const FetchPtr& f) {
  f->settled = true;
  ReleaseMemoryLocked(*f);
  table_.Erase(*f);
}

void BlockFetcher::OnFetched(const FetchPtr& f, Result<std::vector<char>> r, bool from_hub) {
  // A prefetch arriving at a full cache is staged instead of evicting a cached block. Read
  // before mu_ (the cache's lock is never taken under it); a reader promoting the fetch
  // meanwhile is seen below (its class).
  const bool cache_full =
      staging_ != nullptr && r && cache_->FreeBytes() < static_cast<uint64_t>(r->size());
  bool store = false;
  bool prefetched = false;   // its bytes stay in prefetch_bytes_ until stored
  bool over_budget = false;  // a reader's block the memory budget has no room to queue
  const SteadyTime now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mu_);
    // A good reply teaches the window of the route it came by.
    const std::optional<uint64_t> reply = r ? std::optional<uint64_t>(r->size()) : std::nullopt;
    if (dispatcher_.OnAnswered(*f, reply, from_hub, now)) {
      window_gauge_->Set(static_cast<int64_t>(dispatcher_.window()));
    } else if (reply) {
      source_window_gauge_->Set(static_cast<int64_t>(dispatcher_.window(kSourceRoute)));
    }
    if (r) {
      if (from_hub) hub_bytes_->Inc(r->size());
      f->result = std::make_shared<const BlockBytes>(std::move(*r));
      store = cache_ != nullptr && !(*f->result)->empty() &&
              (from_hub || config_.source->keep_local_copy());
    } else {
      f->result = std::unexpected(r.error());
    }
    f->done = true;
    if (store && cache_full && f->cls == kPrefetchClass && !f->stored_as_demand) {
      // Staged under mu_, before the fetch leaves the table, so that no reader sees the block
      // in neither place (GetBlocks looks again when stored_gen_ moved).
      ReleaseMemoryLocked(*f);  // the buffer takes its own room (Use::kStaged)
      staging_->Put(f->key, *f->result, /*held=*/f->within_epoch);
      store = false;
      stored_gen_++;
    }
    if (store && f->memory_held > 0) {
      // A prefetched block keeps the room it took; a reader's block is queued for the cache
      // only while the whole budget has room (demand never waits for memory).
      if (f->memory_use == MemoryBudget::Use::kPrefetch) {
        config_.memory->Move(f->memory_use, MemoryBudget::Use::kStoreQueue, f->memory_held);
        f->memory_use = MemoryBudget::Use::kStoreQueue;
      } else if (config_.memory->TryMove(f->memory_use, MemoryBudget::Use::kStoreQueue,
                                         f->memory_held, MemoryBudget::Level::kDemand)) {
        f->memory_use = MemoryBudget::Use::kStoreQueue;
      } else {
        store = false;
        over_budget = true;
      }
    }
    // A prefetched block's bytes stay counted until it is stored (Store): its buffer is held
    // until then. Until it is stored, later askers join this finished fetch instead of
    // re-reading.
    if (!store) {
      UncountPrefetchLocked(*f);
      SettleLocked(f);
    }
    prefetched = f->counted_prefetch;
  }
  done_cv_.notify_all();
  if (over_budget) {
    store_skips_++;
    put_failures_->Inc();
  }
  // Prefetches are bounded by prefetch_bytes_max already; demand blocks by the queue's bound.
  if (store && !store_queue_->Push(f, (*f->result)->size(), /*bounded=*/!prefetched)) {
    store_skips_++;
    put_failures_->Inc();
    {
      MutexLock lock(mu_);
      SettleLocked(f);
    }
    done_cv_.notify_all();
  }
  Dispatch();
  MutexLock lock(mu_);
  if (--callbacks_pending_ == 0 && stopping_) done_cv_.notify_all();
}

bool BlockFetcher::StagedInsteadOfStored(const FetchPtr& f) {
  if (staging_ == nullptr) return false;
  const uint64_t size = (*f->result)->size();
  // The cache had room when the block arrived, but the blocks queued before it may have
  // taken it since: evicting a cached block for a prefetch (often one prefetched just before
  // and not read yet) makes a reader fetch that block again.
  if (cache_->FreeBytes() >= size) return false;
  {
    MutexLock lock(mu_);
    if (f->cls != kPrefetchClass || f->stored_as_demand) return false;  // a reader's now
    ReleaseMemoryLocked(*f);  // the buffer takes its own room (Use::kStaged)
    if (!staging_->Put(f->key, *f->result, /*held=*/f->within_epoch)) return false;
    UncountPrefetchLocked(*f);
    SettleLocked(f);
    stored_gen_++;
  }
  done_cv_.notify_all();
  return true;
}

bool BlockFetcher::RequeueAfterSource(const FetchPtr& f, bool busy) {
  {
    MutexLock lock(mu_);
    if (stopping_) return false;
    dispatcher_.OnSourceFailed(*f, busy, std::chrono::steady_clock::now());
    source_window_gauge_->Set(static_cast<int64_t>(dispatcher_.window(kSourceRoute)));
    table_.Requeue(f);
  }
  Dispatch();
  // This send's callback ends here (the next send of `f` counts its own), after Dispatch: the
  // destructor waits for it, so `this` outlives the call.
  MutexLock lock(mu_);
  if (--callbacks_pending_ == 0 && stopping_) done_cv_.notify_all();
  return true;
}

void BlockFetcher::Store(const FetchPtr& f) {
  if (StagedInsteadOfStored(f)) return;
  const auto& data = **f->result;
  AdmissionHint hint{f->stored_as_demand ? kDemand : f->expert, f->predicted_use};
  auto st = cache_->Put(f->key, data.data(), data.size(), hint);
  if (!st) {
    // Served anyway: a full or failed cache costs a re-fetch later, never a read.
    put_failures_->Inc();
    if (log::Enabled(log::Level::kDebug)) {
      log::Debug("block not cached", {{"path", f->path}, {"error", st.error().ToString()}});
    }
  }
  {
    MutexLock lock(mu_);
    UncountPrefetchLocked(*f);
    SettleLocked(f);
    stored_gen_++;
  }
  done_cv_.notify_all();
}

Result<BlockData> BlockFetcher::Wait(const FetchPtr& f, SteadyTime deadline) {
  // A reader that gives up (FUSE INTERRUPT) stops waiting; the fetch goes on and is cached.
  Interrupt::Waker waker(InterruptScope::Current(), [this] {
    MutexLock lock(mu_);
    done_cv_.notify_all();
  });
  MutexLock lock(mu_);
  if (!done_cv_.wait_until(lock, deadline, [&] { return f->done || waker.fired(); })) {
    return std::unexpected(Error(
        Code::kTimeout, "hub read of " + f->path + " did not complete by the read deadline (" +
                            (f->dispatched ? "sent" : "still queued") + ")"));
  }
  if (!f->done) return std::unexpected(Interrupted("the hub's read of " + f->path));
  return f->result;
}

namespace {
// A staged block a reader took, as the eviction policy is asked about it: a prefetch (any
// origin but kDemand; 255 is no expert's) that nobody predicts a use for. Read already, it
// is worth no prefetched block that was not read yet (that one would be fetched again).
constexpr AdmissionHint kTakenFromStaging{.origin = 255, .predicted_use = kUnknownUse};
}  // namespace

std::optional<BlockData> BlockFetcher::LocalBlock(const FileRef& file, uint64_t index,
                                                  uint32_t len) {
  if (cache_ == nullptr) return std::nullopt;
  // Sized to the block's own length (a small file's block is ~100 KB, not 1 MiB), aligned and
  // padded so that the cache's O_DIRECT read lands in it: no bounce buffer and copy, no
  // zero-fill first (the read fills it; Get fails unless the block verified). The FUSE reply
  // gathers from it as it is.
  if (BlockBytes::ReadBuffer buf = BlockBytes::AllocateForRead(len)) {
    auto got = cache_->Get(Key(file, index), buf.get(), BlockBytes::ReadCapacity(len));
    if (got && *got < len && !file.written_here) {
      // Not this block under this file size (a hub file's blocks are immutable under its
      // version): never a short read. The file's blocks go; this one is fetched again.
      log::Warn("cached block of the wrong length dropped",
                {{"path", file.path}, {"cached", *got}, {"expected", len}});
      cache_->Evict(volume_, file.file_id);
      got = std::unexpected(Error(Code::kNotFound, "wrong length"));
    }
    if (got) {
      cache_bytes_->Inc(*got);
      return std::make_shared<const BlockBytes>(std::move(buf), *got);
    }
  }
  // Staged blocks have the key's file version (checked when fetched), like the cache's.
  if (staging_ == nullptr) return std::nullopt;
  auto staged = staging_->Take(Key(file, index));
  if (staged && cache_->WouldAdmit(Key(file, index), kTakenFromStaging)) {
    AdmitTaken(Key(file, index), *staged);
  }
  return staged;
}

std::vector<Result<BlockData>> BlockFetcher::GetBlocks(
    const FileRef& file, uint64_t first, uint64_t count, uint64_t* hits,
    const std::function<void(uint64_t hits)>& before_wait, std::optional<SteadyTime> deadline) {
  auto start = std::chrono::steady_clock::now();
  const SteadyTime until = deadline.value_or(start + config_.read_deadline);
  std::vector<Result<BlockData>> out(count, std::unexpected(Error(Code::kInternal, "not fetched")));
  std::vector<std::pair<size_t, FetchPtr>> waits;
  uint64_t nhits = 0;
  uint64_t stored_gen;
  {
    MutexLock lock(mu_);
    stored_gen = stored_gen_;
  }
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t index = first + i;
    uint32_t len = BlockLength(file, index);
    if (len == 0) {
      out[i] = std::make_shared<const BlockBytes>();
      continue;
    }
    if (auto local = LocalBlock(file, index, len)) {
      out[i] = std::move(*local);
      nhits++;
      continue;
    }
    bool created;
    MutexLock lock(mu_);
    if (stopping_) {
      out[i] = std::unexpected(Error(Code::kCancelled, "volume is shutting down"));
      continue;
    }
    // A fetch of this block that finished between the cache miss above and this lock was
    // stored and has left inflight_: Join would start a second hub read of it. Look in the
    // cache again whenever a stored fetch settled since stored_gen was read.
    if (cache_ != nullptr && stored_gen_ != stored_gen && !table_.Contains(Key(file, index))) {
      stored_gen = stored_gen_;
      lock.unlock();
      --i;  // this block again (unsigned wrap-around is well defined: ++i brings it back)
      continue;
    }
    waits.emplace_back(i, Join(file, index, {.cls = kDemandClass, .deadline = until}, &created,
                               /*room_taken=*/false));
  }
  hits_->Inc(nhits);
  misses_->Inc(waits.size());
  if (hits) *hits = nhits;
  if (!waits.empty()) Dispatch();
  if (before_wait) before_wait(nhits);
  if (waits.empty()) return out;
  for (auto& [i, f] : waits) out[i] = Wait(f, until);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                .count();
  demand_miss_count_++;
  demand_miss_micros_ += static_cast<uint64_t>(us);
  miss_latency_->Observe(static_cast<double>(us) / 1e6);
  return out;
}

bool BlockFetcher::Prefetch(const PrefetchRequest& req) {
  if (cache_ == nullptr) return false;
  FileRef file{req.path, req.file_id, req.version, req.file_size};
  uint64_t blocks = (req.file_size + config_.block_size - 1) / config_.block_size;
  uint64_t end = std::min(blocks, req.first_block + req.block_count);
  bool queued = false, refused = false;
  for (uint64_t index = req.first_block; index < end; ++index) {
    BlockKey key = Key(file, index);
    const uint64_t stored_gen = StoredGen();
    if (cache_->Contains(key)) continue;
    if (staging_ != nullptr && staging_->Contains(key)) continue;
    MutexLock lock(mu_);
    if (stopping_) return false;
    if (table_.Contains(key)) continue;
    // A fetch of this block (a reader's) stored between the look into the cache above and
    // this lock has left the table: look again rather than read the hub twice.
    if (stored_gen_ != stored_gen) {
      lock.unlock();
      --index;  // this block again (unsigned wrap-around is well defined)
      continue;
    }
    if (prefetch_bytes_.load() + BlockLength(file, index) > config_.prefetch_bytes_max) {
      refused = true;
      break;
    }
    // The agent-wide bound: prefetch waits (re-plans later) rather than grow the agent.
    if (config_.memory != nullptr &&
        !config_.memory->TryAcquire(MemoryBudget::Use::kPrefetch, BlockLength(file, index))) {
      refused = true;
      break;
    }
    bool created;
    const FetchTable::Ask ask{
        .cls = kPrefetchClass,
        .expert = req.expert,
        .predicted_use = req.predicted_use + static_cast<double>(index - req.first_block)};
    FetchPtr f = Join(file, index, ask, &created, /*room_taken=*/config_.memory != nullptr);
    if (created) f->within_epoch = req.within_epoch;
    queued = true;
  }
  if (queued) Dispatch();
  return !refused;
}

}  // namespace spoke::agent
