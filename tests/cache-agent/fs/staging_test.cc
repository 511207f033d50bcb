// Staging of prefetched blocks while the cache is full (StagingBuffer, BlockFetcher): the
// buffer on its own, then the fetcher over an in-memory cache with a real eviction policy,
// and the whole read path (VolumeFs + PrefetchDriver) over several epochs of a dataset twice
// the cache.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "cache-agent/cache/nothrash_policy.h"
#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/prefetch_driver.h"
#include "cache-agent/fs/staging_buffer.h"
#include "cache-agent/fs/volume_fs.h"
#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;

StagingBuffer::Data Bytes(size_t n, char c) {
  return std::make_shared<const BlockBytes>(std::vector<char>(n, c));
}

struct BufferRig {
  explicit BufferRig(uint64_t max_bytes, MemoryBudget* memory = nullptr) {
    StagingBuffer::Config c;
    c.max_bytes = max_bytes;
    c.ttl = 10s;
    c.memory = memory;
    buffer = std::make_unique<StagingBuffer>(c, clock, registry, metrics::Labels{});
  }
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<StagingBuffer> buffer;
};

TEST(StagingBuffer, ServesABlockOnceAndOnlyForItsVersion) {
  BufferRig rig(8 * kBlock);
  const BlockKey v1{1, 5, 100, 0}, v2{1, 5, 101, 0};
  ASSERT_TRUE(rig.buffer->Put(v1, Bytes(kBlock, 'a')));
  EXPECT_TRUE(rig.buffer->Contains(v1));
  EXPECT_FALSE(rig.buffer->Take(v2));  // the file changed: another version, not served
  auto got = rig.buffer->Take(v1);
  ASSERT_TRUE(got);
  EXPECT_EQ((**got)[0], 'a');
  EXPECT_FALSE(rig.buffer->Take(v1));  // once
  auto s = rig.buffer->GetStats();
  EXPECT_EQ(s.staged, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_EQ(s.bytes, 0u);
}

TEST(StagingBuffer, HoldsAtMostItsBoundDroppingTheOldestAndAccountsTheBudget) {
  MemoryBudget memory(MemoryBudget::Config{64 * kBlock, 0.25});
  BufferRig rig(3 * kBlock, &memory);
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 5, 1, i}, Bytes(kBlock, 'x')));
    EXPECT_LE(rig.buffer->GetStats().bytes, 3u * kBlock);
    EXPECT_EQ(memory.used(MemoryBudget::Use::kStaged), rig.buffer->GetStats().bytes);
  }
  EXPECT_FALSE(rig.buffer->Contains(BlockKey{1, 5, 1, 0}));
  EXPECT_FALSE(rig.buffer->Contains(BlockKey{1, 5, 1, 1}));
  EXPECT_TRUE(rig.buffer->Contains(BlockKey{1, 5, 1, 4}));
  EXPECT_EQ(rig.buffer->GetStats().dropped_full, 2u);
  EXPECT_FALSE(rig.buffer->HasRoom(kBlock, 0));
  rig.buffer.reset();  // unmount: everything given back
  EXPECT_EQ(memory.used(MemoryBudget::Use::kStaged), 0u);
}

TEST(StagingBuffer, ARefusalOfTheMemoryBudgetDropsTheBlock) {
  // Background takers stop at 3/4 of 8 blocks = 6 blocks.
  MemoryBudget memory(MemoryBudget::Config{8 * kBlock, 0.25});
  ASSERT_TRUE(memory.TryAcquire(MemoryBudget::Use::kPrefetch, 6 * kBlock));
  BufferRig rig(8 * kBlock, &memory);
  EXPECT_FALSE(rig.buffer->Put(BlockKey{1, 5, 1, 0}, Bytes(kBlock, 'x')));
  EXPECT_EQ(rig.buffer->GetStats().memory_refused, 1u);
  EXPECT_EQ(rig.buffer->GetStats().blocks, 0u);
  memory.Release(MemoryBudget::Use::kPrefetch, 6 * kBlock);
}

