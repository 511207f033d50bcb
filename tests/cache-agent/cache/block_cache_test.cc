#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "cache-agent/cache/block_cache_factory.h"
#include "cache-agent/cache/lru_policy.h"
#include "cache-agent/cache/slot_file_block_cache.h"
#include "common/metrics.h"
#include "tests/cache-agent/cache/cache_test_util.h"

namespace spoke::agent {
namespace {

using testing::CopyDataFiles;
using testing::FaultyBlockStore;
using testing::FindSlot;
using testing::Pattern;
using testing::ReadRaw;
using testing::TempDir;
using testing::WriteRaw;

constexpr uint32_t kBlock = 64 << 10;
constexpr uint64_t kSlotSize = kHeaderBytes + kBlock;

BlockKey K(uint64_t i, uint64_t volume = 7, uint64_t file = 42) {
  return BlockKey{volume, file, 3, i};
}

BlockCache::Config Cfg(const std::string& dir, uint64_t blocks) {
  BlockCache::Config c;
  c.dir = dir;
  c.capacity_bytes = blocks * kBlock;
  c.block_size = kBlock;
  c.io_depth = 16;
  return c;
}

struct Opened {
  std::unique_ptr<SlotFileBlockCache> cache;
  FaultyBlockStore* faulty = nullptr;  // owned by cache
};

Opened Open(const BlockCache::Config& cfg, metrics::Registry* reg = nullptr,
            SlotFileBlockCache::Options opts = SlotFileBlockCache::Options()) {
  Opened o;
  auto factory = [&o](const std::string& dir, uint64_t n,
                      uint32_t size) -> Result<std::unique_ptr<BlockStore>> {
    SPOKE_TRY(auto s, UringBlockStore::Open(dir, n, size, {}));
    auto f = std::make_unique<FaultyBlockStore>(std::move(s));
    o.faulty = f.get();
    return std::unique_ptr<BlockStore>(std::move(f));
  };
  auto c = SlotFileBlockCache::Open(cfg, factory, MakeLruPolicy(), reg, opts);
  EXPECT_TRUE(c) << c.error().ToString();
  if (c) o.cache = std::move(*c);
  return o;
}

Status PutK(BlockCache& c, const BlockKey& k, size_t len = kBlock, AdmissionHint h = {}) {
  auto d = Pattern(k, len);
  return c.Put(k, d.data(), len, h);
}

// Reads `k` into an aligned (zero-copy path) or unaligned (bounce path) buffer and checks it.
::testing::AssertionResult Serves(BlockCache& c, const BlockKey& k, size_t len = kBlock,
                                  bool aligned = true) {
  AlignedBuffer abuf = AllocateAligned(kBlock + kIoAlign);
  char* out = aligned ? abuf.get() : abuf.get() + 1;
  auto r = c.Get(k, out, kBlock);
  if (!r) return ::testing::AssertionFailure() << "Get: " << r.error().ToString();
  if (*r != len) return ::testing::AssertionFailure() << "length " << *r << " != " << len;
  if (std::memcmp(out, Pattern(k, len).data(), len) != 0) {
    return ::testing::AssertionFailure() << "wrong contents";
  }
  return ::testing::AssertionSuccess();
}

bool Misses(BlockCache& c, const BlockKey& k) {
  AlignedBuffer out = AllocateAligned(kBlock);
  auto r = c.Get(k, out.get(), kBlock);
  return !r && r.error().code() == Code::kNotFound;
}

class Recorder : public CacheListener {
 public:
  void OnPrefetchUsed(const BlockKey& k, ExpertId e) override {
    std::lock_guard l(mu);
    used.emplace_back(k, e);
  }
  void OnPrefetchWasted(const BlockKey& k, ExpertId e) override {
    std::lock_guard l(mu);
    wasted.emplace_back(k, e);
  }
  std::mutex mu;
  std::vector<std::pair<BlockKey, ExpertId>> used, wasted;
};

int64_t GaugeValue(metrics::Registry& r, const std::string& name) {
  return r.GetGauge(name, "").Value();
}
uint64_t CounterValue(metrics::Registry& r, const std::string& name) {
  return r.GetCounter(name, "").Value();
}

// ---------------------------------------------------------------------------------------------
// On every filesystem: /tmp and /var/tmp (O_DIRECT on a real disk), /dev/shm (buffered).

class BlockCacheFsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockCacheFsTest, PutGetRoundTripFullAndShortBlocks) {
  TempDir dir(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0)));
  ASSERT_TRUE(PutK(*cache, K(1), 12345));  // a file's short last block
  ASSERT_TRUE(PutK(*cache, K(2), 3 * kIoAlign));
  EXPECT_TRUE(Serves(*cache, K(0)));
  EXPECT_TRUE(Serves(*cache, K(0), kBlock, /*aligned=*/false));
  EXPECT_TRUE(Serves(*cache, K(1), 12345));
  EXPECT_TRUE(Serves(*cache, K(1), 12345, /*aligned=*/false));
  EXPECT_TRUE(Serves(*cache, K(2), 3 * kIoAlign));
  EXPECT_TRUE(Misses(*cache, K(3)));
  EXPECT_TRUE(cache->Contains(K(1)));
  EXPECT_FALSE(cache->Contains(K(3)));
  // A Put of a cached key is a no-op that keeps the original.
  std::vector<char> other(kBlock, 'z');
  EXPECT_TRUE(cache->Put(K(0), other.data(), kBlock, {}));
  EXPECT_TRUE(Serves(*cache, K(0)));
  auto s = cache->Stats();
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.used_bytes, kBlock + 12345u + 3 * kIoAlign);
  EXPECT_EQ(s.hits, 6u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(cache->VolumeBytes(7), s.used_bytes);
  EXPECT_EQ(cache->VolumeBytes(8), 0u);
  // A buffer too small for the block is the caller's error, not a miss.
  std::vector<char> small(100);
  EXPECT_EQ(cache->Get(K(0), small.data(), small.size()).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(cache->Put(K(9), other.data(), kBlock + 1, {}).error().code(), Code::kInvalidArgument);
}

// WouldAdmit answers what Put would do, without doing it: free room admits; a full cache
// admits demand, and a prefetch only when the policy would find it a victim.
TEST_P(BlockCacheFsTest, WouldAdmitMatchesPutAndChangesNothing) {
  TempDir dir(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  const AdmissionHint soon{1, 5};
  const AdmissionHint late{1, 500};
  const AdmissionHint demand{};
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(cache->WouldAdmit(K(i), late)) << "free room admits";
    ASSERT_TRUE(PutK(*cache, K(i), kBlock, soon));  // unread prefetches, due soon
  }
  // Full of unread prefetches due sooner: LRU refuses a later prefetch, admits demand.
  EXPECT_FALSE(cache->WouldAdmit(K(10), late));
  EXPECT_TRUE(cache->WouldAdmit(K(10), demand));
  EXPECT_TRUE(cache->WouldAdmit(K(2), late)) << "a cached key is admitted (a no-op Put)";
  EXPECT_EQ(cache->Stats().blocks, 4u);
  EXPECT_EQ(cache->Stats().rejected_admissions, 0u) << "asking is not refusing";
  EXPECT_EQ(PutK(*cache, K(10), kBlock, late).error().code(), Code::kNoSpace);
  EXPECT_TRUE(PutK(*cache, K(11), kBlock, demand));
}

TEST_P(BlockCacheFsTest, CorruptDataIsCaughtDroppedAndRefetchable) {
  TempDir dir(GetParam());
  metrics::Registry reg;
  auto [cache, faulty] = Open(Cfg(dir.path(), 4), &reg);
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0)));
  ASSERT_TRUE(PutK(*cache, K(1), 5000));
  auto slot = FindSlot(dir.path(), kBlock, 4, K(1));
  ASSERT_TRUE(slot);
  // Flip one data byte on disk.
  const uint64_t off = *slot * kSlotSize + kHeaderBytes + 4321;
  auto byte = ReadRaw(dir.path(), off, 1);
  byte[0] ^= 0x40;
  WriteRaw(dir.path(), off, byte);

  EXPECT_TRUE(Misses(*cache, K(1)));
  EXPECT_EQ(cache->Stats().checksum_failures, 1u);
  EXPECT_EQ(CounterValue(reg, "spoke_checksum_failures_total"), 1u);
  EXPECT_FALSE(cache->Contains(K(1)));
  const uint64_t reads = faulty->reads.load();
  EXPECT_TRUE(Misses(*cache, K(1)));  // dropped: a plain miss, no device read
  EXPECT_EQ(faulty->reads.load(), reads);
  EXPECT_EQ(cache->Stats().checksum_failures, 1u);
  EXPECT_TRUE(Serves(*cache, K(0)));  // the neighbour is fine
  ASSERT_TRUE(PutK(*cache, K(1), 5000));
  EXPECT_TRUE(Serves(*cache, K(1), 5000));
  EXPECT_EQ(cache->Stats().blocks, 2u);
}

