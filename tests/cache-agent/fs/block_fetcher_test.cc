#include "cache-agent/fs/block_fetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/interrupt.h"
#include "tests/cache-agent/cache/cache_test_util.h"
#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeBlockCache;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;

struct FetchRig {
  explicit FetchRig(int max_inflight = 64, uint64_t prefetch_max = 64 * kBlock,
                    int demand_reserved = 32, BlockSource* source = nullptr,
                    LinkPacer::Config pacing = {})
      : cache(kBlock) {
    remote.PutFile("big", std::string(64 * kBlock, 'b'));
    remote.PutFile("other", std::string(8 * kBlock, 'o'));
    remote.PutFile("third", std::string(8 * kBlock, 't'));
    BlockFetcher::Config c;
    c.block_size = kBlock;
    c.max_hub_inflight = max_inflight;
    c.prefetch_bytes_max = prefetch_max;
    c.demand_reserved = demand_reserved;
    c.source = source;
    c.pacing = pacing;
    fetcher = std::make_unique<BlockFetcher>(remote, &cache, 7, c, registry, metrics::Labels{});
  }
  ~FetchRig() {
    remote.HoldReads(false);
    fetcher.reset();
    remote.WaitIdle();
  }
  FileRef File(const std::string& path) {
    auto a = remote.Stat(path);
    return FileRef{path, a->file_id, a->ContentVersion(), a->size};
  }
  FakeRemoteFs remote;
  FakeBlockCache cache;
  metrics::Registry registry;
  std::unique_ptr<BlockFetcher> fetcher;
};

