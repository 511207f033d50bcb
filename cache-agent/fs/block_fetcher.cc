#include "cache-agent/fs/block_fetcher.h"

#include <algorithm>
#include <chrono>

#include "cache-agent/fs/block_fetcher_fetch.h"
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
    : remote_(remote),
      cache_(cache),
      volume_(volume_key),
      config_(config),
      pacer_(config.pacing, std::chrono::steady_clock::now()) {
  hits_ =
      &registry.GetCounter("spoke_cache_hits_total",
                           "Block reads served from the cache or its staged prefetches", labels);
  misses_ = &registry.GetCounter("spoke_cache_misses_total",
                                 "Block reads that had to wait for the hub", labels);
  hub_bytes_ =
      &registry.GetCounter("spoke_hub_read_bytes_total", "Bytes read from the hub", labels);
  cache_bytes_ = &registry.GetCounter("spoke_cache_read_bytes_total",
                                      "Bytes served from the block cache", labels);
  changed_files_ = &registry.GetCounter(
      "spoke_hub_file_changed_total",
      "Hub reads refused because the file changed (or was replaced) since it was opened", labels);
  put_failures_ = &registry.GetCounter("spoke_cache_put_failures_total",
                                       "Fetched blocks the cache did not store", labels);
  window_gauge_ = &registry.GetGauge(
      "spoke_fetch_background_window_bytes",
      "Bytes the fetcher lets on the hub at once, readers' first, warm-up and prefetch in what "
      "they leave (paced to the WAN link)",
      labels);
  window_gauge_->Set(static_cast<int64_t>(pacer_.window()));
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
  for (int i = 0; i < config_.store_threads; ++i) storers_.emplace_back([this] { StoreLoop(); });
}

BlockFetcher::~BlockFetcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& q_ref : queues_) {
      auto* q = &q_ref;
      for (auto& f : *q) {
        if (f->dispatched || f->done) continue;
        f->done = true;
        f->settled = true;
        f->result = std::unexpected(Error(Code::kCancelled, "volume is shutting down"));
        if (f->counted_prefetch) prefetch_bytes_ -= f->length;
        ReleaseMemoryLocked(*f);
        inflight_.erase(f->key);
      }
      q->clear();
    }
    done_cv_.notify_all();
    // Hub callbacks reference this fetcher; the remote bounds every call.
    done_cv_.wait(lock, [&]() REQUIRES(mu_) { return callbacks_pending_ == 0; });
  }
  {
    MutexLock lock(store_mu_);
    store_stop_ = true;
  }
  store_cv_.notify_all();
  for (auto& t : storers_) t.join();
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
  return inflight_.contains(key);
}

uint64_t BlockFetcher::CacheFreeBytes() const {
  return cache_ == nullptr ? 0 : cache_->FreeBytes();
}

double BlockFetcher::demand_miss_latency_ms_avg() const {
  uint64_t n = demand_miss_count_.load();
  return n == 0 ? 0 : demand_miss_micros_.load() / 1000.0 / static_cast<double>(n);
}

BlockFetcher::FetchPtr BlockFetcher::Join(const FileRef& file, uint64_t index, Class cls,
                                          ExpertId expert, double predicted_use,
                                          SteadyTime deadline, bool* created, bool room_taken) {
  BlockKey key = Key(file, index);
  *created = false;
  auto it = inflight_.find(key);
  if (it != inflight_.end()) {
    FetchPtr f = it->second;
    if (cls == kDemandClass) f->deadline = std::max(f->deadline, deadline);
    if (cls == kWarmClass) f->warm_waiter = true;
    if (cls < f->cls) {
      f->cls = cls;  // promoted: goes ahead of the less urgent classes
      f->stored_as_demand = true;
      if (f->counted_prefetch) {
        prefetch_bytes_ -= f->length;
        f->counted_prefetch = false;
      }
      if (f->memory_held > 0 && f->memory_use == MemoryBudget::Use::kPrefetch) {
        config_.memory->Move(MemoryBudget::Use::kPrefetch, MemoryBudget::Use::kDemand,
                             f->memory_held);
        f->memory_use = MemoryBudget::Use::kDemand;
      }
      if (!f->dispatched) queues_[cls].push_back(f);
    }
    return f;
  }
  auto f = std::make_shared<Fetch>();
  f->key = key;
  f->written_here = file.written_here;
  f->path = file.path;
  f->offset = index * config_.block_size;
  f->length = BlockLength(file, index);
  f->cls = cls;
  f->stored_as_demand = cls != kPrefetchClass;
  f->deadline = deadline;
  f->warm_waiter = cls == kWarmClass;
  f->expert = expert;
  f->predicted_use = predicted_use;
  inflight_[key] = f;
  if (cls == kPrefetchClass) {
    f->counted_prefetch = true;
    prefetch_bytes_ += f->length;
    prefetch_blocks_++;
  }
  if (config_.memory != nullptr) {
    // Prefetch and warm-up took their room; a reader's block is charged (never refused).
    if (!room_taken) config_.memory->Charge(MemoryBudget::Use::kDemand, f->length);
    f->memory_held = f->length;
    f->memory_use =
        cls == kPrefetchClass ? MemoryBudget::Use::kPrefetch : MemoryBudget::Use::kDemand;
  }
  queues_[cls].push_back(f);
  *created = true;
  return f;
}