TEST(StagingBuffer, ExpiresUnreadBlocksAndDropsEvictedFiles) {
  BufferRig rig(16 * kBlock);
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 5, 1, 0}, Bytes(kBlock, 'x')));
  rig.clock.Advance(6s);
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 6, 1, 0}, Bytes(kBlock, 'y')));
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 7, 1, 0}, Bytes(kBlock, 'z')));
  ASSERT_TRUE(rig.buffer->Put(BlockKey{2, 7, 1, 0}, Bytes(kBlock, 'w')));  // another volume
  rig.clock.Advance(5s);
  EXPECT_FALSE(rig.buffer->Take(BlockKey{1, 5, 1, 0}));  // 11 s old: expired
  EXPECT_EQ(rig.buffer->GetStats().expired, 1u);
  EXPECT_EQ(rig.buffer->DropFile(1, 6), 1u);
  EXPECT_FALSE(rig.buffer->Contains(BlockKey{1, 6, 1, 0}));
  EXPECT_EQ(rig.buffer->DropFile(1, 0), 1u);  // the rest of volume 1
  EXPECT_TRUE(rig.buffer->Contains(BlockKey{2, 7, 1, 0}));
  EXPECT_EQ(rig.buffer->GetStats().evicted, 2u);
}

// A set prediction's block (held) is read at any time in the epoch: it has no ttl, and leaves
// when taken, when the prefetcher gives it up (Drop), or for room after every unheld block.
TEST(StagingBuffer, AHeldBlockOutlivesTheTtlUntilTakenOrGivenUp) {
  BufferRig rig(3 * kBlock);
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 5, 1, 0}, Bytes(kBlock, 'h'), /*held=*/true));
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 6, 1, 0}, Bytes(kBlock, 'g'), /*held=*/true));
  rig.clock.Advance(11s);  // past the 10 s ttl
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 7, 1, 0}, Bytes(kBlock, 'u')));
  EXPECT_FALSE(rig.buffer->HasRoom(kBlock, 0));
  auto got = rig.buffer->Take(BlockKey{1, 5, 1, 0});
  ASSERT_TRUE(got);
  EXPECT_EQ((**got)[0], 'h');
  EXPECT_EQ(rig.buffer->GetStats().expired, 0u);
  // Room for a newer block is taken from the unheld ones first.
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 8, 1, 0}, Bytes(kBlock, 'u')));
  ASSERT_TRUE(rig.buffer->Put(BlockKey{1, 9, 1, 0}, Bytes(kBlock, 'u')));
  EXPECT_FALSE(rig.buffer->Contains(BlockKey{1, 7, 1, 0}));
  EXPECT_TRUE(rig.buffer->Contains(BlockKey{1, 6, 1, 0}));
  EXPECT_EQ(rig.buffer->GetStats().dropped_full, 1u);
  // Given up by the prefetcher: dropped unread, counted as expired.
  EXPECT_TRUE(rig.buffer->Drop(BlockKey{1, 6, 1, 0}));
  EXPECT_FALSE(rig.buffer->Drop(BlockKey{1, 6, 1, 0}));
  EXPECT_EQ(rig.buffer->GetStats().expired, 1u);
  EXPECT_EQ(rig.buffer->GetStats().blocks, 2u);
  EXPECT_EQ(rig.buffer->GetStats().bytes, 2u * kBlock);
}

