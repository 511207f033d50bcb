#include "cache-agent/fs/store_queue.h"

#include "common/thread_name.h"

namespace spoke::agent {

StoreQueue::StoreQueue(int threads, uint64_t max_bytes, Store store)
    : max_bytes_(max_bytes), store_(std::move(store)) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      NameThisThread("spoke-store");
      Loop();
    });
  }
}

StoreQueue::~StoreQueue() { Stop(); }

bool StoreQueue::Push(BlockFetchPtr f, uint64_t bytes, bool bounded) {
  {
    MutexLock lock(mu_);
    if (stop_ || (bounded && bytes_ + bytes > max_bytes_)) return false;
    queue_.emplace_back(std::move(f), bytes);
    bytes_ += bytes;
  }
  cv_.notify_one();
  return true;
}

void StoreQueue::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

uint64_t StoreQueue::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

void StoreQueue::Loop() {
  while (true) {
    BlockFetchPtr f;
    {
      MutexLock lock(mu_);
      cv_.wait(lock, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      f = std::move(queue_.front().first);
      bytes_ -= queue_.front().second;
      queue_.pop_front();
    }
    store_(f);
  }
}

}  // namespace spoke::agent