// A peer that answers from its own thread: even blocks with its copy ('p'), odd ones refused
// as busy (its quota full).
class BusyOnOddBlocks : public BlockSource {
 public:
  ~BusyOnOddBlocks() override {
    for (auto& t : threads_) t.join();
  }
  bool Takes(const Block&) const override { return true; }
  bool FetchAsync(const Block& block, Done done) override {
    asked++;
    std::lock_guard lock(mu_);
    threads_.emplace_back([block, done = std::move(done)] {
      if (block.key.index % 2 == 0) return done(std::vector<char>(block.length, 'p'));
      done(std::unexpected(Error::FromErrno(EBUSY, "peer busy: its quota is used up")));
    });
    return true;
  }
  std::atomic<int> asked{0};

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

// A peer that owns the even blocks and holds its answers until Release; after it, it declines
// (the hub is read), so that no ask is left held when the fetcher goes.
class HoldingPeer : public BlockSource {
 public:
  ~HoldingPeer() override { Release(); }
  bool Takes(const Block& block) const override { return block.key.index % 2 == 0; }
  bool FetchAsync(const Block& block, Done done) override {
    std::lock_guard lock(mu_);
    if (released_ || !Takes(block)) return false;
    held_.emplace_back(block.length, std::move(done));
    asked_++;
    return true;
  }
  int asked() {
    std::lock_guard lock(mu_);
    return asked_;
  }
  void Release() {
    std::vector<std::pair<uint32_t, Done>> held;
    {
      std::lock_guard lock(mu_);
      released_ = true;
      held.swap(held_);
    }
    for (auto& [length, done] : held) done(std::vector<char>(length, 'p'));
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<uint32_t, Done>> held_;
  int asked_ = 0;
  bool released_ = false;
};

// Each source has its window: asks waiting on the peers do not take the hub's, whose reads
// do not take the peers'. With one window over both (and taught its rate by hub replies only),
// the peers' share of a cold fill crowded the hub out and the window shrank toward one block.
TEST(BlockFetcher, PeerAsksInFlightLeaveTheHubItsWholeWindow) {
  HoldingPeer peer;
  LinkPacer::Config pacing;
  pacing.target_queue = 200ms;
  pacing.min_window = kBlock;
  pacing.initial_window = 4 * kBlock;
  FetchRig rig(64, 64 * kBlock, 32, &peer, pacing);
  rig.remote.HoldReads(true);
  auto f = rig.File("big");
  PrefetchRequest req{.path = f.path,
                      .file_id = f.file_id,
                      .version = f.version,
                      .file_size = f.size,
                      .first_block = 0,
                      .block_count = 16};
  ASSERT_TRUE(rig.fetcher->Prefetch(req));
  // 8 even blocks asked of the peer (its window: 16 MiB at first), 4 odd ones of the hub (its
  // window: 4 blocks), the other 4 queued for the hub.
  for (int i = 0; i < 2000 && (peer.asked() < 8 || rig.remote.reads_in_flight() < 4); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(peer.asked(), 8);
  EXPECT_EQ(rig.remote.reads_in_flight(), 4);
  peer.Release();
  rig.remote.HoldReads(false);
  for (int i = 0; i < 2000 && rig.cache.blocks() < 16; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(rig.cache.blocks(), 16u);
  EXPECT_EQ(rig.remote.reads.load(), 8);
  EXPECT_EQ(rig.fetcher->hub_read_bytes(), 8u * kBlock);
}

TEST(BlockFetcher, ABusyPeersBlocksAreQueuedAgainForTheHubAndHalveThePeerWindow) {
  BusyOnOddBlocks source;
  FetchRig rig(64, 64 * kBlock, 32, &source);
  auto& window = rig.registry.GetGauge("spoke_fetch_peer_window_bytes", "", metrics::Labels{});
  const int64_t first_window = window.Value();
  auto f = rig.File("other");
  auto blocks = rig.fetcher->GetBlocks(f, 0, 8);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(blocks[i]) << i << ": " << blocks[i].error().ToString();
    ASSERT_EQ((*blocks[i])->size(), kBlock);
    EXPECT_EQ((**blocks[i])[0], i % 2 == 0 ? 'p' : 'o') << "block " << i;
  }
  // Each block asked of the peer once; only the refused ones read from the hub, once each.
  EXPECT_EQ(source.asked.load(), 8);
  EXPECT_EQ(rig.remote.reads.load(), 4);
  EXPECT_EQ(rig.fetcher->hub_read_bytes(), 4u * kBlock);
  EXPECT_LT(window.Value(), first_window);
}

TEST(BlockFetcher, ABusyPeerIsAskedAgainForBackgroundBlocksBeforeTheHub) {
  BusyOnOddBlocks source;
  FetchRig rig(64, 64 * kBlock, 32, &source);
  auto f = rig.File("other");
  ASSERT_TRUE(rig.fetcher->Warm(f, 0, 8));
  // Odd blocks: refused 1 + source_busy_retries times, then read from the hub; readers (above)
  // never wait for a retry.
  EXPECT_EQ(source.asked.load(), 4 + 4 * (1 + FetchDispatcher::Config{}.source_busy_retries));
  EXPECT_EQ(rig.remote.reads.load(), 4);
  for (int i = 0; i < 1000 && rig.cache.blocks() < 8; ++i) std::this_thread::sleep_for(1ms);
  uint64_t hits = 0;
  auto blocks = rig.fetcher->GetBlocks(f, 0, 8, &hits);
  EXPECT_EQ(hits, 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(blocks[i]);
    EXPECT_EQ((**blocks[i])[0], i % 2 == 0 ? 'p' : 'o') << "block " << i;
  }
}

TEST(BlockFetcher, AReadThatWaitsForTheHubIsOneDemandMiss) {
  FetchRig rig;
  auto f = rig.File("big");
  auto& hist = rig.registry.GetHistogram("spoke_demand_miss_seconds", "", metrics::Labels{});
  auto r = rig.fetcher->GetBlocks(f, 0, 3);  // three blocks missed by one read
  for (const auto& b : r) ASSERT_TRUE(b);
  EXPECT_EQ(rig.fetcher->misses(), 3u);
  EXPECT_EQ(rig.fetcher->demand_miss_reads(), 1u);
  EXPECT_EQ(hist.Count(), 1u);
  // Warm-up is not a reader: it records no demand miss.
  ASSERT_TRUE(rig.fetcher->Warm(f, 10, 2));
  EXPECT_EQ(rig.fetcher->demand_miss_reads(), 1u);
  EXPECT_EQ(hist.Count(), 1u);
  // A read served by the cache records none either.
  for (int i = 0; i < 1000 && rig.cache.blocks() < 5; ++i) std::this_thread::sleep_for(1ms);
  uint64_t hits = 0;
  rig.fetcher->GetBlocks(f, 0, 3, &hits);
  EXPECT_EQ(hits, 3u);
  EXPECT_EQ(rig.fetcher->demand_miss_reads(), 1u);
  EXPECT_EQ(hist.Count(), 1u);
}

TEST(BlockFetcher, HearsTheHitCountBeforeWaitingForTheHub) {
  FetchRig rig;
  auto f = rig.File("big");
  ASSERT_TRUE(rig.fetcher->Warm(f, 0, 1));
  rig.remote.HoldReads(true);
  std::atomic<int64_t> heard{-1};
  std::thread reader([&] {
    rig.fetcher->GetBlocks(f, 0, 2, nullptr, [&](uint64_t hits) { heard = int64_t(hits); });
  });
  // The hub holds block 1, yet the callback has already run with block 0's hit.
  for (int i = 0; i < 1000 && heard.load() < 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(heard.load(), 1);
  rig.remote.HoldReads(false);
  reader.join();
}

// A reader whose request is interrupted (FUSE INTERRUPT: its process got a signal) stops
// waiting for the hub at once with kInterrupted; the fetch goes on and its block is cached
// for the next reader. A read that is not interrupted waits on.
TEST(BlockFetcher, AnInterruptedReaderStopsWaitingAndTheBlockIsStillCached) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.remote.HoldReads(true);
  Interrupt interrupt;
  std::atomic<bool> heard{false};
  std::vector<Result<BlockData>> got;
  std::thread reader([&] {
    InterruptScope scope(&interrupt);
    got = rig.fetcher->GetBlocks(f, 0, 2, nullptr, [&](uint64_t) { heard = true; });
  });
  std::vector<Result<BlockData>> patient;
  std::thread other([&] { patient = rig.fetcher->GetBlocks(f, 0, 1); });
  // Both blocks on the hub, and the reader past its lookups (waiting).
  for (int i = 0; i < 5000 && (rig.remote.reads_in_flight() < 2 || !heard.load()); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(heard.load());
  interrupt.Fire();
  reader.join();  // while the hub still holds both reads
  ASSERT_EQ(got.size(), 2u);
  for (const auto& b : got) {
    ASSERT_FALSE(b);
    EXPECT_EQ(b.error().code(), Code::kInterrupted) << b.error().ToString();
    EXPECT_EQ(b.error().ToErrno(), EINTR);
  }
  EXPECT_EQ(rig.remote.reads_in_flight(), 2);
  rig.remote.HoldReads(false);
  other.join();
  ASSERT_EQ(patient.size(), 1u);
  ASSERT_TRUE(patient[0]) << patient[0].error().ToString();
  // Stored by the store threads, after the readers were served.
  for (int i = 0; i < 5000 && !(rig.fetcher->Cached(f, 0) && rig.fetcher->Cached(f, 1)); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(rig.fetcher->Cached(f, 0));
  EXPECT_TRUE(rig.fetcher->Cached(f, 1));
  EXPECT_EQ(rig.remote.reads.load(), 2);  // one hub read per block, shared by both readers
}

// The volume shuts down while a reader's block is still queued behind a hub read in flight:
// the reader gets kCancelled at once, not a wait to its deadline, and the shutdown ends once
// the hub answers what was sent.
TEST(BlockFetcher, AReaderQueuedAtShutdownIsCancelledNotLeftWaiting) {
  FetchRig rig(/*max_inflight=*/1, 64 * kBlock, /*demand_reserved=*/0);
  auto f = rig.File("big");
  rig.remote.HoldReads(true);
  // The shutdown thread destroys it; the reader only calls it.
  std::unique_ptr<BlockFetcher> owned = std::move(rig.fetcher);
  BlockFetcher* fetcher = owned.get();
  {
    auto sent = fetcher->StartWarm(f, 0, 1);  // takes the one hub slot; never waited for
  }
  for (int i = 0; i < 5000 && rig.remote.reads_in_flight() < 1; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  Result<BlockData> queued = std::unexpected(Error(Code::kInternal, "not read"));
  std::thread waiting([&] {
    // A deadline past the test's: only the shutdown ends this wait.
    auto r = fetcher->GetBlocks(f, 5, 1, nullptr, nullptr, std::chrono::steady_clock::now() + 600s);
    queued = r[0];
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rig.remote.reads.load(), 1);  // block 5 waits in the queue, not on the hub
  std::thread shutdown([&] { owned.reset(); });
  waiting.join();  // while the hub still holds block 0
  const bool cancelled = !queued && queued.error().code() == Code::kCancelled;
  rig.remote.HoldReads(false);
  shutdown.join();
  EXPECT_TRUE(cancelled) << (queued ? "served" : queued.error().ToString());
  EXPECT_EQ(rig.remote.reads.load(), 1);
}

// A cache hit is read into the buffer the reader is served from, aligned and padded so that
// the cache's O_DIRECT read fills it in place: no bounce buffer and copy in between.
TEST(BlockFetcher, ACacheHitIsServedFromTheBufferTheCacheFilledInPlace) {
  FetchRig rig;
  rig.remote.PutFile("short", std::string(1000, 's'));
  auto f = rig.File("short");
  ASSERT_TRUE(rig.fetcher->Warm(f, 0, 1));
  uint64_t hits = 0;
  auto r = rig.fetcher->GetBlocks(f, 0, 1, &hits);
  ASSERT_TRUE(r[0]);
  EXPECT_EQ(hits, 1u);
  const auto get = rig.cache.last_get();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(get.out) % BlockCache::kDirectAlign, 0u);
  EXPECT_EQ(get.capacity, BlockCache::kDirectAlign);  // 1000 bytes, padded
  EXPECT_EQ((*r[0])->data(), get.out);
  EXPECT_EQ(std::string((*r[0])->begin(), (*r[0])->end()), std::string(1000, 's'));
}

// With the real cache filling readers' buffers in place, a block that rotted on the cache
// disk is still caught by its checksum and never served: the reader gets the hub's bytes.
TEST(BlockFetcher, ACorruptCacheBlockIsNeverServed) {
  constexpr uint32_t kCacheBlock = 64 << 10;
  for (const std::string& base : testing::TestBases()) {
    SCOPED_TRACE(base);
    testing::TempDir dir(base);
    BlockCache::Config cc;
    cc.dir = dir.path();
    cc.capacity_bytes = 4 * kCacheBlock;
    cc.block_size = kCacheBlock;
    cc.io_depth = 16;
    auto opened = OpenBlockCache(cc, MakeLruPolicy(), nullptr);
    ASSERT_TRUE(opened) << opened.error().ToString();
    std::unique_ptr<BlockCache> cache = std::move(*opened);
    FakeRemoteFs remote;
    std::string content(100000, 0);
    for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + i / 251);
    remote.PutFile("img", content);
    metrics::Registry registry;
    BlockFetcher::Config c;
    c.block_size = kCacheBlock;
    BlockFetcher fetcher(remote, cache.get(), 7, c, registry, metrics::Labels{});
    auto a = remote.Stat("img");
    const FileRef f{"img", a->file_id, a->ContentVersion(), a->size};
    ASSERT_TRUE(fetcher.Warm(f, 0, 2));
    // Flip one data byte of block 1 (the file's short last block) on disk.
    auto slot = testing::FindSlot(dir.path(), kCacheBlock, 4, BlockKey{7, f.file_id, f.version, 1});
    ASSERT_TRUE(slot);
    const uint64_t off = *slot * (kHeaderBytes + kCacheBlock) + kHeaderBytes + 1234;
    auto byte = testing::ReadRaw(dir.path(), off, 1);
    byte[0] ^= 0x40;
    testing::WriteRaw(dir.path(), off, byte);

    const int reads = remote.reads.load();
    uint64_t hits = 0;
    auto r = fetcher.GetBlocks(f, 0, 2, &hits);
    ASSERT_TRUE(r[0]);
    ASSERT_TRUE(r[1]);
    EXPECT_EQ(std::string((*r[0])->begin(), (*r[0])->end()), content.substr(0, kCacheBlock));
    EXPECT_EQ(std::string((*r[1])->begin(), (*r[1])->end()), content.substr(kCacheBlock));
    EXPECT_EQ(hits, 1u);                        // block 0 from the cache
    EXPECT_EQ(remote.reads.load(), reads + 1);  // block 1 from the hub again
    EXPECT_EQ(cache->Stats().checksum_failures, 1u);
  }
}

TEST(BlockFetcher, EvictDropsOneFileOrTheWholeVolume) {
  FetchRig rig;
  auto big = rig.File("big"), other = rig.File("other");
  ASSERT_TRUE(rig.fetcher->Warm(big, 0, 2));
  ASSERT_TRUE(rig.fetcher->Warm(other, 0, 3));
  EXPECT_EQ(rig.fetcher->CachedBytes(), 5u * kBlock);
  EXPECT_EQ(rig.fetcher->Evict(big.file_id), 2u);
  EXPECT_FALSE(rig.fetcher->Cached(big, 0));
  EXPECT_TRUE(rig.fetcher->Cached(other, 0));
  EXPECT_EQ(rig.fetcher->Evict(0), 3u);
  EXPECT_EQ(rig.fetcher->CachedBytes(), 0u);
}

TEST(BlockFetcher, ConcurrentReadersOfOneBlockShareOneFetch) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.remote.SetReadLatency(50ms);
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      auto r = rig.fetcher->GetBlocks(f, 3, 1);
      if (r[0] && (*r[0])->size() == kBlock) ok++;
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(rig.remote.reads, 1);
  EXPECT_EQ(rig.fetcher->hub_read_bytes(), kBlock);
}

TEST(BlockFetcher, PrefetchJoinsAndIsNotRepeated) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.remote.HoldReads(true);
  PrefetchRequest req{"big", f.file_id, f.version, f.size, 0, 4, 0, 1};
  EXPECT_TRUE(rig.fetcher->Prefetch(req));
  EXPECT_TRUE(rig.fetcher->Prefetch(req));  // already in flight: nothing new
  EXPECT_EQ(rig.fetcher->PrefetchBytesInFlight(), 4u * kBlock);
  std::thread reader([&] {
    auto r = rig.fetcher->GetBlocks(f, 1, 1);  // joins the prefetch of block 1
    EXPECT_TRUE(r[0]);
  });
  std::this_thread::sleep_for(50ms);
  rig.remote.HoldReads(false);
  reader.join();
  rig.remote.WaitIdle();
  EXPECT_EQ(rig.remote.reads, 4);
  // Blocks are stored off the hub's callbacks: wait until all four are in.
  for (int i = 0; i < 1000 && rig.cache.blocks() < 4; ++i) std::this_thread::sleep_for(1ms);
  // Block 1 was promoted to demand; the others were stored as the expert's.
  EXPECT_EQ(rig.cache.Origin(BlockKey{7, f.file_id, f.version, 0}), 1);
  EXPECT_EQ(rig.cache.Origin(BlockKey{7, f.file_id, f.version, 1}), kDemand);
  EXPECT_TRUE(rig.fetcher->Prefetch(req));
  rig.remote.WaitIdle();
  EXPECT_EQ(rig.remote.reads, 4);  // all cached: nothing fetched again
}

// A reader's block is being stored when the prefetcher asks for it: the prefetch misses the
// cache, then the store lands and the fetch leaves the table before the prefetch looks there.
// The prefetch looks into the cache again rather than read the hub a second time.
TEST(BlockFetcher, APrefetchRacingTheStoreOfAReadersBlockDoesNotReadItTwice) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.cache.HoldPuts(true);
  ASSERT_TRUE(rig.fetcher->GetBlocks(f, 0, 1)[0]);  // served; its store waits
  EXPECT_EQ(rig.remote.reads, 1);
  rig.cache.AfterNextContains([&] {
    rig.cache.HoldPuts(false);
    for (int i = 0; i < 2000 && rig.cache.blocks() < 1; ++i) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);  // the store thread settles the fetch after its Put
  });
  PrefetchRequest req{"big", f.file_id, f.version, f.size, 0, 1, 0, 1};
  EXPECT_TRUE(rig.fetcher->Prefetch(req));
  rig.remote.WaitIdle();
  EXPECT_EQ(rig.remote.reads, 1) << "the block was read from the hub twice";
}

TEST(BlockFetcher, DemandGoesBeforeQueuedPrefetch) {
  FetchRig rig(/*max_inflight=*/1);
  auto big = rig.File("big");
  auto other = rig.File("other");
  rig.remote.HoldReads(true);
  // One prefetch occupies the only slot; 9 more wait in the queue.
  ASSERT_TRUE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 0, 10, 0, 1}));
  std::thread reader([&] {
    auto r = rig.fetcher->GetBlocks(other, 5, 1);
    EXPECT_TRUE(r[0]);
  });
  std::this_thread::sleep_for(50ms);
  rig.remote.HoldReads(false);
  reader.join();
  rig.remote.WaitIdle();
  auto log = rig.remote.ReadLog();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0], "big@0");
  EXPECT_EQ(log[1], "other@" + std::to_string(5 * kBlock)) << "demand waited behind prefetch";
}

