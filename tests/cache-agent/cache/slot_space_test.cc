#include "cache-agent/cache/slot_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "cache-agent/cache/block_header.h"

namespace spoke::agent {
namespace {

constexpr uint32_t kSlot = kHeaderBytes + 16 * kIoAlign;

// A store in memory that records every punch and write; punches can be refused (EOPNOTSUPP,
// what a filesystem without holes says) or failed (EIO).
class RecordingStore final : public BlockStore {
 public:
  explicit RecordingStore(uint64_t slots) : BlockStore(slots, kSlot) {}
  struct Op {
    uint64_t offset;
    uint64_t length;
    bool all_zero;  // writes only
  };
  std::vector<Op> punches;
  std::vector<Op> writes;
  int punch_errno = 0;

  bool fresh() const override { return true; }
  bool CanPunchHoles() const override { return punch_errno != EOPNOTSUPP; }

 protected:
  Status ReadImpl(uint64_t, std::span<const iovec>) override { return Ok(); }
  Status WriteImpl(uint64_t off, std::span<const iovec> segs) override {
    uint64_t len = 0;
    bool zero = true;
    for (const iovec& v : segs) {
      len += v.iov_len;
      const char* p = static_cast<const char*>(v.iov_base);
      zero = zero && std::all_of(p, p + v.iov_len, [](char c) { return c == 0; });
    }
    writes.push_back({off, len, zero});
    return Ok();
  }
  Status PunchImpl(uint64_t off, uint64_t len) override {
    if (punch_errno != 0) return std::unexpected(Error::FromErrno(punch_errno, "punch"));
    punches.push_back({off, len, false});
    return Ok();
  }
  Status SyncImpl() override { return Ok(); }
};

std::vector<uint64_t> TakeAll(SlotSpace& space) {
  std::vector<uint64_t> got;
  while (auto s = space.TakeFree()) got.push_back(*s);
  return got;
}

TEST(SlotSpaceTest, FreeListSkipsUsedSlotsAndReusesTheLastFreed) {
  RecordingStore store(6);
  SlotSpace space(&store, /*punching=*/false);
  EXPECT_EQ(space.slot_count(), 6u);
  EXPECT_FALSE(space.TakeFree());  // nothing is free until said so
  space.AddFreeExcept({false, true, false, false, true, false});
  EXPECT_EQ(space.free_count(), 4u);
  EXPECT_EQ(*space.TakeFree(), 0u);  // lowest first
  EXPECT_EQ(*space.TakeFree(), 2u);
  space.Free(1);  // without punching a freed slot is reusable at once
  EXPECT_FALSE(space.has_to_clear());
  EXPECT_EQ(*space.TakeFree(), 1u);
  EXPECT_EQ(TakeAll(space), (std::vector<uint64_t>{3, 5}));
}

TEST(SlotSpaceTest, ReleasedPinnedSlotIsFreedOnlyAtTheLastUnpin) {
  RecordingStore store(4);
  SlotSpace space(&store, false);
  space.Pin(2);
  space.Pin(2);
  EXPECT_TRUE(space.pinned(2));
  space.Release(2);  // its block is gone, but two readers are still on it
  EXPECT_EQ(space.free_count(), 0u);
  space.Unpin(2);
  EXPECT_EQ(space.free_count(), 0u);
  space.Unpin(2);
  EXPECT_FALSE(space.pinned(2));
  EXPECT_EQ(TakeAll(space), (std::vector<uint64_t>{2}));
  // Unpinning a slot nobody released does not free it.
  space.Pin(3);
  space.Unpin(3);
  EXPECT_EQ(space.free_count(), 0u);
  // An unpinned release frees at once.
  space.Release(3);
  EXPECT_EQ(TakeAll(space), (std::vector<uint64_t>{3}));
}

TEST(SlotSpaceTest, FreedSlotWithDataIsPunchedWholeBeforeReuse) {
  RecordingStore store(4);
  SlotSpace space(&store, /*punching=*/true);
  space.set_extent(1, kHeaderBytes + kIoAlign);
  space.Free(1);  // may hold data: cleared first
  space.Free(3);  // extent 0: nothing on disk, free at once
  EXPECT_TRUE(space.has_to_clear());
  EXPECT_EQ(TakeAll(space), (std::vector<uint64_t>{3}));
  std::vector<uint64_t> clear = space.TakeToClear();
  EXPECT_EQ(clear, (std::vector<uint64_t>{1}));
  EXPECT_FALSE(space.has_to_clear());
  SlotSpace::ClearOutcome out = space.ClearIo(clear, space.punching(), /*degraded=*/false);
  ASSERT_EQ(store.punches.size(), 1u);
  EXPECT_EQ(store.punches[0].offset, 1u * kSlot);
  EXPECT_EQ(store.punches[0].length, kSlot);
  EXPECT_TRUE(store.writes.empty());
  EXPECT_FALSE(out.refused);
  space.FinishClear(clear, out);
  EXPECT_EQ(space.extent(1), 0u);
  EXPECT_EQ(TakeAll(space), (std::vector<uint64_t>{1}));
}

TEST(SlotSpaceTest, RefusedPunchFallsBackToZeroingTheHeader) {
  RecordingStore store(4);
  store.punch_errno = EOPNOTSUPP;
  SlotSpace space(&store, true);
  const std::vector<uint64_t> slots = {0, 2};
  SlotSpace::ClearOutcome out = space.ClearIo(slots, true, false);
  EXPECT_TRUE(out.refused);
  EXPECT_TRUE(store.punches.empty());
  // Both headers zeroed, so neither block comes back after a crash.
  ASSERT_EQ(store.writes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(store.writes[i].offset, slots[i] * kSlot);
    EXPECT_EQ(store.writes[i].length, kHeaderBytes);
    EXPECT_TRUE(store.writes[i].all_zero);
    EXPECT_FALSE(out.punched[i]);
    EXPECT_TRUE(out.results[i]);
  }
  space.set_extent(0, kSlot);
  space.FinishClear(slots, out);
  EXPECT_EQ(space.extent(0), kSlot);  // not punched: its data may still be allocated
  space.StopPunching();
  EXPECT_FALSE(space.punching());
  space.Free(0);  // no longer cleared first
  EXPECT_FALSE(space.has_to_clear());
}

TEST(SlotSpaceTest, ClearReportsFailedPunchesAndDoesNoIoWhenDegraded) {
  RecordingStore store(4);
  store.punch_errno = EIO;
  SlotSpace space(&store, true);
  SlotSpace::ClearOutcome out = space.ClearIo({1}, true, false);
  ASSERT_EQ(out.results.size(), 1u);
  EXPECT_FALSE(out.results[0]);
  EXPECT_FALSE(out.refused);
  EXPECT_FALSE(out.punched[0]);
  store.punch_errno = 0;
  out = space.ClearIo({1, 2}, true, /*degraded=*/true);
  EXPECT_TRUE(store.punches.empty());
  EXPECT_TRUE(store.writes.empty());
  space.FinishClear({1, 2}, out);  // still reusable: the cache serves nothing while degraded
  EXPECT_EQ(space.free_count(), 2u);
}

}  // namespace
}  // namespace spoke::agent