TEST_P(BlockCacheFsTest, ValidBlockOfAnotherKeyInTheSlotIsNotServed) {
  TempDir dir(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0)));
  ASSERT_TRUE(PutK(*cache, K(1)));
  auto s0 = FindSlot(dir.path(), kBlock, 4, K(0));
  auto s1 = FindSlot(dir.path(), kBlock, 4, K(1));
  ASSERT_TRUE(s0 && s1);
  // Slot of K(0) now holds a perfectly valid block (header + data) of K(1).
  WriteRaw(dir.path(), *s0 * kSlotSize, ReadRaw(dir.path(), *s1 * kSlotSize, kSlotSize));
  EXPECT_TRUE(Misses(*cache, K(0)));
  EXPECT_EQ(cache->Stats().checksum_failures, 1u);
  EXPECT_TRUE(Serves(*cache, K(1)));
}

TEST_P(BlockCacheFsTest, HeaderNamingAnotherKeyIsNotServed) {
  TempDir dir(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0)));
  auto slot = FindSlot(dir.path(), kBlock, 4, K(0));
  ASSERT_TRUE(slot);
  // A well-formed header (valid checksums, same generation and length, data intact) that
  // names another key: only the key comparison can catch it.
  auto raw = ReadRaw(dir.path(), *slot * kSlotSize, kHeaderBytes);
  auto h = DecodeHeader(raw.data(), kBlock);
  ASSERT_TRUE(h);
  h->key = K(1);
  std::vector<char> forged(kHeaderBytes);
  EncodeHeader(*h, forged.data());
  WriteRaw(dir.path(), *slot * kSlotSize, forged);
  EXPECT_TRUE(Misses(*cache, K(0)));
  EXPECT_EQ(cache->Stats().checksum_failures, 1u);
  EXPECT_TRUE(Misses(*cache, K(1)));
}

TEST_P(BlockCacheFsTest, CorruptHeaderIsCaught) {
  TempDir dir(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0)));
  auto slot = FindSlot(dir.path(), kBlock, 4, K(0));
  ASSERT_TRUE(slot);
  const uint64_t off = *slot * kSlotSize + offsetof(BlockHeader, length);
  auto b = ReadRaw(dir.path(), off, 1);
  b[0] ^= 1;  // length 65536 -> 65537: only the header checksum notices
  WriteRaw(dir.path(), off, b);
  EXPECT_TRUE(Misses(*cache, K(0)));
  EXPECT_EQ(cache->Stats().checksum_failures, 1u);
}

TEST_P(BlockCacheFsTest, RestartAfterCleanCloseLoadsIndexAndServesAll) {
  TempDir dir(GetParam());
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 8));
    ASSERT_TRUE(cache);
    EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kFresh);
    for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(PutK(*cache, K(i), kBlock - i * 1000));
    ASSERT_TRUE(cache->Close());
    EXPECT_TRUE(std::filesystem::exists(dir.sub("index")));
    EXPECT_TRUE(std::filesystem::exists(dir.sub("clean")));
  }
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kIndex);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("clean")));  // a crash from now on rescans
  EXPECT_EQ(faulty->reads.load(), 0u);                      // no scan
  EXPECT_EQ(cache->Stats().blocks, 6u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_TRUE(Serves(*cache, K(i), kBlock - i * 1000));
  // New Puts get new generations and fresh slots.
  ASSERT_TRUE(PutK(*cache, K(6)));
  ASSERT_TRUE(PutK(*cache, K(7)));
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(cache->Contains(K(i)));
}