// An in-memory BlockCache with a byte quota and a real eviction policy (as the slot-file
// cache: the policy picks victims under the cache's lock, refuses by returning nullopt).
class PolicyCache final : public BlockCache {
 public:
  PolicyCache(uint64_t capacity, std::unique_ptr<EvictionPolicy> policy)
      : capacity_(capacity), policy_(std::move(policy)) {}
  Result<size_t> Get(const BlockKey& key, char* out, size_t capacity) override {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return Fail(Code::kNotFound, "not cached");
    if (it->second.data.size() > capacity) return Fail(Code::kInternal, "small buffer");
    std::memcpy(out, it->second.data.data(), it->second.data.size());
    policy_->OnAccess(key);
    if (!it->second.read && it->second.origin != kDemand && listener_ != nullptr) {
      listener_->OnPrefetchUsed(key, it->second.origin);
    }
    it->second.read = true;
    return it->second.data.size();
  }
  Status Put(const BlockKey& key, const char* data, size_t length,
             const AdmissionHint& hint) override {
    std::lock_guard lock(mu_);
    EraseLocked(key, false);
    while (used_ + length > capacity_) {
      auto victim = policy_->PickVictim(key, hint);
      if (!victim) {
        ++rejected_;
        return Fail(Code::kNoSpace, "admission refused");
      }
      EraseLocked(*victim, true);
    }
    blocks_[key] = Block{std::vector<char>(data, data + length), hint.origin, false};
    used_ += length;
    policy_->OnInsert(key, hint);
    if (hint.origin == kDemand) ++demand_puts_;
    return Ok();
  }
  bool Contains(const BlockKey& key) const override {
    std::lock_guard lock(mu_);
    return blocks_.contains(key);
  }
  bool WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const override {
    std::lock_guard lock(mu_);
    return blocks_.contains(key) || used_ + kBlock <= capacity_ || policy_->WouldAdmit(hint);
  }
  uint64_t FreeBytes() const override {
    std::lock_guard lock(mu_);
    return capacity_ - used_;
  }
  uint64_t Evict(uint64_t volume, uint64_t file_id) override {
    std::lock_guard lock(mu_);
    std::vector<BlockKey> drop;
    for (const auto& [k, b] : blocks_) {
      if (k.volume == volume && (file_id == 0 || k.file_id == file_id)) drop.push_back(k);
    }
    for (const auto& k : drop) EraseLocked(k, false);
    return drop.size();
  }
  uint64_t VolumeBytes(uint64_t) const override {
    std::lock_guard lock(mu_);
    return used_;
  }
  BlockCacheStats Stats() const override {
    std::lock_guard lock(mu_);
    BlockCacheStats s;
    s.capacity_bytes = capacity_;
    s.used_bytes = used_;
    s.blocks = blocks_.size();
    s.rejected_admissions = rejected_;
    return s;
  }
  uint32_t block_size() const override { return kBlock; }
  Status Close() override { return Ok(); }
  void SetListener(CacheListener* listener) override {
    std::lock_guard lock(mu_);
    listener_ = listener;
  }
  uint64_t demand_puts() const {
    std::lock_guard lock(mu_);
    return demand_puts_;
  }

 private:
  struct Block {
    std::vector<char> data;
    ExpertId origin = kDemand;
    bool read = false;
  };
  void EraseLocked(const BlockKey& key, bool evicted) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return;
    if (evicted && !it->second.read && it->second.origin != kDemand && listener_ != nullptr) {
      listener_->OnPrefetchWasted(key, it->second.origin);
    }
    used_ -= it->second.data.size();
    policy_->OnRemove(key);
    blocks_.erase(it);
  }
  mutable std::mutex mu_;
  const uint64_t capacity_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unordered_map<BlockKey, Block, BlockKeyHash> blocks_;
  uint64_t used_ = 0;
  uint64_t rejected_ = 0;
  uint64_t demand_puts_ = 0;
  CacheListener* listener_ = nullptr;
};

