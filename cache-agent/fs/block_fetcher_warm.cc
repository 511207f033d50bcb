// BlockFetcher's warm-up (Warm, StartWarm, FinishWarm in block_fetcher.h): a window of tickets
// whose blocks are joined in the warm-up class, bounded by the memory budget, not by threads.
#include <chrono>

#include "cache-agent/fs/block_fetcher.h"

namespace spoke::agent {

void BlockFetcher::TakeWarmRoom(uint32_t length) {
  using Use = MemoryBudget::Use;
  if (config_.memory->TryAcquire(Use::kDemand, length)) return;
  Dispatch();  // this warm-up's queued blocks go, and give their room back once stored
  if (config_.memory->AcquireWait(Use::kDemand, length,
                                  std::chrono::steady_clock::now() + config_.read_deadline)) {
    return;
  }
  config_.memory->Charge(Use::kDemand, length);  // bounded wait over: go on, accounted
}

BlockFetcher::CachedCheck BlockFetcher::CheckCached(const FileRef& file, uint64_t index) {
  const BlockKey key = Key(file, index);
  if (cache_ == nullptr || !cache_->Contains(key)) return CachedCheck::kAbsent;
  const uint32_t len = BlockLength(file, index);
  BlockBytes::ReadBuffer buf = BlockBytes::AllocateForRead(len);
  if (!buf) return CachedCheck::kGood;  // no memory to look: not a finding about the block
  auto got = cache_->Get(key, buf.get(), BlockBytes::ReadCapacity(len));
  if (got && *got == len) return CachedCheck::kGood;
  if (got && !file.written_here) {
    // As LocalBlock: a hub file's block of the wrong length is not this block; its file goes.
    cache_->Evict(volume_, file.file_id);
  }
  return got && file.written_here ? CachedCheck::kGood : CachedCheck::kDropped;
}

Result<uint64_t> BlockFetcher::Warm(const FileRef& file, uint64_t first, uint64_t count) {
  return FinishWarm(StartWarm(file, first, count));
}

BlockFetcher::WarmTicket BlockFetcher::StartWarm(const FileRef& file, uint64_t first,
                                                 uint64_t count, WarmRateLimiter* rate,
                                                 const std::atomic<bool>* cancelled) {
  WarmTicket t;
  for (uint64_t index = first; index < first + count; ++index) {
    const uint32_t length = BlockLength(file, index);
    if (length == 0) break;
    const uint64_t stored_gen = StoredGen();
    if (Cached(file, index)) continue;
    // A staged block goes to the cache from memory: wait for that store, not the hub.
    if (staging_ != nullptr) {
      if (auto staged = staging_->Take(Key(file, index))) {
        if (FetchPtr f = AdmitTaken(Key(file, index), *staged)) {
          t.bytes_ += length;
          t.waits_.emplace_back(std::move(f), false);
          continue;
        }
      }
    }
    if (rate != nullptr && rate->TryTake(length).count() != 0) {
      if (!t.waits_.empty()) Dispatch();  // what this ticket queued goes while it waits
      if (!rate->Take(length, cancelled)) {
        t.error_ = Error(Code::kCancelled, "warm-up cancelled");
        return t;
      }
    }
    const bool room = config_.memory != nullptr;
    if (room) TakeWarmRoom(length);
    bool created;
    MutexLock lock(mu_);
    if (stopping_) {
      if (room) config_.memory->Release(MemoryBudget::Use::kDemand, length);
      t.error_ = Error(Code::kCancelled, "volume is shutting down");
      return t;
    }
    // A fetch of this block stored between the look into the cache above and this lock has
    // left the table: look again rather than read the hub twice.
    if (stored_gen_ != stored_gen && !table_.Contains(Key(file, index))) {
      lock.unlock();
      if (room) config_.memory->Release(MemoryBudget::Use::kDemand, length);
      --index;  // this block again (unsigned wrap-around is well defined)
      continue;
    }
    auto f = Join(file, index, {.cls = kWarmClass}, &created, room);
    if (room && !created) config_.memory->Release(MemoryBudget::Use::kDemand, length);
    t.bytes_ += length;
    t.waits_.emplace_back(std::move(f), created);
  }
  if (!t.waits_.empty()) Dispatch();
  return t;
}

bool BlockFetcher::WaitWarm(const WarmTicket& t, SteadyTime until) {
  MutexLock lock(mu_);
  for (const auto& [f, ours] : t.waits_) {
    // Warm-up promises the blocks are in the cache when it returns: fetched and stored.
    if (!done_cv_.wait_until(
            lock, until, [&]() REQUIRES(mu_) { return (f->done && f->settled) || stopping_; })) {
      return false;
    }
  }
  return true;
}

Result<uint64_t> BlockFetcher::FinishWarm(WarmTicket t) {
  if (t.error_) return std::unexpected(*t.error_);
  uint64_t bytes = 0;
  std::optional<Error> first_error;
  for (auto& [f, ours] : t.waits_) {
    // Bounded: once sent, the hub's request timeout ends it; the cancelled flag of the
    // warm-up stops the caller between calls.
    auto r = Wait(f, SteadyTime::max());
    {
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