TEST_P(BlockCacheFsTest, CrashWithoutCloseRebuildsByScanning) {
  TempDir dir(GetParam());
  TempDir crashed(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(PutK(*cache, K(i), 7000 + i));
  CopyDataFiles(dir.path(), crashed.path());  // the state a crash leaves right now

  auto [after, faulty2] = Open(Cfg(crashed.path(), 8));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->recovery(), SlotFileBlockCache::Recovery::kScan);
  EXPECT_EQ(after->Stats().blocks, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(Serves(*after, K(i), 7000 + i));
  EXPECT_EQ(after->Stats().checksum_failures, 0u);
}

TEST_P(BlockCacheFsTest, ScanKeepsTheNewestGenerationOfAKey) {
  TempDir dir(GetParam());
  TempDir crashed(GetParam());
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(5)));  // slot 0
  ASSERT_TRUE(PutK(*cache, K(0)));  // slot 1, older generation
  auto s1 = FindSlot(dir.path(), kBlock, 4, K(0));
  ASSERT_TRUE(s1);
  const auto old_copy = ReadRaw(dir.path(), *s1 * kSlotSize, kSlotSize);
  // Drop it (bad byte), then store K(0) again (shorter): a newer generation in some slot.
  auto b = ReadRaw(dir.path(), *s1 * kSlotSize + kHeaderBytes, 1);
  b[0] ^= 1;
  WriteRaw(dir.path(), *s1 * kSlotSize + kHeaderBytes, b);
  ASSERT_TRUE(Misses(*cache, K(0)));
  ASSERT_TRUE(PutK(*cache, K(0), 1000));
  // The older, still valid copy lands in slot 0, scanned first.
  WriteRaw(dir.path(), 0, old_copy);
  CopyDataFiles(dir.path(), crashed.path());
  auto [after, f2] = Open(Cfg(crashed.path(), 4));
  ASSERT_TRUE(after);
  ASSERT_EQ(after->recovery(), SlotFileBlockCache::Recovery::kScan);
  EXPECT_TRUE(Serves(*after, K(0), 1000));
  EXPECT_EQ(after->Stats().blocks, 1u);
}

TEST_P(BlockCacheFsTest, StaleIndexAfterCrashIsNotTrusted) {
  // Clean close, reopen (deletes `clean`), more Puts and evictions, crash: the old index
  // must not be used, or it would miss new blocks and point at reused slots.
  TempDir dir(GetParam());
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 3));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(PutK(*cache, K(i)));
    ASSERT_TRUE(cache->Close());
  }
  TempDir crashed(GetParam());
  std::filesystem::copy_file(dir.sub("index"), crashed.sub("index"));  // as if it were kept
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 3));
    ASSERT_TRUE(cache);
    ASSERT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kIndex);
    ASSERT_TRUE(PutK(*cache, K(10)));  // evicts K(0), reuses its slot
    CopyDataFiles(dir.path(), crashed.path());
    if (std::filesystem::exists(dir.sub("clean"))) {
      std::filesystem::copy_file(dir.sub("clean"), crashed.sub("clean"));
    }
  }
  auto [after, faulty] = Open(Cfg(crashed.path(), 3));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->recovery(), SlotFileBlockCache::Recovery::kScan);
  EXPECT_TRUE(Serves(*after, K(10)));
  EXPECT_TRUE(Misses(*after, K(0)));
  EXPECT_EQ(after->Stats().checksum_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Filesystems, BlockCacheFsTest, ::testing::ValuesIn(testing::TestBases()),
                         [](const auto& info) {
                           std::string n = info.param.substr(1);
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

// ---------------------------------------------------------------------------------------------

enum class IndexDamage { kFlippedByte, kTruncated, kMissing, kGarbage };

class BlockCacheIndexDamageTest : public ::testing::TestWithParam<IndexDamage> {};

TEST_P(BlockCacheIndexDamageTest, DamagedIndexFallsBackToScan) {
  TempDir dir;
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 8));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(PutK(*cache, K(i), 9000 + i));
    ASSERT_TRUE(cache->Close());
  }
  const std::string index = dir.sub("index");
  const auto size = std::filesystem::file_size(index);
  switch (GetParam()) {
    case IndexDamage::kFlippedByte: {
      std::FILE* f = std::fopen(index.c_str(), "r+b");
      std::fseek(f, static_cast<long>(size / 2), SEEK_SET);
      int c = std::fgetc(f);
      std::fseek(f, static_cast<long>(size / 2), SEEK_SET);
      std::fputc(c ^ 0x10, f);
      std::fclose(f);
      break;
    }
    case IndexDamage::kTruncated:
      std::filesystem::resize_file(index, size / 3);
      break;
    case IndexDamage::kMissing:
      std::filesystem::remove(index);
      break;
    case IndexDamage::kGarbage: {
      std::FILE* f = std::fopen(index.c_str(), "wb");
      std::fputs("not an index at all", f);
      std::fclose(f);
      break;
    }
  }
  ASSERT_TRUE(std::filesystem::exists(dir.sub("clean")));
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kScan);
  EXPECT_EQ(cache->Stats().blocks, 6u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_TRUE(Serves(*cache, K(i), 9000 + i));
}

INSTANTIATE_TEST_SUITE_P(Damage, BlockCacheIndexDamageTest,
                         ::testing::Values(IndexDamage::kFlippedByte, IndexDamage::kTruncated,
                                           IndexDamage::kMissing, IndexDamage::kGarbage),
                         [](const auto& info) {
                           switch (info.param) {
                             case IndexDamage::kFlippedByte:
                               return "FlippedByte";
                             case IndexDamage::kTruncated:
                               return "Truncated";
                             case IndexDamage::kMissing:
                               return "Missing";
                             case IndexDamage::kGarbage:
                               return "Garbage";
                           }
                           return "Unknown";
                         });

// ---------------------------------------------------------------------------------------------

TEST(BlockCacheTest, EvictsInLruOrderAndNeverExceedsQuota) {
  TempDir dir;
  metrics::Registry reg;
  auto [cache, faulty] = Open(Cfg(dir.path(), 4), &reg);
  ASSERT_TRUE(cache);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutK(*cache, K(i)));
  EXPECT_TRUE(Serves(*cache, K(0)));  // K(1) is now least recently used
  ASSERT_TRUE(PutK(*cache, K(4)));
  EXPECT_FALSE(cache->Contains(K(1)));
  for (uint64_t i : {0, 2, 3, 4}) EXPECT_TRUE(cache->Contains(K(i))) << i;
  EXPECT_EQ(cache->Stats().evictions, 1u);
  EXPECT_EQ(CounterValue(reg, "spoke_cache_evictions_total"), 1u);
  ASSERT_TRUE(PutK(*cache, K(5)));
  EXPECT_FALSE(cache->Contains(K(2)));
  for (uint64_t i = 6; i < 40; ++i) {
    ASSERT_TRUE(PutK(*cache, K(i)));
    auto s = cache->Stats();
    ASSERT_LE(s.blocks, 4u);
    ASSERT_LE(s.used_bytes, s.capacity_bytes);
    EXPECT_EQ(GaugeValue(reg, "spoke_cache_bytes"), static_cast<int64_t>(s.used_bytes));
  }
  for (uint64_t i = 36; i < 40; ++i) EXPECT_TRUE(Serves(*cache, K(i)));
  EXPECT_EQ(cache->Stats().evictions, 36u);
  EXPECT_EQ(GaugeValue(reg, "spoke_cache_capacity_bytes"), 4 * kBlock);
  EXPECT_EQ(std::filesystem::file_size(dir.sub("data.0")), 4 * kSlotSize);
}