// Priority classes: a pod's read goes before queued warm-up, warm-up before prefetch.
TEST(BlockFetcher, DemandBeforeWarmUpBeforePrefetch) {
  FetchRig rig(/*max_inflight=*/1);
  auto big = rig.File("big");
  auto other = rig.File("other");
  auto third = rig.File("third");
  rig.remote.HoldReads(true);
  // big@0 takes the only slot; big 1..3 wait as prefetch.
  ASSERT_TRUE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 0, 4, 0, 1}));
  std::thread warm([&] { EXPECT_TRUE(rig.fetcher->Warm(other, 0, 2)); });
  std::this_thread::sleep_for(50ms);  // the warm-up is queued before the reader comes
  std::thread reader([&] { EXPECT_TRUE(rig.fetcher->GetBlocks(third, 3, 1)[0]); });
  std::this_thread::sleep_for(50ms);
  rig.remote.HoldReads(false);
  reader.join();
  warm.join();
  rig.remote.WaitIdle();
  const auto log = rig.remote.ReadLog();
  const std::vector<std::string> want = {"big@0", "third@" + std::to_string(3 * kBlock), "other@0",
                                         "other@" + std::to_string(kBlock),
                                         "big@" + std::to_string(kBlock)};
  ASSERT_GE(log.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(log[i], want[i]) << "position " << i;
}

