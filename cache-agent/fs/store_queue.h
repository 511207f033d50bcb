// StoreQueue: fetched blocks waiting for a store thread, which hands each to `store` (the
// cache's Put: disk I/O off the network loops and the readers' path). Bounded in bytes for the
// blocks that may be skipped (a reader's: served, not cached); blocks bounded elsewhere
// (prefetches, by the fetcher's prefetch cap) always enter. Stop stores what is queued, then
// ends the threads. Thread-safe; its lock is a leaf, also taken under the fetcher's mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "cache-agent/fs/block_fetch.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class StoreQueue {
 public:
  using Store = std::function<void(const BlockFetchPtr&)>;

  // Starts `threads` store threads; `store` runs on them, one block at a time per thread.
  StoreQueue(int threads, uint64_t max_bytes, Store store);
  ~StoreQueue();  // Stop()
  StoreQueue(const StoreQueue&) = delete;
  StoreQueue& operator=(const StoreQueue&) = delete;

  // Queues `f`, whose bytes are `bytes`, unless `bounded` and they would take the queue past
  // max_bytes. Returns whether it was queued.
  bool Push(BlockFetchPtr f, uint64_t bytes, bool bounded);
  // Stores what is queued and joins the threads. Idempotent.
  void Stop();
  uint64_t bytes() const;

 private:
  void Loop();

  const uint64_t max_bytes_;
  const Store store_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<BlockFetchPtr, uint64_t>> queue_ GUARDED_BY(mu_);  // fetch, its bytes
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace spoke::agent