TEST(BlockCacheTest, PrefetchIsRefusedRatherThanEvictAnUnreadPrefetchNeededSooner) {
  TempDir dir;
  auto [cache, faulty] = Open(Cfg(dir.path(), 2));
  ASSERT_TRUE(cache);
  Recorder rec;
  cache->SetListener(&rec);
  ASSERT_TRUE(PutK(*cache, K(0), kBlock, AdmissionHint{1, 1.0}));  // prefetched, needed soon
  ASSERT_TRUE(PutK(*cache, K(1)));
  auto r = PutK(*cache, K(2), kBlock, AdmissionHint{2, 5.0});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNoSpace);
  EXPECT_EQ(cache->Stats().rejected_admissions, 1u);
  // The refused prefetch counts against its expert at once.
  {
    std::lock_guard l(rec.mu);
    ASSERT_EQ(rec.wasted.size(), 1u);
    EXPECT_EQ(rec.wasted[0].first, K(2));
    EXPECT_EQ(rec.wasted[0].second, 2);
  }
  EXPECT_TRUE(cache->Contains(K(0)));
  EXPECT_FALSE(cache->Contains(K(2)));
  // Needed sooner than the tail: admitted.
  ASSERT_TRUE(PutK(*cache, K(3), kBlock, AdmissionHint{2, 0.5}));
  EXPECT_FALSE(cache->Contains(K(0)));
  EXPECT_TRUE(cache->Contains(K(3)));
  // Demand is never refused, even over an unread prefetch needed very soon.
  ASSERT_TRUE(PutK(*cache, K(4), kBlock, AdmissionHint{1, 0.0}));
  ASSERT_TRUE(PutK(*cache, K(5)));
  ASSERT_TRUE(PutK(*cache, K(6)));
  EXPECT_TRUE(cache->Contains(K(6)));
  EXPECT_EQ(cache->Stats().rejected_admissions, 1u);
}

TEST(BlockCacheTest, ListenerHearsPrefetchUsedAndWasted) {
  TempDir dir;
  auto [cache, faulty] = Open(Cfg(dir.path(), 3));
  ASSERT_TRUE(cache);
  Recorder rec;
  cache->SetListener(&rec);
  ASSERT_TRUE(PutK(*cache, K(0), kBlock, AdmissionHint{4, kUnknownUse}));  // will be read
  ASSERT_TRUE(PutK(*cache, K(1), kBlock, AdmissionHint{5, kUnknownUse}));  // evicted unread
  ASSERT_TRUE(PutK(*cache, K(2)));                                         // demand: silent
  EXPECT_TRUE(Serves(*cache, K(0)));
  EXPECT_TRUE(Serves(*cache, K(0)));  // only the first read counts
  EXPECT_TRUE(Serves(*cache, K(2)));
  ASSERT_EQ(rec.used.size(), 1u);
  EXPECT_EQ(rec.used[0].first, K(0));
  EXPECT_EQ(rec.used[0].second, 4);
  EXPECT_TRUE(rec.wasted.empty());
  ASSERT_TRUE(PutK(*cache, K(3)));  // LRU victim: K(1), never read
  ASSERT_EQ(rec.wasted.size(), 1u);
  EXPECT_EQ(rec.wasted[0].first, K(1));
  EXPECT_EQ(rec.wasted[0].second, 5);
  // Evicting read or demand blocks is not waste; an explicit Evict of an unread one is.
  ASSERT_TRUE(PutK(*cache, K(4), kBlock, AdmissionHint{6, kUnknownUse}));  // evicts K(0)
  EXPECT_EQ(rec.wasted.size(), 1u);
  EXPECT_EQ(cache->Evict(7, 0), 3u);
  ASSERT_EQ(rec.wasted.size(), 2u);
  EXPECT_EQ(rec.wasted[1].first, K(4));
  EXPECT_EQ(rec.used.size(), 1u);
}

TEST(BlockCacheTest, EvictDropsAVolumeOrAFileAndStaysEvictedAfterACrash) {
  TempDir dir;
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(0, 1, 10)));
  ASSERT_TRUE(PutK(*cache, K(1, 1, 10)));
  ASSERT_TRUE(PutK(*cache, K(0, 1, 11), 100));
  ASSERT_TRUE(PutK(*cache, K(0, 2, 10)));
  EXPECT_EQ(cache->VolumeBytes(1), 2 * kBlock + 100);
  EXPECT_EQ(cache->Evict(1, 10), 2u);
  EXPECT_FALSE(cache->Contains(K(0, 1, 10)));
  EXPECT_TRUE(cache->Contains(K(0, 1, 11)));
  EXPECT_EQ(cache->VolumeBytes(1), 100u);
  EXPECT_EQ(cache->Evict(2, 0), 1u);
  EXPECT_EQ(cache->VolumeBytes(2), 0u);
  EXPECT_EQ(cache->Stats().blocks, 1u);
  TempDir crashed;
  CopyDataFiles(dir.path(), crashed.path());
  auto [after, f2] = Open(Cfg(crashed.path(), 8));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->Stats().blocks, 1u);
  EXPECT_TRUE(after->Contains(K(0, 1, 11)));
  EXPECT_FALSE(after->Contains(K(0, 1, 10)));
  EXPECT_FALSE(after->Contains(K(0, 2, 10)));
}

// Evict finds a file's blocks through the per-file index: it stays exact through policy
// evictions, re-puts, versions and a restart (the index is rebuilt as blocks are loaded).
TEST(BlockCacheTest, PerFileIndexStaysExactThroughEvictionsAndRestart) {
  TempDir dir;
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 4));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutK(*cache, K(i, 7, 10)));
    ASSERT_TRUE(PutK(*cache, K(0, 7, 11)));  // LRU evicts file 10's blocks 0 and 1
    ASSERT_TRUE(PutK(*cache, K(1, 7, 11)));
    EXPECT_EQ(cache->Evict(7, 10), 2u);
    EXPECT_EQ(cache->Evict(7, 10), 0u);
    BlockKey v2 = K(0, 7, 11);
    v2.version = 2;  // another version of file 11: evicted with it
    ASSERT_TRUE(PutK(*cache, v2));
    EXPECT_EQ(cache->Evict(7, 11), 3u);
    EXPECT_EQ(cache->Stats().blocks, 0u);
    ASSERT_TRUE(PutK(*cache, K(0, 7, 10)));
    ASSERT_TRUE(PutK(*cache, K(0, 8, 10)));  // same file id, another volume
    ASSERT_TRUE(cache->Close());
  }
  auto [after, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->Evict(7, 10), 1u);
  EXPECT_TRUE(after->Contains(K(0, 8, 10)));
  EXPECT_EQ(after->Evict(8, 0), 1u);
  EXPECT_EQ(after->Stats().blocks, 0u);
}