// Warm-up (like prefetch) leaves the reserved slots to readers.
TEST(BlockFetcher, WarmUpLeavesReservedSlotsToReaders) {
  FetchRig rig(/*max_inflight=*/4, 64 * kBlock, /*demand_reserved=*/2);
  auto big = rig.File("big");
  auto other = rig.File("other");
  rig.remote.HoldReads(true);
  std::thread warm([&] { EXPECT_TRUE(rig.fetcher->Warm(big, 0, 8)); });
  for (int i = 0; i < 2000 && rig.remote.reads < 2; ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rig.remote.reads.load(), 2) << "warm-up took a reserved slot";
  std::thread reader([&] { EXPECT_TRUE(rig.fetcher->GetBlocks(other, 0, 1)[0]); });
  for (int i = 0; i < 2000 && rig.remote.reads < 3; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(rig.remote.reads.load(), 3) << "the reader waited behind warm-up";
  rig.remote.HoldReads(false);
  reader.join();
  warm.join();
}

// The deadline covers the time queued: a reader whose block never left the queue gets
// kTimeout at its deadline, and the fetch is then dropped instead of sent.
TEST(BlockFetcher, ReadDeadlineCoversQueueTime) {
  FetchRig rig(/*max_inflight=*/1);
  auto big = rig.File("big");
  auto other = rig.File("other");
  rig.remote.HoldReads(true);
  ASSERT_TRUE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 0, 1, 0, 1}));
  auto r = rig.fetcher->GetBlocks(other, 2, 1, nullptr, nullptr,
                                  std::chrono::steady_clock::now() + 100ms);
  ASSERT_FALSE(r[0]);
  EXPECT_EQ(r[0].error().code(), Code::kTimeout);
  EXPECT_NE(r[0].error().message().find("queued"), std::string::npos) << r[0].error().message();
  rig.remote.HoldReads(false);
  rig.remote.WaitIdle();
  for (const auto& entry : rig.remote.ReadLog()) {
    EXPECT_NE(entry, "other@" + std::to_string(2 * kBlock)) << "an abandoned read was sent";
  }
  EXPECT_EQ(rig.fetcher->expired_drops(), 1u);
  // A later reader of the block fetches it afresh.
  EXPECT_TRUE(rig.fetcher->GetBlocks(other, 2, 1)[0]);
}

