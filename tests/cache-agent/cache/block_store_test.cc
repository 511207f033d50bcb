#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "cache-agent/cache/slot_io.h"
#include "cache-agent/cache/uring_block_store.h"
#include "tests/cache-agent/cache/cache_test_util.h"

namespace spoke::agent {
namespace {

using testing::TempDir;

constexpr uint32_t kSlot = 8 * kIoAlign;

bool IsTmpfs(const std::string& path) {
  struct statfs s {};
  return statfs(path.c_str(), &s) == 0 && s.f_type == 0x01021994;  // TMPFS_MAGIC
}

AlignedBuffer Filled(size_t len, char seed) {
  AlignedBuffer b = AllocateAligned(len);
  for (size_t i = 0; i < len; ++i) b.get()[i] = static_cast<char>(seed + i * 7);
  return b;
}

void RoundTrip(UringBlockStore& store, uint64_t slot, char seed) {
  AlignedBuffer w = Filled(kSlot, seed);
  iovec ws{w.get(), kSlot};
  ASSERT_TRUE(store.Write(slot, 0, {&ws, 1}));
  AlignedBuffer r = AllocateAligned(kSlot);
  iovec rs{r.get(), kSlot};
  ASSERT_TRUE(store.Read(slot, 0, {&rs, 1}));
  EXPECT_EQ(std::memcmp(w.get(), r.get(), kSlot), 0);
}

TEST(UringBlockStoreTest, UsesODirectOnARealDisk) {
  if (IsTmpfs("/var/tmp")) GTEST_SKIP() << "/var/tmp is tmpfs here";
  TempDir dir("/var/tmp");
  auto store = UringBlockStore::Open(dir.path(), 4, kSlot, {});
  ASSERT_TRUE(store) << store.error().ToString();
  EXPECT_TRUE((*store)->direct_io());
  EXPECT_TRUE((*store)->fresh());
  RoundTrip(**store, 3, 'a');
}

// ramfs refuses O_DIRECT with EINVAL (tmpfs accepts it since Linux 6.6). The child process
// mounts one in a private mount namespace, so nothing leaks even if the test dies.
TEST(UringBlockStoreTest, FallsBackToBufferedWhenTheFilesystemRefusesODirect) {
  TempDir dir;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("none", dir.path().c_str(), "ramfs", 0, nullptr) != 0) {
      _exit(77);
    }
    auto store = UringBlockStore::Open(dir.path(), 2, kSlot, {});
    if (!store) _exit(1);
    if ((*store)->direct_io()) _exit(2);
    AlignedBuffer w = Filled(kSlot, 'r');
    AlignedBuffer r = AllocateAligned(kSlot);
    iovec ws{w.get(), kSlot}, rs{r.get(), kSlot};
    if (!(*store)->Write(1, 0, {&ws, 1}) || !(*store)->Read(1, 0, {&rs, 1})) _exit(3);
    _exit(std::memcmp(w.get(), r.get(), kSlot) == 0 ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount ramfs (needs root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: open failed, 2: O_DIRECT kept, 3: I/O, 4: data";
}

TEST(UringBlockStoreTest, BufferedWhenDirectIsNotAllowed) {
  TempDir dir;
  UringBlockStore::Options o;
  o.allow_direct = false;
  auto store = UringBlockStore::Open(dir.path(), 2, kSlot, o);
  ASSERT_TRUE(store);
  EXPECT_FALSE((*store)->direct_io());
  RoundTrip(**store, 1, 'q');
}

TEST(UringBlockStoreTest, ScatterGatherAcrossManyChunksAndBatches) {
  TempDir dir;
  UringBlockStore::Options o;
  o.chunk_bytes = kIoAlign;  // 8 chunks per slot
  o.ring_entries = 2;        // 4 submissions per slot
  auto store = UringBlockStore::Open(dir.path(), 2, kSlot, o);
  ASSERT_TRUE(store) << store.error().ToString();
  AlignedBuffer a = Filled(3 * kIoAlign, 'x');
  AlignedBuffer b = Filled(5 * kIoAlign, 'y');
  iovec w[2] = {{a.get(), 3 * kIoAlign}, {b.get(), 5 * kIoAlign}};
  ASSERT_TRUE((*store)->Write(1, 0, w));
  AlignedBuffer r = AllocateAligned(kSlot);
  iovec rs{r.get(), kSlot};
  ASSERT_TRUE((*store)->Read(1, 0, {&rs, 1}));
  EXPECT_EQ(std::memcmp(r.get(), a.get(), 3 * kIoAlign), 0);
  EXPECT_EQ(std::memcmp(r.get() + 3 * kIoAlign, b.get(), 5 * kIoAlign), 0);
  // A read at an offset inside the slot.
  AlignedBuffer part = AllocateAligned(kIoAlign);
  iovec ps{part.get(), kIoAlign};
  ASSERT_TRUE((*store)->Read(1, 4 * kIoAlign, {&ps, 1}));
  EXPECT_EQ(std::memcmp(part.get(), b.get() + kIoAlign, kIoAlign), 0);
}

TEST(UringBlockStoreTest, SpreadsSlotsOverSeveralFilesAndResizes) {
  TempDir dir;
  UringBlockStore::Options o;
  o.max_file_bytes = 3 * kSlot;
  {
    auto store = UringBlockStore::Open(dir.path(), 10, kSlot, o);
    ASSERT_TRUE(store) << store.error().ToString();
    EXPECT_EQ((*store)->file_count(), 4u);
    for (uint64_t s = 0; s < 10; ++s) RoundTrip(**store, s, static_cast<char>(s));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::filesystem::exists(dir.sub("data." + std::to_string(i))));
  }
  EXPECT_EQ(std::filesystem::file_size(dir.sub("data.3")), kSlot);  // sized for 1 slot
  {
    auto store = UringBlockStore::Open(dir.path(), 5, kSlot, o);  // shrink
    ASSERT_TRUE(store);
    EXPECT_FALSE((*store)->fresh());
    EXPECT_EQ((*store)->file_count(), 2u);
    // Slot 4 (file 1, second slot) kept its contents.
    AlignedBuffer r = AllocateAligned(kSlot);
    iovec rs{r.get(), kSlot};
    ASSERT_TRUE((*store)->Read(4, 0, {&rs, 1}));
    AlignedBuffer want = Filled(kSlot, 4);
    EXPECT_EQ(std::memcmp(r.get(), want.get(), kSlot), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.sub("data.2")));
  EXPECT_EQ(std::filesystem::file_size(dir.sub("data.1")), 2 * kSlot);
}

TEST(UringBlockStoreTest, DeviceLayerRejectsBadTransfers) {
  TempDir dir;
  auto store = UringBlockStore::Open(dir.path(), 2, kSlot, {});
  ASSERT_TRUE(store);
  AlignedBuffer b = AllocateAligned(2 * kSlot);
  iovec out_of_range{b.get(), kIoAlign};
  EXPECT_EQ((*store)->Read(2, 0, {&out_of_range, 1}).error().code(), Code::kInternal);
  iovec past_end{b.get(), 2 * kIoAlign};
  EXPECT_EQ((*store)->Read(0, kSlot - kIoAlign, {&past_end, 1}).error().code(), Code::kInternal);
  iovec misaligned_buf{b.get() + 512, kIoAlign};
  EXPECT_EQ((*store)->Write(0, 0, {&misaligned_buf, 1}).error().code(), Code::kInternal);
  iovec misaligned_len{b.get(), 1000};
  EXPECT_EQ((*store)->Write(0, 0, {&misaligned_len, 1}).error().code(), Code::kInternal);
  EXPECT_EQ((*store)->io_errors(), 0u);  // caller bugs are not device errors
}

uint64_t Allocated(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(UringBlockStoreTest, FilesAreSparseAndPunchGivesSpaceBack) {
  TempDir dir;
  ASSERT_TRUE(UringBlockStore::ProbeHolePunching(dir.path()));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("punch-probe")));  // the probe cleans up
  auto store = UringBlockStore::Open(dir.path(), 64, kSlot, {});
  ASSERT_TRUE(store);
  EXPECT_TRUE((*store)->CanPunchHoles());  // the store probed the same filesystem at Open
  EXPECT_FALSE(std::filesystem::exists(dir.sub("punch-probe")));
  const std::string data0 = dir.sub("data.0");
  EXPECT_EQ(std::filesystem::file_size(data0), 64 * kSlot);
  EXPECT_LT(Allocated(data0), 2 * kSlot);  // nothing preallocated
  RoundTrip(**store, 5, 'p');
  EXPECT_GE(Allocated(data0), kSlot);
  // Punch all but the first page of slot 5: it reads zeros there, keeps the first page.
  ASSERT_TRUE((*store)->Punch(5, kIoAlign, kSlot - kIoAlign));
  AlignedBuffer r = AllocateAligned(kSlot);
  iovec rs{r.get(), kSlot};
  ASSERT_TRUE((*store)->Read(5, 0, {&rs, 1}));
  AlignedBuffer want = Filled(kIoAlign, 'p');
  EXPECT_EQ(std::memcmp(r.get(), want.get(), kIoAlign), 0);
  EXPECT_TRUE(std::all_of(r.get() + kIoAlign, r.get() + kSlot, [](char c) { return c == 0; }));
  EXPECT_LT(Allocated(data0), kSlot);
  // Caller bugs: out of range, misaligned, past the slot's end.
  EXPECT_EQ((*store)->Punch(64, 0, kIoAlign).error().code(), Code::kInternal);
  EXPECT_EQ((*store)->Punch(0, 100, kIoAlign).error().code(), Code::kInternal);
  EXPECT_EQ((*store)->Punch(0, kIoAlign, kSlot).error().code(), Code::kInternal);
  EXPECT_EQ((*store)->io_errors(), 0u);
}

// ramfs has no fallocate at all: the probe says no (the cache then keeps one slot per block).
TEST(UringBlockStoreTest, ProbeSaysNoWhereHolesCannotBePunched) {
  TempDir dir;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("none", dir.path().c_str(), "ramfs", 0, nullptr) != 0) {
      _exit(77);
    }
    if (UringBlockStore::ProbeHolePunching(dir.path())) _exit(1);
    _exit(std::filesystem::exists(dir.sub("punch-probe")) ? 2 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount ramfs (needs root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: probe said yes, 2: probe file left behind";
}

TEST(UringBlockStoreTest, ConcurrentTransfersFromManyThreads) {
  TempDir dir;
  UringBlockStore::Options o;
  o.rings = 3;  // fewer rings than threads: callers share them
  auto store = UringBlockStore::Open(dir.path(), 16, kSlot, o);
  ASSERT_TRUE(store);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer r = AllocateAligned(kSlot);
      for (int round = 0; round < 50; ++round) {
        for (uint64_t s = static_cast<uint64_t>(t) * 2; s < static_cast<uint64_t>(t) * 2 + 2; ++s) {
          AlignedBuffer w = Filled(kSlot, static_cast<char>(s + round));
          iovec ws{w.get(), kSlot};
          iovec rs{r.get(), kSlot};
          if (!(*store)->Write(s, 0, {&ws, 1}) || !(*store)->Read(s, 0, {&rs, 1}) ||
              std::memcmp(w.get(), r.get(), kSlot) != 0) {
            ++bad;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// WriteBlock writes a page-aligned block of whole pages in place and copies any other behind
// the header. Either way the slot holds the header, the bytes and zeros to the next page, and
// ReadBlock returns exactly the bytes written.
TEST(SlotIoTest, BlocksRoundTripFromAlignedAndUnalignedBuffers) {
  constexpr uint32_t kBlock = 16 * kIoAlign;
  TempDir dir("/var/tmp");
  auto store = UringBlockStore::Open(dir.path(), 2, kHeaderBytes + kBlock, {});
  ASSERT_TRUE(store) << store.error().ToString();
  BufferPool buffers(kHeaderBytes + kBlock, 2);
  AlignedBuffer source = Filled(kBlock + kIoAlign, 's');
  uint64_t seq = 0;
  for (size_t skew : {size_t{0}, size_t{1}}) {
    for (uint32_t length : {kBlock, uint32_t{3 * kIoAlign + 100}, 100u, uint32_t{kIoAlign}}) {
      SCOPED_TRACE("skew " + std::to_string(skew) + ", length " + std::to_string(length));
      const char* data = source.get() + skew;
      BlockHeader h;
      h.block_size = kBlock;
      h.key = BlockKey{1, 2, 3, length};
      h.seq = ++seq;
      h.length = length;
      ASSERT_TRUE(WriteBlock(**store, buffers, 1, h, data));
      AlignedBuffer out = AllocateAligned(kBlock);
      BlockRead r = ReadBlock(**store, buffers, 1, kBlock, h.key, h.seq, length, out.get(), kBlock);
      ASSERT_TRUE(r.ok()) << r.bad;
      EXPECT_EQ(std::memcmp(out.get(), data, length), 0);
      // The slot itself: bytes after the header, then zeros to the page's end.
      AlignedBuffer raw = AllocateAligned(kHeaderBytes + kBlock);
      iovec rs{raw.get(), kHeaderBytes + kBlock};
      ASSERT_TRUE((*store)->Read(1, 0, {&rs, 1}));
      EXPECT_EQ(std::memcmp(raw.get() + kHeaderBytes, data, length), 0);
      const size_t padded = AlignUp(length, kIoAlign);
      EXPECT_EQ(std::count(raw.get() + kHeaderBytes + length, raw.get() + kHeaderBytes + padded, 0),
                static_cast<std::ptrdiff_t>(padded - length));
    }
  }
}

}  // namespace
}  // namespace spoke::agent