TEST(BlockCacheTest, RestartKeepsRecencyOrder) {
  TempDir dir;
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 3));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(PutK(*cache, K(i)));
    EXPECT_TRUE(Serves(*cache, K(0)));  // LRU order now: 1, 2, 0
    ASSERT_TRUE(cache->Close());
  }
  auto [cache, faulty] = Open(Cfg(dir.path(), 3));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(PutK(*cache, K(3)));
  EXPECT_FALSE(cache->Contains(K(1)));
  EXPECT_TRUE(cache->Contains(K(0)));
}

TEST(BlockCacheTest, DiskErrorsDegradeToMissesAndFailedPuts) {
  TempDir dir;
  metrics::Registry reg;
  auto [cache, faulty] = Open(Cfg(dir.path(), 8), &reg);
  ASSERT_TRUE(cache);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(PutK(*cache, K(i)));

  faulty->fail_reads = EIO;
  EXPECT_TRUE(Misses(*cache, K(0)));  // a miss, never a failed read
  EXPECT_EQ(cache->Stats().disk_errors, 1u);
  EXPECT_FALSE(cache->Stats().degraded);
  EXPECT_FALSE(cache->Contains(K(0)));  // the unreadable block is dropped

  faulty->fail_writes = ENOSPC;
  auto put = PutK(*cache, K(9));
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code(), Code::kIo);
  EXPECT_EQ(cache->Stats().disk_errors, 2u);
  EXPECT_FALSE(cache->Contains(K(9)));
  EXPECT_EQ(GaugeValue(reg, "spoke_cache_degraded"), 0);

  EXPECT_TRUE(Misses(*cache, K(1)));  // third error in a row
  auto s = cache->Stats();
  EXPECT_TRUE(s.degraded);
  EXPECT_EQ(s.disk_errors, 3u);
  EXPECT_EQ(CounterValue(reg, "spoke_cache_disk_errors_total"), 3u);
  EXPECT_EQ(GaugeValue(reg, "spoke_cache_degraded"), 1);

  // Degraded stays degraded even if the disk answers again: no device I/O at all.
  faulty->fail_reads = 0;
  faulty->fail_writes = 0;
  const uint64_t reads = faulty->reads.load();
  EXPECT_TRUE(Misses(*cache, K(2)));
  EXPECT_EQ(faulty->reads.load(), reads);
  EXPECT_FALSE(cache->Contains(K(2)));
  EXPECT_EQ(PutK(*cache, K(10)).error().code(), Code::kIo);
  EXPECT_FALSE(cache->Close());  // no clean marker: the next start rescans
  EXPECT_FALSE(std::filesystem::exists(dir.sub("clean")));
}

TEST(BlockCacheTest, IntermittentErrorsBelowThresholdDoNotDegrade) {
  TempDir dir;
  auto [cache, faulty] = Open(Cfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  for (int round = 0; round < 5; ++round) {
    faulty->fail_writes = EIO;
    EXPECT_FALSE(PutK(*cache, K(100 + round)));
    faulty->fail_writes = 0;
    ASSERT_TRUE(PutK(*cache, K(round)));
  }
  EXPECT_EQ(cache->Stats().disk_errors, 5u);
  EXPECT_FALSE(cache->Stats().degraded);
  EXPECT_TRUE(Serves(*cache, K(4)));
}

// 8 threads Get and Put over 3x more keys than slots (constant eviction under readers), on a
// real disk (O_DIRECT); optionally one thread also Evicts. Every block served is checked.
void RunConcurrent(bool with_evict) {
  TempDir dir("/var/tmp");
  auto [cache, faulty] = Open(Cfg(dir.path(), 16));
  ASSERT_TRUE(cache);
  constexpr int kThreads = 8;
  constexpr uint64_t kKeys = 48;
  std::atomic<uint64_t> served{0}, wrong{0}, put_errors{0}, refused{0}, over_quota{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
      AlignedBuffer abuf = AllocateAligned(kBlock + kIoAlign);
      for (int op = 0; op < 400; ++op) {
        const uint64_t i = rng() % kKeys;
        const BlockKey key = K(i, 7, 42 + i % 2);
        const size_t len = kBlock - (i % 5) * 3000;
        char* out = (op % 2) ? abuf.get() : abuf.get() + 8;  // zero-copy and bounce paths
        auto r = cache->Get(key, out, kBlock);
        if (r) {
          ++served;
          if (*r != len || std::memcmp(out, Pattern(key, len).data(), len) != 0) ++wrong;
        } else if (auto p = PutK(*cache, key, len); !p) {
          // With Evict running, every slot can be briefly in flux: nothing evictable.
          ++(p.error().code() == Code::kNoSpace ? refused : put_errors);
        }
        if (with_evict && t == 0 && op % 50 == 49) cache->Evict(7, 43);
        if (cache->Stats().blocks > 16) ++over_quota;
      }
    });
  }
  for (auto& th : threads) th.join();
  auto s = cache->Stats();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(put_errors.load(), 0u);
  if (!with_evict) {
    EXPECT_EQ(refused.load(), 0u);
  }
  EXPECT_EQ(over_quota.load(), 0u);
  EXPECT_GT(served.load(), 100u);
  EXPECT_GT(s.evictions, 100u);
  EXPECT_EQ(s.checksum_failures, 0u);
  EXPECT_EQ(s.disk_errors, 0u);
  EXPECT_FALSE(s.degraded);
  ASSERT_TRUE(cache->Close());
  // Whatever the interleaving, the persisted state is consistent too.
  auto [again, f2] = Open(Cfg(dir.path(), 16));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->recovery(), SlotFileBlockCache::Recovery::kIndex);
  for (uint64_t i = 0; i < kKeys; ++i) {
    const BlockKey key = K(i, 7, 42 + i % 2);
    if (again->Contains(key)) {
      EXPECT_TRUE(Serves(*again, key, kBlock - (i % 5) * 3000)) << i;
    }
  }
  EXPECT_EQ(again->Stats().checksum_failures, 0u);
}

TEST(BlockCacheTest, ConcurrentReadersAndWritersStayConsistent) { RunConcurrent(false); }
TEST(BlockCacheTest, ConcurrentReadersWritersAndEvictStayConsistent) { RunConcurrent(true); }

