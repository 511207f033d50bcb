#include "cache-agent/cache/crash_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cache-agent/cache/uring_block_store.h"
#include "tests/cache-agent/cache/cache_test_util.h"

namespace spoke::agent {
namespace {

using testing::FaultyBlockStore;
using testing::TempDir;

constexpr uint32_t kBlockSize = 64 << 10;
constexpr uint32_t kSlot = kHeaderBytes + kBlockSize;

FoundHeader Found(uint64_t slot, uint64_t index, uint64_t seq) {
  FoundHeader f;
  f.slot = slot;
  f.header.block_size = kBlockSize;
  f.header.key = BlockKey{1, 2, 3, index};
  f.header.seq = seq;
  f.header.length = 100;
  return f;
}

TEST(ResolveGenerationsTest, NewestCopyWinsOlderCopiesAreStaleColdestFirst) {
  // Key 0 written three times (slots 4, 1, 7), key 1 once, key 2 twice.
  const std::vector<FoundHeader> found = {Found(4, 0, 5),  Found(2, 1, 9),  Found(1, 0, 20),
                                          Found(3, 2, 30), Found(7, 0, 12), Found(0, 2, 2)};
  ResolvedScan r = ResolveGenerations(found);
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.blocks[0].slot, 2u);  // seq 9
  EXPECT_EQ(r.blocks[1].slot, 1u);  // seq 20: key 0's newest
  EXPECT_EQ(r.blocks[2].slot, 3u);  // seq 30
  std::vector<uint64_t> stale = r.stale_slots;
  std::sort(stale.begin(), stale.end());
  EXPECT_EQ(stale, (std::vector<uint64_t>{0, 4, 7}));
  EXPECT_EQ(r.max_seq, 30u);
  ResolvedScan none = ResolveGenerations({});
  EXPECT_TRUE(none.blocks.empty());
  EXPECT_EQ(none.max_seq, 0u);
}

void WriteHeader(BlockStore& store, uint64_t slot, const BlockHeader& h) {
  AlignedBuffer buf = AllocateAligned(kHeaderBytes);
  EncodeHeader(h, buf.get());
  iovec seg{buf.get(), kHeaderBytes};
  ASSERT_TRUE(store.Write(slot, 0, {&seg, 1}));
}

TEST(ScanSlotHeadersTest, FindsValidHeadersAndCountsTornOnes) {
  TempDir dir;
  auto store = UringBlockStore::Open(dir.path(), 200, kSlot, {});
  ASSERT_TRUE(store);
  for (uint64_t slot : {0u, 63u, 64u, 199u})
    WriteHeader(**store, slot, Found(slot, slot, slot + 1).header);
  // A torn header: valid magic, one byte of the rest flipped.
  BlockHeader torn = Found(0, 500, 7).header;
  AlignedBuffer buf = AllocateAligned(kHeaderBytes);
  EncodeHeader(torn, buf.get());
  buf.get()[30] ^= 1;
  iovec seg{buf.get(), kHeaderBytes};
  ASSERT_TRUE((*store)->Write(100, 0, {&seg, 1}));
  // Another block size's header is foreign here.
  BlockHeader other = Found(0, 600, 8).header;
  other.block_size = kBlockSize * 2;
  WriteHeader(**store, 150, other);

  BufferPool pool(kSlot, 4);
  int errors = 0;
  HeaderScan scan = ScanSlotHeaders(**store, kBlockSize, pool, [&](const Status&) {
    ++errors;
    return false;
  });
  EXPECT_EQ(errors, 0);
  std::vector<uint64_t> slots;
  for (const FoundHeader& f : scan.found) {
    EXPECT_EQ(f.header.key.index, f.slot);
    EXPECT_EQ(f.header.seq, f.slot + 1);
    slots.push_back(f.slot);
  }
  std::sort(slots.begin(), slots.end());
  EXPECT_EQ(slots, (std::vector<uint64_t>{0, 63, 64, 199}));
  EXPECT_EQ(scan.invalid, 2u);        // never-written slots (zeros) are not counted
  EXPECT_GT(pool.spare_count(), 0u);  // scan buffers went back to the pool
}

TEST(ScanSlotHeadersTest, ReadErrorsGoToTheHandlerWhichCanStopTheScan) {
  TempDir dir;
  auto inner = UringBlockStore::Open(dir.path(), 100, kSlot, {});
  ASSERT_TRUE(inner);
  FaultyBlockStore store(std::move(*inner));
  store.fail_reads = EIO;
  BufferPool pool(kSlot, 4);
  std::atomic<int> errors{0};
  HeaderScan all = ScanSlotHeaders(store, kBlockSize, pool, [&](const Status& s) {
    EXPECT_EQ(s.error().code(), Code::kIo);
    ++errors;
    return false;
  });
  EXPECT_EQ(errors.load(), 100);
  EXPECT_TRUE(all.found.empty());
  errors = 0;
  const uint64_t reads_before = store.reads.load();
  ScanSlotHeaders(store, kBlockSize, pool, [&](const Status&) {
    ++errors;
    return true;  // degraded: every worker stops at its first error
  });
  EXPECT_LT(store.reads.load() - reads_before, 100u);
  EXPECT_EQ(errors.load(), static_cast<int>(store.reads.load() - reads_before));
}

TEST(PunchBeyondExtentsTest, PunchesEachSlotPastWhatItKeeps) {
  TempDir dir;
  auto inner = UringBlockStore::Open(dir.path(), 3, kSlot, {});
  ASSERT_TRUE(inner);
  ASSERT_TRUE((*inner)->CanPunchHoles()) << "filesystem cannot punch holes";
  FaultyBlockStore store(std::move(*inner));
  // Fill every slot, then keep slot 0 whole, slot 1's first page, nothing of slot 2.
  AlignedBuffer data = AllocateAligned(kSlot);
  std::memset(data.get(), 'x', kSlot);
  for (uint64_t s = 0; s < 3; ++s) {
    iovec seg{data.get(), kSlot};
    ASSERT_TRUE(store.Write(s, 0, {&seg, 1}));
  }
  bool refused = PunchBeyondExtents(store, {kSlot, kIoAlign, 0}, [](const Status&) {
    ADD_FAILURE() << "no error expected";
    return false;
  });
  EXPECT_FALSE(refused);
  EXPECT_EQ(store.punches.load(), 2u);
  AlignedBuffer back = AllocateAligned(kSlot);
  iovec seg{back.get(), kSlot};
  ASSERT_TRUE(store.Read(0, 0, {&seg, 1}));
  EXPECT_TRUE(std::all_of(back.get(), back.get() + kSlot, [](char c) { return c == 'x'; }));
  ASSERT_TRUE(store.Read(1, 0, {&seg, 1}));
  EXPECT_TRUE(std::all_of(back.get(), back.get() + kIoAlign, [](char c) { return c == 'x'; }));
  EXPECT_TRUE(
      std::all_of(back.get() + kIoAlign, back.get() + kSlot, [](char c) { return c == 0; }));
  ASSERT_TRUE(store.Read(2, 0, {&seg, 1}));
  EXPECT_TRUE(std::all_of(back.get(), back.get() + kSlot, [](char c) { return c == 0; }));
  // A filesystem refusing punches stops the pass and says so.
  store.fail_punches = EOPNOTSUPP;
  EXPECT_TRUE(PunchBeyondExtents(store, {0, 0, 0}, [](const Status&) { return false; }));
}

}  // namespace
}  // namespace spoke::agent
