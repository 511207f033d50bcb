#include "cache-agent/fs/block_fetcher.h"

#include <chrono>

#include "common/log.h"

namespace spoke::agent {

struct BlockFetcher::Fetch {
  BlockKey key;
  std::string path;
  uint64_t offset = 0;
  uint32_t length = 0;
  bool demand = false;
  ExpertId expert = kDemand;
  double predicted_use = kUnknownUse;
  bool dispatched = false;
  bool done = false;
  bool settled = false;           // done and (when it was to be cached) stored
  bool counted_prefetch = false;  // its bytes are in prefetch_bytes_
  Result<BlockData> result = std::unexpected(Error(Code::kInternal, "not fetched"));
};

Status BlockFetcher::Config::Validate() const {
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0)
    return Fail(Code::kInvalidArgument, "block_size: must be a power of two >= 4096");
  if (max_hub_inflight < 1) return Fail(Code::kInvalidArgument, "max_hub_inflight: must be >= 1");
  if (store_threads < 1) return Fail(Code::kInvalidArgument, "store_threads: must be >= 1");
  return Ok();
}

BlockFetcher::BlockFetcher(RemoteFs& remote, BlockCache* cache, uint64_t volume_key,
                           const Config& config, metrics::Registry& registry,
                           const metrics::Labels& labels)
    : remote_(remote), cache_(cache), volume_(volume_key), config_(config) {
  hits_ =
      &registry.GetCounter("spoke_cache_hits_total", "Block reads served from the cache", labels);
  misses_ = &registry.GetCounter("spoke_cache_misses_total",
                                 "Block reads that had to wait for the hub", labels);
  hub_bytes_ =
      &registry.GetCounter("spoke_hub_read_bytes_total", "Bytes read from the hub", labels);
  cache_bytes_ = &registry.GetCounter("spoke_cache_read_bytes_total",
                                      "Bytes served from the block cache", labels);
  put_failures_ = &registry.GetCounter("spoke_cache_put_failures_total",
                                       "Fetched blocks the cache did not store", labels);
  miss_latency_ = &registry.GetHistogram("spoke_demand_miss_seconds",
                                         "Latency of reads that waited for the hub", labels);
  base_hits_ = hits_->Value();
  base_misses_ = misses_->Value();
  base_hub_bytes_ = hub_bytes_->Value();
  base_cache_bytes_ = cache_bytes_->Value();
  for (int i = 0; i < config_.store_threads; ++i) storers_.emplace_back([this] { StoreLoop(); });
}

BlockFetcher::~BlockFetcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto* q : {&demand_q_, &prefetch_q_}) {
      for (auto& f : *q) {
        if (f->dispatched || f->done) continue;
        f->done = true;
        f->settled = true;
        f->result = std::unexpected(Error(Code::kCancelled, "volume is shutting down"));
        if (f->counted_prefetch) prefetch_bytes_ -= f->length;
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

uint64_t BlockFetcher::Evict(uint64_t file_id) {
  return cache_ == nullptr ? 0 : cache_->Evict(volume_, file_id);
}

uint64_t BlockFetcher::CachedBytes() const {
  return cache_ == nullptr ? 0 : cache_->VolumeBytes(volume_);
}

bool BlockFetcher::Has(const BlockKey& key) const {
  if (cache_ != nullptr && cache_->Contains(key)) return true;
  MutexLock lock(mu_);
  return inflight_.contains(key);
}

double BlockFetcher::demand_miss_latency_ms_avg() const {
  uint64_t n = demand_miss_count_.load();
  return n == 0 ? 0 : demand_miss_micros_.load() / 1000.0 / static_cast<double>(n);
}

BlockFetcher::FetchPtr BlockFetcher::Join(const FileRef& file, uint64_t index, bool demand,
                                          ExpertId expert, double predicted_use, bool* created) {
  BlockKey key = Key(file, index);
  *created = false;
  auto it = inflight_.find(key);
  if (it != inflight_.end()) {
    FetchPtr f = it->second;
    if (demand && !f->demand) {
      f->demand = true;  // promoted: goes ahead of the remaining prefetches
      if (f->counted_prefetch) {
        prefetch_bytes_ -= f->length;
        f->counted_prefetch = false;
      }
      if (!f->dispatched) demand_q_.push_back(f);
    }
    return f;
  }
  auto f = std::make_shared<Fetch>();
  f->key = key;
  f->path = file.path;
  f->offset = index * config_.block_size;
  f->length = BlockLength(file, index);
  f->demand = demand;
  f->expert = expert;
  f->predicted_use = predicted_use;
  inflight_[key] = f;
  if (demand) {
    demand_q_.push_back(f);
  } else {
    f->counted_prefetch = true;
    prefetch_bytes_ += f->length;
    prefetch_blocks_++;
    prefetch_q_.push_back(f);
  }
  *created = true;
  return f;
}

void BlockFetcher::Dispatch() {
  std::vector<FetchPtr> start;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    while (hub_inflight_ < config_.max_hub_inflight) {
      FetchPtr f;
      while (!demand_q_.empty() && !f) {
        f = demand_q_.front();
        demand_q_.pop_front();
        if (f->dispatched || f->done) f = nullptr;
      }
      while (!f && !prefetch_q_.empty()) {
        f = prefetch_q_.front();
        prefetch_q_.pop_front();
        if (f->dispatched || f->done) f = nullptr;
      }
      if (!f) break;
      f->dispatched = true;
      hub_inflight_++;
      callbacks_pending_++;
      start.push_back(std::move(f));
    }
  }
  for (auto& f : start) {
    remote_.ReadAsync(f->path, f->offset, f->length,
                      [this, f](Result<std::vector<char>> r) { OnFetched(f, std::move(r)); });
  }
}

void BlockFetcher::OnFetched(const FetchPtr& f, Result<std::vector<char>> r) {
  bool store = false;
  {
    MutexLock lock(mu_);
    hub_inflight_--;
    if (r) {
      hub_bytes_->Inc(r->size());
      f->result = std::make_shared<const std::vector<char>>(std::move(*r));
      store = cache_ != nullptr && !(*f->result)->empty();
    } else {
      f->result = std::unexpected(r.error());
    }
    f->done = true;
    if (f->counted_prefetch) {
      prefetch_bytes_ -= f->length;
      f->counted_prefetch = false;
    }
    // Until it is stored, later askers join this finished fetch instead of re-reading.
    if (!store) {
      f->settled = true;
      auto it = inflight_.find(f->key);
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
    }
  }
  done_cv_.notify_all();
  if (store) {
    {
      MutexLock lock(store_mu_);
      store_q_.emplace_back(f, Result<std::vector<char>>{});
    }
    store_cv_.notify_one();
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
    }
    const auto& data = **f->result;
    AdmissionHint hint{f->demand ? kDemand : f->expert, f->predicted_use};
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
      auto it = inflight_.find(f->key);
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
    }
    done_cv_.notify_all();
  }
}