void BlockFetcher::Dispatch() {
  std::vector<FetchPtr> start;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    const int background_slots =
        std::max(1, config_.max_hub_inflight -
                        std::min(config_.demand_reserved, config_.max_hub_inflight - 1));
    const SteadyTime now = std::chrono::steady_clock::now();
    while (hub_inflight_ < config_.max_hub_inflight) {
      FetchPtr f;
      for (int cls = kDemandClass; cls < kClasses && !f; ++cls) {
        if (cls != kDemandClass && hub_inflight_ >= background_slots) break;
        auto& q = queues_[cls];
        if (WindowFullLocked(cls)) {
          bool waiting = false;
          for (int c = cls; c < kClasses; ++c) waiting = waiting || !queues_[c].empty();
          if (waiting) pacer_.OnHeldBack();
          if (cls == kDemandClass) continue;  // background may still send its one block
          break;
        }
        while (!q.empty() && !f) {
          f = q.front();
          q.pop_front();
          // Stale entries: dispatched, done, or promoted (queued again in a higher class).
          if (f->dispatched || f->done || f->cls != cls) f = nullptr;
          if (f && cls == kDemandClass && DropExpiredLocked(f, now)) f = nullptr;
        }
      }
      if (!f) break;
      f->dispatched = true;
      f->dispatched_at = now;
      f->paced = f->cls != kDemandClass;
      (f->paced ? background_on_hub_ : demand_on_hub_) += f->length;
      hub_inflight_++;
      callbacks_pending_++;
      start.push_back(std::move(f));
    }
  }
  for (auto& f : start) {
    // The source first (a peer's copy, checked by the owner against the same file id and
    // version); on any failure of it or a block of the wrong length, the hub.
    BlockSource* src = config_.source;
    if (src != nullptr && src->FetchAsync({f->key, f->path, f->offset, f->length},
                                          [this, f](Result<std::vector<char>> r) {
                                            if (r && r->size() == f->length) {
                                              return OnFetched(f, std::move(r), false);
                                            }
                                            ReadFromHub(f);
                                          })) {
      continue;
    }
    ReadFromHub(f);
  }
}

void BlockFetcher::ReadFromHub(const FetchPtr& f) {
  // Bytes only from the file and version the block belongs to (the name may have been
  // replaced on the hub since), and only whole blocks: never cache what would mix versions.
  remote_.ReadCheckedAsync(
      f->path, f->key.file_id, f->offset, f->length,
      [this, f](Result<RemoteFs::CheckedRead> r) { OnFetched(f, CheckFetched(*f, std::move(r))); });
}

Result<std::vector<char>> BlockFetcher::CheckFetched(const Fetch& f,
                                                     Result<RemoteFs::CheckedRead> r) {
  if (!r) {
    if (r.error().ToErrno() == ESTALE) changed_files_->Inc();
    return std::unexpected(r.error());
  }
  if (f.written_here) return std::move(r->data);  // the writer's own bytes: no version to check
  if (r->attr.ContentVersion() != f.key.version) {
    changed_files_->Inc();
    return std::unexpected(Error::FromErrno(
        ESTALE, "hub file " + f.path + " changed since it was opened (size " +
                    std::to_string(r->attr.size) + "): block " + std::to_string(f.key.index) +
                    " not served, the file must be opened again"));
  }
  if (r->data.size() != f.length) {
    return std::unexpected(
        Error::FromErrno(EIO, "hub READ of " + f.path + " at " + std::to_string(f.offset) +
                                  " returned " + std::to_string(r->data.size()) + " of " +
                                  std::to_string(f.length) + " bytes of an unchanged file"));
  }
  return std::move(r->data);
}

bool BlockFetcher::WindowFullLocked(int cls) const {
  if (!pacer_.enabled()) return false;
  // One block of each kind may always go: readers never wait for background, and background
  // never stops.
  const uint64_t mine = cls == kDemandClass ? demand_on_hub_ : background_on_hub_;
  return mine > 0 && background_on_hub_ + demand_on_hub_ >= pacer_.window();
}

bool BlockFetcher::DropExpiredLocked(const FetchPtr& f, SteadyTime now) {
  // Every reader of it has given up (the latest deadline passed) and no warm-up waits.
  if (f->cls == kDemandClass && !f->warm_waiter && f->deadline < now) {
    f->done = true;
    f->settled = true;
    f->result = std::unexpected(
        Error(Code::kTimeout, "hub read of " + f->path + " still queued at its read deadline"));
    inflight_.erase(f->key);
    ReleaseMemoryLocked(*f);
    expired_drops_++;
    return true;
  }
  return false;
}