// The fetcher over a cache of `cache_blocks` blocks (nothrash) and the fake hub.
struct StagingRig {
  explicit StagingRig(uint64_t cache_blocks, uint64_t staging_blocks,
                      MemoryBudget* memory = nullptr)
      : cache(cache_blocks * kBlock, std::make_unique<NoThrashPolicy>()) {
    for (int i = 0; i < 16; ++i) remote.PutFile(Name(i), std::string(kBlock, 'a' + i));
    BlockFetcher::Config c;
    c.block_size = kBlock;
    c.prefetch_bytes_max = 64 * kBlock;
    c.staging_bytes_max = staging_blocks * kBlock;
    c.memory = memory;
    c.clock = &clock;
    fetcher = std::make_unique<BlockFetcher>(remote, &cache, 7, c, registry, metrics::Labels{});
  }
  ~StagingRig() {
    fetcher.reset();
    remote.WaitIdle();
  }
  static std::string Name(int i) { return "f" + std::to_string(i); }
  FileRef File(int i) {
    auto a = remote.Stat(Name(i));
    return FileRef{Name(i), a->file_id, a->ContentVersion(), a->size};
  }
  void Prefetch(const FileRef& f) {
    ASSERT_TRUE(fetcher->Prefetch(PrefetchRequest{f.path, f.file_id, f.version, f.size, 0, 1,
                                                  /*predicted_use=*/1, /*expert=*/1}));
    Settle();
  }
  void Settle() {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (fetcher->PrefetchBytesInFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    remote.WaitIdle();
  }
  // Fills the cache with files [0, n) read by a reader.
  void Fill(int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(fetcher->GetBlocks(File(i), 0, 1)[0]);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (cache.FreeBytes() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
  FakeRemoteFs remote;
  PolicyCache cache;
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<BlockFetcher> fetcher;
};

TEST(BlockFetcherStaging, APrefetchIntoAFullCacheIsStagedServedOnceThenCachedAsDemand) {
  StagingRig rig(4, 8);
  rig.Fill(4);
  const int before_reads = rig.remote.reads;
  auto f = rig.File(9);
  EXPECT_TRUE(rig.fetcher->WouldAdmit(BlockKey{7, f.file_id, f.version, 0}, {1, 1}));
  rig.Prefetch(f);
  EXPECT_EQ(rig.remote.reads, before_reads + 1);
  EXPECT_TRUE(rig.fetcher->Has(BlockKey{7, f.file_id, f.version, 0}));
  EXPECT_FALSE(rig.fetcher->Cached(f, 0));  // nothing cached was evicted for it
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rig.fetcher->Cached(rig.File(i), 0)) << i;
  EXPECT_EQ(rig.fetcher->staging_stats().blocks, 1u);

  uint64_t hits = 0;
  auto r = rig.fetcher->GetBlocks(f, 0, 1, &hits);
  ASSERT_TRUE(r[0]);
  EXPECT_EQ(std::string((*r[0])->begin(), (*r[0])->end()), std::string(kBlock, 'a' + 9));
  EXPECT_EQ(hits, 1u);  // the reader did not wait for the hub
  EXPECT_EQ(rig.remote.reads, before_reads + 1);
  auto s = rig.fetcher->staging_stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.blocks, 0u);
  // Then queued for the cache as a reader's block (the policy decides as for a demand miss).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (rig.cache.demand_puts() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(rig.cache.demand_puts(), 5u);
}

TEST(BlockFetcherStaging, WarmMovesAStagedBlockIntoTheCacheWithoutTheHub) {
  StagingRig rig(4, 8);
  rig.Fill(4);
  auto f = rig.File(9);
  rig.Prefetch(f);
  ASSERT_EQ(rig.fetcher->staging_stats().blocks, 1u);
  const int reads = rig.remote.reads;
  auto bytes = rig.fetcher->Warm(f, 0, 1);
  ASSERT_TRUE(bytes);
  EXPECT_EQ(*bytes, 0u);  // nothing read from the hub
  EXPECT_EQ(rig.remote.reads, reads);
  EXPECT_TRUE(rig.fetcher->Cached(f, 0));
  EXPECT_EQ(rig.fetcher->staging_stats().blocks, 0u);
}

TEST(BlockFetcherStaging, AStagedBlockOfAFileChangedOnTheHubIsNotServed) {
  StagingRig rig(4, 8);
  rig.Fill(4);
  auto old_ref = rig.File(9);
  rig.Prefetch(old_ref);
  ASSERT_EQ(rig.fetcher->staging_stats().blocks, 1u);
  rig.remote.PutFile(StagingRig::Name(9), std::string(kBlock, 'N'));  // a new version
  auto new_ref = rig.File(9);
  ASSERT_NE(new_ref.version, old_ref.version);
  const int reads = rig.remote.reads;
  auto r = rig.fetcher->GetBlocks(new_ref, 0, 1);
  ASSERT_TRUE(r[0]);
  EXPECT_EQ(std::string((*r[0])->begin(), (*r[0])->end()), std::string(kBlock, 'N'));
  EXPECT_EQ(rig.remote.reads, reads + 1);
  EXPECT_EQ(rig.fetcher->staging_stats().hits, 0u);
}

TEST(BlockFetcherStaging, EvictDropsStagedBlocksAndGivesTheirMemoryBack) {
  MemoryBudget memory(MemoryBudget::Config{256 * kBlock, 0.25});
  StagingRig rig(4, 8, &memory);
  rig.Fill(4);
  auto f9 = rig.File(9), f10 = rig.File(10);
  rig.Prefetch(f9);
  rig.Prefetch(f10);
  ASSERT_EQ(rig.fetcher->staging_stats().blocks, 2u);
  EXPECT_EQ(memory.used(MemoryBudget::Use::kStaged), 2u * kBlock);
  EXPECT_EQ(rig.fetcher->Evict(f9.file_id), 1u);  // staged, nothing cached
  EXPECT_FALSE(rig.fetcher->Has(BlockKey{7, f9.file_id, f9.version, 0}));
  EXPECT_TRUE(rig.fetcher->Has(BlockKey{7, f10.file_id, f10.version, 0}));
  const int reads = rig.remote.reads;
  ASSERT_TRUE(rig.fetcher->GetBlocks(f9, 0, 1)[0]);
  EXPECT_EQ(rig.remote.reads, reads + 1);  // from the hub again
  rig.fetcher->Evict(0);
  EXPECT_EQ(rig.fetcher->staging_stats().blocks, 0u);
  rig.Settle();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (memory.used() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(memory.used(MemoryBudget::Use::kStaged), 0u);
}

TEST(BlockFetcherStaging, StagingIsBoundedAndAFullBufferDeclinesFurtherPrefetches) {
  MemoryBudget memory(MemoryBudget::Config{256 * kBlock, 0.25});
  StagingRig rig(4, 3, &memory);
  rig.Fill(4);
  for (int i = 4; i < 16; ++i) {
    auto f = rig.File(i);
    if (!rig.fetcher->WouldAdmit(BlockKey{7, f.file_id, f.version, 0}, {1, 1})) continue;
    rig.Prefetch(f);
    EXPECT_LE(memory.used(MemoryBudget::Use::kStaged), 3u * kBlock);
  }
  EXPECT_EQ(rig.fetcher->staging_stats().blocks, 3u);
  EXPECT_EQ(rig.fetcher->staging_stats().bytes, 3u * kBlock);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rig.fetcher->Cached(rig.File(i), 0)) << i;
  rig.fetcher.reset();  // unmount
  EXPECT_EQ(memory.used(MemoryBudget::Use::kStaged), 0u);
}

// The whole read path over a dataset twice the cache (nothrash), read in a new shuffled
// order each epoch with the prefetcher on: after the first epoch, each epoch reads from the
// hub only the part that does not fit (within 5 %), and every byte read is right.
struct EpochRig {
  static constexpr int kFiles = 256;
  static constexpr uint64_t kCacheBlocks = kFiles / 2;
  explicit EpochRig(uint64_t staging_bytes,
                    std::chrono::milliseconds staging_ttl = std::chrono::minutes(2))
      : cache(kCacheBlocks * kBlock, std::make_unique<NoThrashPolicy>()) {
    for (int i = 0; i < kFiles; ++i) remote.PutFile(Name(i), Content(i));
    meta = std::make_unique<MetadataCache>(remote, MetadataCache::Config{}, clock);
    EXPECT_TRUE(meta->Init());
    meta->StartWalk();
    EXPECT_TRUE(meta->WaitWalk(10s));
    BlockFetcher::Config fc;
    fc.block_size = kBlock;
    fc.prefetch_bytes_max = 64 * kBlock;
    fc.staging_bytes_max = staging_bytes;
    fc.staging_ttl = staging_ttl;
    fc.clock = &clock;
    fetcher = std::make_unique<BlockFetcher>(remote, &cache, VolumeKey("vol"), fc, registry,
                                             metrics::Labels{{"volume", "vol"}});
    PrefetchDriver::Config pc;
    pc.volume_id = "vol";
    pc.mode = PrefetchMode::kAuto;
    pc.read_ahead_max_bytes = 8 * kBlock;
    pc.space_budget_bytes = kCacheBlocks / 4 * kBlock;  // as the agent: a quarter of the cache
    pc.max_inflight_bytes = 16 * kBlock;
    pc.tick_interval = 0ms;
    driver = std::make_unique<PrefetchDriver>(pc, *fetcher, clock, meta.get(), &registry);
    cache.SetListener(driver->listener());
    VolumeFs::Config vc;
    vc.volume_id = "vol";
    fs = std::make_unique<VolumeFs>(vc, remote, *meta, *fetcher, driver.get(), clock);
  }
  ~EpochRig() {
    cache.SetListener(nullptr);
    fs.reset();
    driver.reset();
    fetcher.reset();
    remote.WaitIdle();
  }
  static std::string Name(int i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "train/f%03d", i);
    return buf;
  }
  static std::string Content(int i) {
    std::string s(kBlock, '\0');
    for (size_t j = 0; j < s.size(); ++j) s[j] = static_cast<char>('a' + (i * 7 + j) % 26);
    return s;
  }
  void Settle() {
    driver->Tick();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (fetcher->PrefetchBytesInFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
    }
    remote.WaitIdle();
  }
  // One epoch in a shuffled order; returns the hub bytes it read.
  uint64_t Epoch(std::mt19937& rng, int* wrong) {
    std::vector<int> order(kFiles);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const uint64_t before = fetcher->hub_read_bytes();
    for (int i : order) {
      auto ino = meta->Resolve(Name(i));
      if (!ino) return 0;
      auto f = fs->Open(ino->ino, O_RDONLY);
      if (!f) return 0;
      std::string out(kBlock, '\0');
      auto n = fs->Read(f->handle, 0, out.size(), out.data());
      if (!n || *n != kBlock || out != Content(i)) ++*wrong;
      EXPECT_TRUE(fs->Release(f->handle));
      clock.Advance(10ms);
      Settle();
    }
    return fetcher->hub_read_bytes() - before;
  }