// Bounded memory: a prefetched block's bytes count against the prefetch budget until the
// cache stored it (its buffer is held until then), so a slow cache disk slows prefetching
// down instead of piling blocks up in the store queue; demand blocks beyond the store
// queue's bound are served but not cached.
TEST(BlockFetcher, PrefetchBytesAreReleasedOnlyWhenStored) {
  FetchRig rig(64, /*prefetch_max=*/4 * kBlock);
  auto big = rig.File("big");
  rig.cache.HoldPuts(true);
  EXPECT_TRUE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 0, 4, 0, 1}));
  rig.remote.WaitIdle();  // every hub read is back
  EXPECT_EQ(rig.fetcher->PrefetchBytesInFlight(), 4u * kBlock) << "released before stored";
  EXPECT_FALSE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 8, 1, 0, 1}));
  rig.cache.HoldPuts(false);
  for (int i = 0; i < 5000 && rig.fetcher->PrefetchBytesInFlight() > 0; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(rig.fetcher->PrefetchBytesInFlight(), 0u);
  EXPECT_EQ(rig.cache.blocks(), 4u);
}

TEST(BlockFetcher, DemandBeyondTheStoreQueueBoundIsServedNotCached) {
  FakeRemoteFs remote;
  remote.PutFile("big", std::string(64 * kBlock, 'b'));
  FakeBlockCache cache(kBlock);
  metrics::Registry registry;
  BlockFetcher::Config c;
  c.block_size = kBlock;
  c.store_threads = 1;
  c.store_queue_bytes_max = 4 * kBlock;
  BlockFetcher fetcher(remote, &cache, 7, c, registry, metrics::Labels{});
  auto a = remote.Stat("big");
  FileRef big{"big", a->file_id, a->ContentVersion(), a->size};
  cache.HoldPuts(true);  // the store thread takes one block and blocks in Put
  auto r = fetcher.GetBlocks(big, 0, 16);
  for (const auto& b : r) ASSERT_TRUE(b);
  // 16 blocks, one in the blocked Put, 4 queued: the rest are not cached. (The store
  // decision follows the reader's wake-up: wait for it, bounded.)
  for (int i = 0; i < 5000 && fetcher.store_skips() < 11; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_GE(fetcher.store_skips(), 11u) << "the store queue grew past its bound";
  EXPECT_LE(fetcher.store_skips(), 12u);  // 12 when all arrived before the first was taken
  cache.HoldPuts(false);
  remote.WaitIdle();
}

TEST(BlockFetcher, PrefetchBudgetRefusesBeyondTheCap) {
  FetchRig rig(64, /*prefetch_max=*/4 * kBlock);
  auto big = rig.File("big");
  rig.remote.HoldReads(true);
  EXPECT_FALSE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 0, 10, 0, 1}));
  EXPECT_EQ(rig.fetcher->PrefetchBytesInFlight(), 4u * kBlock);
  EXPECT_FALSE(rig.fetcher->Prefetch({"big", big.file_id, big.version, big.size, 20, 1, 0, 1}));
  rig.remote.HoldReads(false);
  rig.remote.WaitIdle();
  // Demand is never limited by the prefetch budget.
  auto r = rig.fetcher->GetBlocks(big, 30, 8);
  for (auto& b : r) EXPECT_TRUE(b);
}