Result<BlockData> BlockFetcher::Wait(const FetchPtr& f) {
  MutexLock lock(mu_);
  done_cv_.wait(lock, [&]() REQUIRES(mu_) { return f->done; });
  return f->result;
}

std::vector<Result<BlockData>> BlockFetcher::GetBlocks(
    const FileRef& file, uint64_t first, uint64_t count, uint64_t* hits,
    const std::function<void(uint64_t hits)>& before_wait) {
  auto start = std::chrono::steady_clock::now();
  std::vector<Result<BlockData>> out(count, std::unexpected(Error(Code::kInternal, "not fetched")));
  std::vector<std::pair<size_t, FetchPtr>> waits;
  uint64_t nhits = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t index = first + i;
    uint32_t len = BlockLength(file, index);
    if (len == 0) {
      out[i] = std::make_shared<const std::vector<char>>();
      continue;
    }
    if (cache_ != nullptr) {
      auto buf = std::make_shared<std::vector<char>>(config_.block_size);
      auto got = cache_->Get(Key(file, index), buf->data(), buf->size());
      if (got) {
        buf->resize(*got);
        cache_bytes_->Inc(*got);
        out[i] = BlockData(std::move(buf));
        nhits++;
        continue;
      }
    }
    bool created;
    MutexLock lock(mu_);
    if (stopping_) {
      out[i] = std::unexpected(Error(Code::kCancelled, "volume is shutting down"));
      continue;
    }
    waits.emplace_back(i, Join(file, index, true, kDemand, 0, &created));
  }
  hits_->Inc(nhits);
  misses_->Inc(waits.size());
  if (hits) *hits = nhits;
  if (!waits.empty()) Dispatch();
  if (before_wait) before_wait(nhits);
  if (waits.empty()) return out;
  for (auto& [i, f] : waits) out[i] = Wait(f);
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
    MutexLock lock(mu_);
    if (stopping_) return false;
    if (inflight_.contains(key)) continue;
    if (prefetch_bytes_.load() + BlockLength(file, index) > config_.prefetch_bytes_max) {
      refused = true;
      break;
    }
    bool created;
    Join(file, index, false, req.expert,
         req.predicted_use + static_cast<double>(index - req.first_block), &created);
    queued = true;
  }
  if (queued) Dispatch();
  return !refused;
}

Result<uint64_t> BlockFetcher::Warm(const FileRef& file, uint64_t first, uint64_t count) {
  std::vector<std::pair<FetchPtr, bool>> waits;  // fetch, started by us
  for (uint64_t index = first; index < first + count; ++index) {
    if (BlockLength(file, index) == 0) break;
    if (Cached(file, index)) continue;
    bool created;
    MutexLock lock(mu_);
    if (stopping_) return Fail(Code::kCancelled, "volume is shutting down");
    auto f = Join(file, index, true, kDemand, 0, &created);
    waits.emplace_back(std::move(f), created);
  }
  if (!waits.empty()) Dispatch();
  uint64_t bytes = 0;
  std::optional<Error> first_error;
  for (auto& [f, ours] : waits) {
    auto r = Wait(f);
    {
      // Warm-up promises the blocks are in the cache when it returns.
      MutexLock lock(mu_);
      done_cv_.wait(lock, [&]() REQUIRES(mu_) { return f->settled || stopping_; });
    }
    if (r) {
      if (ours) bytes += (*r)->size();
    } else if (!first_error) {
      first_error = r.error();
    }
  }
  if (first_error) return std::unexpected(*first_error);
  return bytes;
}

}  // namespace spoke::agent