TEST(BlockCacheTest, ConfigValidationNamesTheField) {
  auto bad = [](auto mutate) {
    BlockCache::Config c = Cfg("/tmp/x", 4);
    mutate(c);
    return c.Validate();
  };
  EXPECT_TRUE(bad([](auto&) {}));
  auto r = bad([](auto& c) { c.block_size = 3 << 16; });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("block_size"), std::string::npos);
  EXPECT_FALSE(bad([](auto& c) { c.block_size = 32 << 10; }));
  EXPECT_FALSE(bad([](auto& c) { c.block_size = 32 << 20; }));
  EXPECT_TRUE(bad([](auto& c) {
    c.block_size = 16 << 20;
    c.capacity_bytes = 32ull << 20;
  }));
  r = bad([](auto& c) { c.capacity_bytes = kBlock + 1; });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("capacity_bytes"), std::string::npos);
  EXPECT_FALSE(bad([](auto& c) { c.dir = ""; }));
}

TEST(BlockCacheTest, FactoryCreatesTheDirRejectsBadOnesAndLocksIt) {
  TempDir dir;
  metrics::Registry reg;
  auto cfg = Cfg(dir.sub("a/b/cache"), 4);
  auto cache = OpenBlockCache(cfg, MakeLruPolicy(), &reg);
  ASSERT_TRUE(cache) << cache.error().ToString();
  ASSERT_TRUE((*cache)->Put(K(0), Pattern(K(0), 10).data(), 10, {}));
  EXPECT_TRUE(Serves(**cache, K(0), 10));
  EXPECT_EQ((*cache)->block_size(), kBlock);
  // A second cache on the same directory is refused while the first is open.
  auto second = OpenBlockCache(cfg, MakeLruPolicy(), reg);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), Code::kUnavailable);
  const std::string text = reg.Render();
  for (const char* name : {"spoke_cache_evictions_total", "spoke_checksum_failures_total",
                           "spoke_cache_disk_errors_total", "spoke_cache_bytes",
                           "spoke_cache_capacity_bytes", "spoke_cache_degraded"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  cache->reset();
  EXPECT_TRUE(OpenBlockCache(cfg, MakeLruPolicy(), nullptr));  // released on close

  // A directory that cannot be created.
  std::FILE* f = std::fopen(dir.sub("file").c_str(), "w");
  std::fclose(f);
  auto under_file = OpenBlockCache(Cfg(dir.sub("file/cache"), 4), MakeLruPolicy(), nullptr);
  ASSERT_FALSE(under_file);
  EXPECT_EQ(under_file.error().code(), Code::kInvalidArgument);
  auto bad_size = OpenBlockCache(Cfg(dir.sub("c"), 1), MakeLruPolicy(), nullptr);
  ASSERT_FALSE(bad_size);
  EXPECT_EQ(bad_size.error().code(), Code::kInvalidArgument);
}

TEST(BlockCacheTest, CapacityChangeRescansAndKeepsWhatFits) {
  TempDir dir;
  {
    auto [cache, faulty] = Open(Cfg(dir.path(), 8));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(PutK(*cache, K(i)));
    ASSERT_TRUE(cache->Close());
  }
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kScan);
  auto s = cache->Stats();
  EXPECT_EQ(s.blocks, 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Serves(*cache, K(i)));
}

// ---------------------------------------------------------------------------------------------
// Quota by bytes: blocks are charged header + length rounded up to 4 KiB, in sparse slots whose
// unused parts are punched. 1 MiB blocks (the production size) and 110 KB training samples.

constexpr uint32_t kBig = 1 << 20;
constexpr size_t kSample = 110000;
constexpr uint64_t kSampleCharge = kHeaderBytes + 27 * kIoAlign;  // 112 KiB
// Filesystem metadata (extent tree blocks) st_blocks may count beyond the data.
constexpr uint64_t kDiskSlack = 256 << 10;

BlockCache::Config BigCfg(const std::string& dir, uint64_t mib) {
  BlockCache::Config c;
  c.dir = dir;
  c.capacity_bytes = mib << 20;
  c.block_size = kBig;
  c.io_depth = 16;
  return c;
}

::testing::AssertionResult ServesBig(BlockCache& c, const BlockKey& k, size_t len) {
  AlignedBuffer out = AllocateAligned(kBig);
  auto r = c.Get(k, out.get(), kBig);
  if (!r) return ::testing::AssertionFailure() << "Get: " << r.error().ToString();
  if (*r != len) return ::testing::AssertionFailure() << "length " << *r << " != " << len;
  if (std::memcmp(out.get(), Pattern(k, len).data(), len) != 0) {
    return ::testing::AssertionFailure() << "wrong contents";
  }
  return ::testing::AssertionSuccess();
}

// Disk space the data files occupy (st_blocks), what the quota must bound.
uint64_t AllocatedBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("data.", 0) != 0) continue;
    struct stat st {};
    EXPECT_EQ(stat(e.path().c_str(), &st), 0);
    total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

class BlockCacheBytesFsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockCacheBytesFsTest, HoldsCapacityOverSampleSizeNotOverBlockSize) {
  TempDir dir(GetParam());
  metrics::Registry reg;
  auto [cache, faulty] = Open(BigCfg(dir.path(), 16), &reg);
  ASSERT_TRUE(cache);
  ASSERT_TRUE(cache->punching()) << "filesystem cannot punch holes";
  for (uint64_t i = 0; i < 400; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
  auto s = cache->Stats();
  // 16 MiB + one header per MiB, in 112 KiB charges: 146 samples (one slot per MiB held 16).
  EXPECT_EQ(s.disk_quota_bytes, 16 * (kHeaderBytes + kBig));
  EXPECT_EQ(s.blocks, s.disk_quota_bytes / kSampleCharge);
  EXPECT_GE(s.blocks, (16ull << 20) / kSampleCharge);
  EXPECT_EQ(s.disk_bytes, s.blocks * kSampleCharge);
  EXPECT_EQ(s.used_bytes, s.blocks * kSample);
  EXPECT_LE(s.used_bytes, s.capacity_bytes);
  EXPECT_EQ(GaugeValue(reg, "spoke_cache_disk_bytes"), static_cast<int64_t>(s.disk_bytes));
  EXPECT_EQ(GaugeValue(reg, "spoke_cache_bytes"), static_cast<int64_t>(s.used_bytes));
  for (uint64_t i = 400 - s.blocks; i < 400; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), kSample));
  EXPECT_FALSE(cache->Contains(K(400 - s.blocks - 1)));
  EXPECT_LE(AllocatedBytes(dir.path()), s.disk_bytes + kDiskSlack);
}