TEST(BlockFetcher, ErrorsReachEveryWaiterAndAreNotCached) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.remote.SetDown(true);
  auto r = rig.fetcher->GetBlocks(f, 0, 2);
  ASSERT_FALSE(r[0]);
  EXPECT_EQ(r[0].error().code(), Code::kUnavailable);
  rig.remote.SetDown(false);
  r = rig.fetcher->GetBlocks(f, 0, 2);
  EXPECT_TRUE(r[0]);
  EXPECT_TRUE(r[1]);
}

// A hub that answers a READ short of an unchanged file's block (legal mid-file for a single
// READ; the remote asks for the rest, but a block must never end early): the read fails with
// EIO, and nothing is cached, so that the kernel is never told the file ends there, not even
// after a restart. Once the hub answers whole, the block is read and served whole.
TEST(BlockFetcher, AShortBlockOfAnUnchangedFileIsAnErrorAndNeverCached) {
  FetchRig rig;
  auto f = rig.File("big");
  rig.remote.ShortenReadsOf("big", 4096);
  auto r = rig.fetcher->GetBlocks(f, 3, 1);
  ASSERT_FALSE(r[0]);
  EXPECT_EQ(r[0].error().ToErrno(), EIO) << r[0].error().ToString();
  for (int i = 0; i < 200 && rig.cache.blocks() < 1; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(rig.cache.Contains(BlockKey{7, f.file_id, f.version, 3}));
  rig.remote.ShortenReadsOf("", 0);
  r = rig.fetcher->GetBlocks(f, 3, 1);
  ASSERT_TRUE(r[0]);
  EXPECT_EQ((*r[0])->size(), kBlock);
}

// A file replaced on the hub after it was opened: blocks of the old version already cached
// are still its own, but an uncached block is never filled with the new content under the old
// version's key (that would serve a mix of both): the read fails with ESTALE, is counted, and
// nothing is cached.
TEST(BlockFetcher, ABlockOfAFileChangedOnTheHubIsRefusedNotMixed) {
  FetchRig rig;
  auto old_version = rig.File("big");
  auto first = rig.fetcher->GetBlocks(old_version, 0, 1);
  ASSERT_TRUE(first[0]);
  rig.remote.PutFile("big", std::string(64 * kBlock, 'N'));  // same name and id, new content
  auto later = rig.fetcher->GetBlocks(old_version, 5, 1);
  ASSERT_FALSE(later[0]);
  EXPECT_EQ(later[0].error().ToErrno(), ESTALE) << later[0].error().ToString();
  auto& changed = rig.registry.GetCounter("spoke_hub_file_changed_total", "", metrics::Labels{});
  EXPECT_EQ(changed.Value(), 1u);
  for (int i = 0; i < 200 && rig.cache.blocks() < 1; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(rig.cache.Contains(BlockKey{7, old_version.file_id, old_version.version, 5}));
  // The new version, opened again, reads the new bytes.
  auto new_version = rig.File("big");
  EXPECT_NE(new_version.version, old_version.version);
  auto fresh = rig.fetcher->GetBlocks(new_version, 5, 1);
  ASSERT_TRUE(fresh[0]);
  EXPECT_EQ((**fresh[0])[0], 'N');
}

TEST(BlockFetcher, WarmFetchesMissingBlocksOnly) {
  FetchRig rig;
  auto f = rig.File("other");
  ASSERT_TRUE(rig.fetcher->GetBlocks(f, 0, 1)[0]);
  auto w = rig.fetcher->Warm(f, 0, 100);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 7u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 8u);
}

// Warm-up in two halves: StartWarm puts a range on the hub and returns; FinishWarm waits
// for the fetches and their store, with Warm's result. Several tickets are on the hub at once.
TEST(BlockFetcher, StartWarmDoesNotWaitAndFinishWarmWaitsForTheStore) {
  FetchRig rig;
  auto big = rig.File("big");
  auto other = rig.File("other");
  ASSERT_TRUE(rig.fetcher->GetBlocks(other, 0, 1)[0]);  // cached: not in the ticket
  for (int i = 0; i < 5000 && rig.cache.blocks() < 1; ++i) std::this_thread::sleep_for(1ms);
  rig.remote.HoldReads(true);
  auto t1 = rig.fetcher->StartWarm(big, 0, 4);
  auto t2 = rig.fetcher->StartWarm(other, 0, 100);
  EXPECT_EQ(t1.blocks(), 4u);
  EXPECT_EQ(t1.bytes(), 4u * kBlock);
  EXPECT_EQ(t2.blocks(), 7u);
  for (int i = 0; i < 5000 && rig.remote.reads_in_flight() < 11; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(rig.remote.reads_in_flight(), 11);  // both tickets' blocks, at once
  EXPECT_FALSE(rig.fetcher->WaitWarm(t1, std::chrono::steady_clock::now() + 20ms));
  // Fetched but not stored yet: not finished.
  rig.cache.HoldPuts(true);
  rig.remote.HoldReads(false);
  for (int i = 0; i < 5000 && rig.remote.reads_in_flight() > 0; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(rig.fetcher->WaitWarm(t2, std::chrono::steady_clock::now() + 20ms));
  rig.cache.HoldPuts(false);
  EXPECT_TRUE(rig.fetcher->WaitWarm(t1, std::chrono::steady_clock::now() + 10s));
  auto r1 = rig.fetcher->FinishWarm(std::move(t1));
  auto r2 = rig.fetcher->FinishWarm(std::move(t2));
  ASSERT_TRUE(r1);
  ASSERT_TRUE(r2);
  EXPECT_EQ(*r1, 4u * kBlock);
  EXPECT_EQ(*r2, 7u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 12u);
  // An error of one ticket is its own; the other's blocks are fetched and stored.
  rig.remote.FailReadsOf("third");
  auto bad = rig.fetcher->StartWarm(rig.File("third"), 0, 8);
  auto good = rig.fetcher->StartWarm(big, 4, 4);
  auto rb = rig.fetcher->FinishWarm(std::move(bad));
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.error().code(), Code::kIo);
  auto rg = rig.fetcher->FinishWarm(std::move(good));
  ASSERT_TRUE(rg);
  EXPECT_EQ(*rg, 4u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 16u);
}

// --- the agent's memory budget (shared by every volume) ---

struct BudgetRig {
  // `total_blocks` of budget, a quarter kept for demand; two volumes (fetchers) share it.
  explicit BudgetRig(uint64_t total_blocks) : cache(kBlock) {
    remote.PutFile("big", std::string(64 * kBlock, 'b'));
    MemoryBudget::Config mc;
    mc.total_bytes = total_blocks * kBlock;
    budget = std::make_unique<MemoryBudget>(mc);
    BlockFetcher::Config c;
    c.block_size = kBlock;
    c.store_threads = 1;
    c.memory = budget.get();
    a = std::make_unique<BlockFetcher>(remote, &cache, 7, c, registry, metrics::Labels{});
    b = std::make_unique<BlockFetcher>(remote, &cache, 8, c, registry, metrics::Labels{});
    auto st = remote.Stat("big");
    big = FileRef{"big", st->file_id, st->ContentVersion(), st->size};
  }
  ~BudgetRig() {
    remote.HoldReads(false);
    cache.HoldPuts(false);
    a.reset();
    b.reset();
    remote.WaitIdle();
  }
  PrefetchRequest Request(uint64_t first, uint64_t count) const {
    return {"big", big.file_id, big.version, big.size, first, count, 0, 1};
  }
  void WaitUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 5000 && !done(); ++i) std::this_thread::sleep_for(1ms);
  }
  FakeRemoteFs remote;
  FakeBlockCache cache;
  metrics::Registry registry;
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<BlockFetcher> a, b;
  FileRef big;
};