  FakeRemoteFs remote;
  PolicyCache cache;
  ManualClock clock;
  metrics::Registry registry;
  std::unique_ptr<MetadataCache> meta;
  std::unique_ptr<BlockFetcher> fetcher;
  std::unique_ptr<PrefetchDriver> driver;
  std::unique_ptr<VolumeFs> fs;
};

// Epochs 2 and 3 read at most 1.05x the part of the dataset that does not fit from the hub.
// Under ThreadSanitizer (threads several times slower, other interleavings) 1.055x was seen
// once: that build allows 1.10x.
#if defined(__SANITIZE_THREAD__)
constexpr double kLaterEpochBound = 1.10;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr double kLaterEpochBound = 1.10;
#else
constexpr double kLaterEpochBound = 1.05;
#endif
#else
constexpr double kLaterEpochBound = 1.05;
#endif
void ExpectLaterEpochsReadTheUncachedPart(EpochRig& rig, std::mt19937& rng, int* wrong) {
  const uint64_t not_fitting = (EpochRig::kFiles - EpochRig::kCacheBlocks) * kBlock;
  for (int epoch = 2; epoch <= 3; ++epoch) {
    const uint64_t hub = rig.Epoch(rng, wrong);
    EXPECT_LE(static_cast<double>(hub), kLaterEpochBound * static_cast<double>(not_fitting))
        << "epoch " << epoch << ": " << hub / kBlock << " blocks from the hub, "
        << not_fitting / kBlock << " do not fit";
  }
}