TEST_P(BlockCacheBytesFsTest, RestartAndScanRecoverMixedSizes) {
  TempDir dir(GetParam());
  TempDir crashed(GetParam());
  std::vector<size_t> lengths;
  for (uint64_t i = 0; i < 40; ++i) lengths.push_back(i % 4 == 0 ? kBig : 3000 + i * 20011);
  uint64_t disk_bytes = 0;
  {
    auto [cache, faulty] = Open(BigCfg(dir.path(), 24));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE(PutK(*cache, K(i), lengths[i]));
    ASSERT_EQ(cache->Stats().blocks, 40u);  // ~22 MiB; one slot per MiB held 24 blocks
    disk_bytes = cache->Stats().disk_bytes;
    CopyDataFiles(dir.path(), crashed.path());  // a crash now (the copy may fill the holes)
    ASSERT_TRUE(cache->Close());
  }
  for (bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "scan" : "index");
    auto [cache, faulty] = Open(BigCfg(crash ? crashed.path() : dir.path(), 24));
    ASSERT_TRUE(cache);
    EXPECT_EQ(cache->recovery(),
              crash ? SlotFileBlockCache::Recovery::kScan : SlotFileBlockCache::Recovery::kIndex);
    auto s = cache->Stats();
    EXPECT_EQ(s.blocks, 40u);
    EXPECT_EQ(s.disk_bytes, disk_bytes);
    for (uint64_t i = 0; i < 40; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), lengths[i])) << i;
    EXPECT_EQ(cache->Stats().checksum_failures, 0u);
    // The scan punched whatever the copy allocated beyond the blocks.
    EXPECT_LE(AllocatedBytes(crash ? crashed.path() : dir.path()), disk_bytes + kDiskSlack);
  }
}

INSTANTIATE_TEST_SUITE_P(Filesystems, BlockCacheBytesFsTest,
                         ::testing::ValuesIn(testing::TestBases()), [](const auto& info) {
                           std::string n = info.param.substr(1);
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

TEST(BlockCacheBytesTest, DiskUsageFollowsTheQuotaUnderMixedSizesAndEvictions) {
  TempDir dir("/var/tmp");
  auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(cache->punching());
  std::mt19937_64 rng(7);
  uint64_t max_blocks = 0;
  for (uint64_t op = 0; op < 1500; ++op) {
    const uint64_t i = rng() % 400;
    const BlockKey key = K(i, 7, 42 + i % 3);
    // Mostly samples, some full blocks and last blocks of any length.
    const size_t len = i % 7 == 0 ? kBig : i % 5 == 0 ? 1 + (i * 7919) % kBig : 50000 + i * 211;
    if (!cache->Contains(key)) {
      ASSERT_TRUE(PutK(*cache, key, len)) << op;
    } else {
      ASSERT_TRUE(ServesBig(*cache, key, len)) << op;
    }
    if (op % 300 == 299) cache->Evict(7, 42 + op % 3);
    auto s = cache->Stats();
    ASSERT_LE(s.disk_bytes, s.disk_quota_bytes) << op;
    ASSERT_LE(s.used_bytes, s.capacity_bytes) << op;
    max_blocks = std::max(max_blocks, s.blocks);
    if (op % 50 == 0) {
      ASSERT_LE(AllocatedBytes(dir.path()), s.disk_bytes + kDiskSlack) << op;
    }
  }
  EXPECT_GT(max_blocks, 3 * 8u);  // many more than one per MiB of quota
  EXPECT_EQ(cache->Stats().checksum_failures, 0u);
  EXPECT_LE(AllocatedBytes(dir.path()), cache->Stats().disk_bytes + kDiskSlack);
  EXPECT_GT(cache->Evict(7, 0), 0u);
  EXPECT_EQ(cache->Stats().disk_bytes, 0u);
  EXPECT_LE(AllocatedBytes(dir.path()), kDiskSlack);
}

TEST(BlockCacheBytesTest, RewriteWithAShorterBlockPunchesTheTail) {
  TempDir dir;
  auto [cache, faulty] = Open(Cfg(dir.path(), 4));  // 64 KiB blocks: 4 slots, all needed
  ASSERT_TRUE(cache);
  ASSERT_EQ(cache->slot_count(), 4u);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutK(*cache, K(i)));
  EXPECT_GE(AllocatedBytes(dir.path()), 4 * kSlotSize);
  auto slot = FindSlot(dir.path(), kBlock, 4, K(0));
  ASSERT_TRUE(slot);
  const uint64_t punches = faulty->punches.load();
  ASSERT_TRUE(PutK(*cache, K(9), 5000));  // takes over K(0)'s slot: 12 KiB of 68
  EXPECT_EQ(FindSlot(dir.path(), kBlock, 4, K(9)), slot);
  EXPECT_EQ(faulty->punches.load(), punches + 1);
  int fd = open(dir.sub("data.0").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const off_t tail = static_cast<off_t>(*slot * kSlotSize + kHeaderBytes + 2 * kIoAlign);
  EXPECT_EQ(lseek(fd, tail, SEEK_HOLE), tail);  // the tail is a hole
  close(fd);
  EXPECT_LE(AllocatedBytes(dir.path()), 3 * kSlotSize + kHeaderBytes + 2 * kIoAlign + kDiskSlack);
  EXPECT_EQ(cache->Stats().disk_bytes, 3 * kSlotSize + kHeaderBytes + 2 * kIoAlign);
  EXPECT_TRUE(Serves(*cache, K(9), 5000));
  for (uint64_t i = 1; i < 4; ++i) EXPECT_TRUE(Serves(*cache, K(i)));
  // Freed slots (a dropped block, an Evict) are punched whole.
  EXPECT_EQ(cache->Evict(7, 0), 4u);
  EXPECT_EQ(cache->Stats().disk_bytes, 0u);
  EXPECT_LE(AllocatedBytes(dir.path()), kDiskSlack);
}

TEST(BlockCacheBytesTest, OldIndexAndPreallocatedFilesAreRescannedAndPunched) {
  TempDir dir;
  uint64_t disk_bytes = 0;
  {
    auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
    disk_bytes = cache->Stats().disk_bytes;
    ASSERT_TRUE(cache->Close());
  }
  // What an older version left: fully preallocated data files and a version-1 index.
  const auto size = std::filesystem::file_size(dir.sub("data.0"));
  int fd = open(dir.sub("data.0").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fallocate(fd, 0, 0, static_cast<off_t>(size)), 0);
  close(fd);
  ASSERT_GE(AllocatedBytes(dir.path()), size);
  std::FILE* f = std::fopen(dir.sub("index").c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::string bytes(std::filesystem::file_size(dir.sub("index")), '\0');
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
  const uint32_t v1 = 1;
  std::memcpy(bytes.data() + 8, &v1, sizeof(v1));
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof(sum));
  std::fseek(f, 0, SEEK_SET);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);

  auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kScan);
  EXPECT_EQ(cache->Stats().blocks, 20u);
  EXPECT_EQ(cache->Stats().disk_bytes, disk_bytes);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), kSample));
  EXPECT_LE(AllocatedBytes(dir.path()), disk_bytes + kDiskSlack);
}