// A prefetched block holds its room from queueing until the cache stored it; beyond the
// budget's background share, Prefetch is refused (back-pressure) for every volume.
TEST(BlockFetcherMemory, PrefetchHoldsItsRoomUntilStoredAcrossVolumes) {
  BudgetRig rig(8);  // background share: 6 blocks
  rig.cache.HoldPuts(true);
  EXPECT_FALSE(rig.a->Prefetch(rig.Request(0, 10)));
  EXPECT_EQ(rig.budget->used(), 6u * kBlock);
  EXPECT_FALSE(rig.b->Prefetch(rig.Request(20, 1))) << "the other volume shares the budget";
  EXPECT_GE(rig.budget->refusals(MemoryBudget::Use::kPrefetch), 2u);
  rig.remote.WaitIdle();  // fetched: now waiting for the (held) store thread
  rig.WaitUntil([&] { return rig.budget->used(MemoryBudget::Use::kStoreQueue) == 6u * kBlock; });
  EXPECT_EQ(rig.budget->used(MemoryBudget::Use::kStoreQueue), 6u * kBlock);
  EXPECT_EQ(rig.budget->used(), 6u * kBlock) << "released before stored";
  rig.cache.HoldPuts(false);
  rig.WaitUntil([&] { return rig.budget->used() == 0; });
  EXPECT_EQ(rig.budget->used(), 0u);
  EXPECT_EQ(rig.cache.blocks(), 6u);
  EXPECT_TRUE(rig.b->Prefetch(rig.Request(20, 1)));
}

