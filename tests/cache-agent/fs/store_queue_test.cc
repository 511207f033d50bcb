// StoreQueue alone: blocks go to `store` on the queue's threads, the byte bound applies to
// bounded blocks only, and Stop stores what is queued before the threads end.
#include "cache-agent/fs/store_queue.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "common/thread_annotations.h"

namespace spoke::agent {
namespace {

BlockFetchPtr Fetch(uint64_t index) {
  auto f = std::make_shared<BlockFetch>();
  f->key = BlockKey{7, 1, 1, index};
  return f;
}

// A store that waits until released, so that blocks stay queued.
struct Gated {
  Mutex mu;
  CondVar cv;
  bool open GUARDED_BY(mu) = false;
  std::set<uint64_t> stored GUARDED_BY(mu);
  std::set<std::thread::id> threads GUARDED_BY(mu);
  void Store(const BlockFetchPtr& f) {
    MutexLock lock(mu);
    cv.wait(lock, [&]() REQUIRES(mu) { return open; });
    stored.insert(f->key.index);
    threads.insert(std::this_thread::get_id());
  }
  void Open() {
    {
      MutexLock lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(StoreQueue, BoundedBlocksStopAtTheByteBoundOthersAlwaysEnter) {
  Gated gate;
  StoreQueue q(1, 3000, [&](const BlockFetchPtr& f) { gate.Store(f); });
  // The one thread takes the first block and waits in `store`; the rest stay queued.
  ASSERT_TRUE(q.Push(Fetch(0), 1000, /*bounded=*/true));
  while (q.bytes() != 0) std::this_thread::yield();
  EXPECT_TRUE(q.Push(Fetch(1), 2000, true));
  EXPECT_TRUE(q.Push(Fetch(2), 1000, true));
  EXPECT_FALSE(q.Push(Fetch(3), 1, true));     // full
  EXPECT_TRUE(q.Push(Fetch(4), 5000, false));  // bounded elsewhere
  EXPECT_EQ(q.bytes(), 8000u);
  gate.Open();
  q.Stop();
  MutexLock lock(gate.mu);
  EXPECT_EQ(gate.stored, (std::set<uint64_t>{0, 1, 2, 4}));
}

TEST(StoreQueue, StopStoresWhatIsQueuedAndRefusesMore) {
  Gated gate;
  StoreQueue q(2, 1 << 20, [&](const BlockFetchPtr& f) { gate.Store(f); });
  for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(q.Push(Fetch(i), 10, true));
  std::thread stopper([&] { q.Stop(); });
  gate.Open();
  stopper.join();
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_FALSE(q.Push(Fetch(99), 10, false));
  MutexLock lock(gate.mu);
  EXPECT_EQ(gate.stored.size(), 20u);
  EXPECT_LE(gate.threads.size(), 2u);
}

}  // namespace
}  // namespace spoke::agent