TEST(BlockCacheBytesTest, ASmallerQuotaEvictsDownToItOnOpen) {
  TempDir dir;
  {
    auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
    ASSERT_TRUE(cache);
    for (uint64_t i = 0; i < 60; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
    ASSERT_TRUE(cache->Close());
  }
  auto [cache, faulty] = Open(BigCfg(dir.path(), 4));
  ASSERT_TRUE(cache);
  auto s = cache->Stats();
  EXPECT_LE(s.disk_bytes, s.disk_quota_bytes);
  EXPECT_EQ(s.blocks, s.disk_quota_bytes / kSampleCharge);
  EXPECT_TRUE(ServesBig(*cache, K(59), kSample));  // the newest are kept
  EXPECT_LE(AllocatedBytes(dir.path()), s.disk_bytes + kDiskSlack);
}

TEST(BlockCacheBytesTest, WithoutHolePunchingEveryBlockIsChargedAWholeSlot) {
  TempDir dir;
  SlotFileBlockCache::Options opts;
  opts.punch_holes = false;  // what a filesystem without punch-hole gets
  auto [cache, faulty] = Open(BigCfg(dir.path(), 8), nullptr, opts);
  ASSERT_TRUE(cache);
  EXPECT_FALSE(cache->punching());
  EXPECT_EQ(cache->slot_count(), 8u);
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
  auto s = cache->Stats();
  EXPECT_EQ(s.blocks, 8u);
  EXPECT_EQ(s.disk_bytes, 8 * (kHeaderBytes + kBig));
  EXPECT_EQ(faulty->punches.load(), 0u);
  for (uint64_t i = 22; i < 30; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), kSample));
  // Evicted blocks still do not come back after a crash (their headers are zeroed).
  EXPECT_EQ(cache->Evict(7, 0), 8u);
  TempDir crashed;
  CopyDataFiles(dir.path(), crashed.path());
  auto [after, f2] = Open(BigCfg(crashed.path(), 8), nullptr, opts);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->Stats().blocks, 0u);
}

// A store that says it cannot punch holes (BlockStore::CanPunchHoles) gets the whole-slot
// geometry at open, with no punch ever tried, and its first open is still a fresh one.
TEST(BlockCacheBytesTest, StoreThatCannotPunchHolesGetsOneSlotPerBlock) {
  TempDir dir;
  std::vector<uint64_t> opened_slot_counts;
  FaultyBlockStore* faulty = nullptr;
  auto factory = [&](const std::string& d, uint64_t n,
                     uint32_t size) -> Result<std::unique_ptr<BlockStore>> {
    opened_slot_counts.push_back(n);
    SPOKE_TRY(auto s, UringBlockStore::Open(d, n, size, {}));
    auto f = std::make_unique<FaultyBlockStore>(std::move(s));
    f->refuse_hole_punching = true;
    faulty = f.get();
    return std::unique_ptr<BlockStore>(std::move(f));
  };
  for (int round = 0; round < 2; ++round) {
    opened_slot_counts.clear();
    auto c = SlotFileBlockCache::Open(BigCfg(dir.path(), 8), factory, MakeLruPolicy(), nullptr);
    ASSERT_TRUE(c) << c.error().ToString();
    auto& cache = *c;
    EXPECT_FALSE(cache->punching());
    EXPECT_EQ(cache->slot_count(), 8u);
    ASSERT_EQ(opened_slot_counts.size(), 2u);  // many-slot geometry, then one slot per block
    EXPECT_EQ(opened_slot_counts.back(), 8u);
    EXPECT_EQ(std::filesystem::file_size(dir.sub("data.0")), 8 * (kHeaderBytes + kBig));
    if (round == 0) {
      EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kFresh);
      for (uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
      EXPECT_EQ(cache->Stats().disk_bytes, 8 * (kHeaderBytes + kBig));
      ASSERT_TRUE(cache->Close());
    } else {
      EXPECT_EQ(cache->recovery(), SlotFileBlockCache::Recovery::kIndex);
      EXPECT_EQ(cache->Stats().blocks, 8u);
      for (uint64_t i = 4; i < 12; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), kSample));
    }
    EXPECT_EQ(faulty->punches.load(), 0u);
  }
}

TEST(BlockCacheBytesTest, PunchRefusedAtRunTimeFallsBackToWholeSlots) {
  TempDir dir;
  auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  ASSERT_TRUE(cache->punching());
  for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
  faulty->fail_punches = EOPNOTSUPP;
  EXPECT_EQ(cache->Evict(7, 42), 20u);  // the first punch is refused
  EXPECT_FALSE(cache->punching());
  EXPECT_EQ(cache->Stats().disk_errors, 0u);  // a missing capability, not a failing disk
  for (uint64_t i = 100; i < 130; ++i) ASSERT_TRUE(PutK(*cache, K(i), kSample));
  auto s = cache->Stats();
  EXPECT_EQ(s.blocks, 8u);  // the old geometry's count
  EXPECT_EQ(s.disk_bytes, 8 * (kHeaderBytes + kBig));
  for (uint64_t i = 122; i < 130; ++i) EXPECT_TRUE(ServesBig(*cache, K(i), kSample));
  ASSERT_TRUE(cache->Close());
}

// 8 threads, mixed lengths over 1 MiB blocks: the byte quota holds at every moment.
TEST(BlockCacheBytesTest, ConcurrentMixedSizesNeverExceedTheQuota) {
  TempDir dir("/var/tmp");
  auto [cache, faulty] = Open(BigCfg(dir.path(), 8));
  ASSERT_TRUE(cache);
  std::atomic<uint64_t> wrong{0}, failed{0}, over{0}, max_blocks{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 11);
      AlignedBuffer out = AllocateAligned(kBig);
      for (int op = 0; op < 300; ++op) {
        const uint64_t i = rng() % 200;
        const size_t len = i % 9 == 0 ? kBig : 20000 + i * 557;
        auto r = cache->Get(K(i), out.get(), kBig);
        if (r) {
          if (*r != len || std::memcmp(out.get(), Pattern(K(i), len).data(), len) != 0) ++wrong;
        } else if (!PutK(*cache, K(i), len)) {
          ++failed;
        }
        auto s = cache->Stats();
        if (s.disk_bytes > s.disk_quota_bytes) ++over;
        uint64_t m = max_blocks.load();
        while (s.blocks > m && !max_blocks.compare_exchange_weak(m, s.blocks)) {
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(over.load(), 0u);
  EXPECT_GT(max_blocks.load(), 3 * 8u);
  EXPECT_EQ(cache->Stats().checksum_failures, 0u);
  EXPECT_LE(AllocatedBytes(dir.path()), cache->Stats().disk_bytes + kDiskSlack);
}

}  // namespace
}  // namespace spoke::agent