TEST(BlockFetcherStaging, ADatasetTwiceTheCacheReadsOnlyTheUncachedPartPerLaterEpoch) {
  EpochRig rig(64 * kBlock);
  std::mt19937 rng(1);
  int wrong = 0;
  const uint64_t first = rig.Epoch(rng, &wrong);
  // About the whole dataset, once.
  EXPECT_LE(static_cast<double>(first), 1.05 * EpochRig::kFiles * kBlock);
  ExpectLaterEpochsReadTheUncachedPart(rig, rng, &wrong);
  EXPECT_EQ(wrong, 0);
  // The prefetcher did work in the later epochs: reads were served from staging.
  EXPECT_GT(rig.fetcher->staging_stats().hits, 0u);
}

// The same with epochs (2.56 s of the rig's clock) longer than the staging ttl (1 s), as the
// benchmark's 20000 samples (157 s epochs, 120 s ttl): the working set's blocks staged early
// in an epoch wait for a shuffled loader past the ttl. Dropped unread, each was then read
// from the hub a second time (about 1.3x the part that does not fit here); held until read or
// given up, none is.
TEST(BlockFetcherStaging, EpochsLongerThanTheStagingTtlDropNoWorkingSetBlockUnread) {
  EpochRig rig(64 * kBlock, 1s);
  std::mt19937 rng(1);
  int wrong = 0;
  rig.Epoch(rng, &wrong);
  ExpectLaterEpochsReadTheUncachedPart(rig, rng, &wrong);
  EXPECT_EQ(wrong, 0);
  const StagingBuffer::Stats st = rig.fetcher->staging_stats();
  EXPECT_GT(st.hits, 0u);
  EXPECT_LE(st.expired, st.staged / 50)
      << st.expired << " of " << st.staged << " staged blocks dropped unread";
}

}  // namespace
}  // namespace spoke::agent