void BlockFetcher::ReleaseMemoryLocked(Fetch& f) {
  if (f.memory_held == 0) return;
  config_.memory->Release(f.memory_use, f.memory_held);
  f.memory_held = 0;
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
    hub_inflight_--;
    (f->paced ? background_on_hub_ : demand_on_hub_) -= f->length;
    if (r && from_hub) {
      pacer_.OnCompleted(r->size(), now - f->dispatched_at, now);
      window_gauge_->Set(static_cast<int64_t>(pacer_.window()));
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
      // Staged under mu_, before the fetch leaves inflight_, so that no reader sees the block
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
    if (!store) ReleaseMemoryLocked(*f);
    // A prefetched block's bytes stay counted until it is stored (StoreLoop): its buffer
    // is held until then.
    if (f->counted_prefetch && !store) {
      prefetch_bytes_ -= f->length;
      f->counted_prefetch = false;
    }
    prefetched = f->counted_prefetch;
    // Until it is stored, later askers join this finished fetch instead of re-reading.
    if (!store) {
      f->settled = true;
      auto it = inflight_.find(f->key);
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
    }
  }
  done_cv_.notify_all();
  if (over_budget) {
    store_skips_++;
    put_failures_->Inc();
  }
  if (store) {
    bool queued = false;
    {
      MutexLock lock(store_mu_);
      const uint64_t size = (*f->result)->size();
      // Prefetches are bounded by prefetch_bytes_max already; demand blocks by this bound.
      if (prefetched || store_q_bytes_ + size <= config_.store_queue_bytes_max) {
        store_q_.emplace_back(f, Result<std::vector<char>>{});
        store_q_bytes_ += size;
        queued = true;
      }
    }
    if (queued) {
      store_cv_.notify_one();
    } else {
      store_skips_++;
      put_failures_->Inc();
      {
        MutexLock lock(mu_);
        f->settled = true;
        ReleaseMemoryLocked(*f);
        auto it = inflight_.find(f->key);
        if (it != inflight_.end() && it->second == f) inflight_.erase(it);
      }
      done_cv_.notify_all();
    }
  }
  Dispatch();
  MutexLock lock(mu_);
  if (--callbacks_pending_ == 0 && stopping_) done_cv_.notify_all();
}

void BlockFetcher::StoreLoop() {
  while (true) {
    FetchPtr f;
    {
      MutexLock lock(store_mu_);
      store_cv_.wait(lock, [&]() REQUIRES(store_mu_) { return store_stop_ || !store_q_.empty(); });
      if (store_q_.empty()) return;
      f = std::move(store_q_.front().first);
      store_q_.pop_front();
      store_q_bytes_ -= (*f->result)->size();
    }
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
      f->settled = true;
      if (f->counted_prefetch) {
        prefetch_bytes_ -= f->length;
        f->counted_prefetch = false;
      }
      ReleaseMemoryLocked(*f);
      auto it = inflight_.find(f->key);
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
      stored_gen_++;
    }
    done_cv_.notify_all();
  }
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
    if (cache_ != nullptr) {
      // Sized to the block's own length (a small file's block is ~100 KB, not 1 MiB), aligned
      // and padded so that the cache's O_DIRECT read lands in it: no bounce buffer and copy,
      // no zero-fill first (the read fills it; Get fails unless the block verified). The FUSE
      // reply gathers from it as it is.
      if (BlockBytes::ReadBuffer buf = BlockBytes::AllocateForRead(len)) {
        auto got = cache_->Get(Key(file, index), buf.get(), BlockBytes::ReadCapacity(len));
        if (got) {
          cache_bytes_->Inc(*got);
          out[i] = std::make_shared<const BlockBytes>(std::move(buf), *got);
          nhits++;
          continue;
        }
      }
      // Staged blocks have the key's file version (checked when fetched), like the cache's.
      if (staging_ != nullptr) {
        if (auto staged = staging_->Take(Key(file, index))) {
          AdmitTaken(Key(file, index), *staged);
          out[i] = std::move(*staged);
          nhits++;
          continue;
        }
      }
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
    if (cache_ != nullptr && stored_gen_ != stored_gen && !inflight_.contains(Key(file, index))) {
      stored_gen = stored_gen_;
      lock.unlock();
      --i;  // this block again (unsigned wrap-around is well defined: ++i brings it back)
      continue;
    }
    waits.emplace_back(i, Join(file, index, kDemandClass, kDemand, 0, until, &created, false));
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
    if (cache_->Contains(key)) continue;
    if (staging_ != nullptr && staging_->Contains(key)) continue;
    MutexLock lock(mu_);
    if (stopping_) return false;
    if (inflight_.contains(key)) continue;
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
    FetchPtr f = Join(file, index, kPrefetchClass, req.expert,
                      req.predicted_use + static_cast<double>(index - req.first_block),
                      SteadyTime{}, &created, /*room_taken=*/config_.memory != nullptr);
    if (created) f->within_epoch = req.within_epoch;
    queued = true;
  }
  if (queued) Dispatch();
  return !refused;
}

}  // namespace spoke::agent