// The no-deadlock rule: with every background byte held by prefetches stuck behind a
// blocked cache disk, a reader still gets its blocks (demand never waits for memory); what
// does not fit in the whole budget is served and not cached, and its charge is returned.
TEST(BlockFetcherMemory, ReadersNeverWaitForPrefetchMemory) {
  BudgetRig rig(8);
  rig.cache.HoldPuts(true);
  EXPECT_FALSE(rig.a->Prefetch(rig.Request(0, 10)));
  rig.remote.WaitIdle();
  auto r = rig.b->GetBlocks(rig.big, 40, 8);
  for (const auto& blk : r) {
    ASSERT_TRUE(blk);
    EXPECT_EQ(std::string((*blk)->begin(), (*blk)->end()), std::string(kBlock, 'b'));
  }
  // 6 prefetched + 2 demand blocks fill the budget; the other 6 demand blocks are not cached.
  rig.WaitUntil([&] { return rig.b->store_skips() >= 6; });
  EXPECT_EQ(rig.b->store_skips(), 6u);
  EXPECT_EQ(rig.budget->used(MemoryBudget::Use::kDemand), 0u);
  EXPECT_EQ(rig.budget->used(), 8u * kBlock);
  rig.cache.HoldPuts(false);
  rig.WaitUntil([&] { return rig.budget->used() == 0; });
  EXPECT_EQ(rig.budget->used(), 0u);
}

// A prefetch a reader asks for becomes demand (its room moves with it); fetches still
// queued when the volume goes give their room back.
TEST(BlockFetcherMemory, PromotionMovesTheRoomAndShutdownReturnsIt) {
  BudgetRig rig(8);
  rig.remote.HoldReads(true);
  EXPECT_TRUE(rig.a->Prefetch(rig.Request(0, 4)));
  EXPECT_EQ(rig.budget->used(MemoryBudget::Use::kPrefetch), 4u * kBlock);
  std::thread reader([&] {
    auto r = rig.a->GetBlocks(rig.big, 0, 1);
    EXPECT_TRUE(r[0]);
  });
  rig.WaitUntil([&] { return rig.budget->used(MemoryBudget::Use::kDemand) == kBlock; });
  EXPECT_EQ(rig.budget->used(MemoryBudget::Use::kDemand), kBlock);
  EXPECT_EQ(rig.budget->used(MemoryBudget::Use::kPrefetch), 3u * kBlock);
  rig.remote.HoldReads(false);
  reader.join();
  rig.remote.WaitIdle();
  rig.WaitUntil([&] { return rig.budget->used() == 0; });
  EXPECT_EQ(rig.budget->used(), 0u);

  // Queued, never sent (no hub slot): released by the destructor.
  BlockFetcher::Config c;
  c.block_size = kBlock;
  c.max_hub_inflight = 2;
  c.demand_reserved = 1;
  c.memory = rig.budget.get();
  rig.remote.HoldReads(true);
  auto narrow =
      std::make_unique<BlockFetcher>(rig.remote, &rig.cache, 9, c, rig.registry, metrics::Labels{});
  EXPECT_TRUE(narrow->Prefetch(rig.Request(30, 4)));
  EXPECT_EQ(rig.budget->used(), 4u * kBlock);
  rig.remote.HoldReads(false);
  narrow.reset();
  rig.remote.WaitIdle();
  rig.WaitUntil([&] { return rig.budget->used() == 0; });
  EXPECT_EQ(rig.budget->used(), 0u);
}

// Warm-up is no reader: it waits for background room (its own earlier blocks give theirs
// back once stored) instead of growing the agent, and still caches every block.
TEST(BlockFetcherMemory, WarmUpWaitsForRoomInsteadOfGrowing) {
  BudgetRig rig(8);  // background share: 6 blocks
  auto w = rig.a->Warm(rig.big, 0, 16);
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(*w, 16u * kBlock);
  EXPECT_EQ(rig.cache.blocks(), 16u);
  EXPECT_LE(rig.budget->peak(), 6u * kBlock);
  rig.WaitUntil([&] { return rig.budget->used() == 0; });
  EXPECT_EQ(rig.budget->used(), 0u);
}

}  // namespace
}  // namespace spoke::agent
