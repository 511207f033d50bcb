#include "cache-agent/prefetch/sequential_predictor.h"

#include <gtest/gtest.h>

namespace spoke::agent {
namespace {

constexpr uint32_t kMiB = 1 << 20;

ReadEvent Read(uint64_t off, uint64_t len, uint64_t size = 1000ull * kMiB) {
  ReadEvent e;
  e.handle = 1;
  e.path = "f";
  e.file_id = 9;
  e.version = 3;
  e.file_size = size;
  e.offset = off;
  e.length = len;
  return e;
}

TEST(SequentialPredictor, WindowGrowsWhileSequentialAndResetsOnFarSeek) {
  SequentialPredictor p({2, 64});
  p.OnOpen({1, "f", 9, 3, 1000ull * kMiB, {}});
  p.OnRead(Read(0, kMiB));
  EXPECT_EQ(p.WindowBlocks(1), 2u);
  std::vector<uint32_t> windows;
  for (uint64_t i = 1; i < 8; ++i) {
    p.OnRead(Read(i * kMiB, kMiB));
    windows.push_back(p.WindowBlocks(1));
  }
  EXPECT_EQ(windows, (std::vector<uint32_t>{4, 8, 16, 32, 64, 64, 64}));
  std::vector<PrefetchRequest> out;
  p.Predict(1000ull * kMiB, kMiB, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_block, 8u);
  EXPECT_EQ(out[0].block_count, 64u);
  EXPECT_EQ(out[0].expert, SequentialPredictor::kExpertId);
  EXPECT_EQ(out[0].version, 3u);

  p.OnRead(Read(500ull * kMiB, kMiB));  // far seek
  EXPECT_EQ(p.WindowBlocks(1), 2u);
  out.clear();
  p.Predict(1000ull * kMiB, kMiB, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_block, 501u);
  EXPECT_EQ(out[0].block_count, 2u);
}

TEST(SequentialPredictor, RespectsBudgetEofAndClose) {
  SequentialPredictor p({2, 64});
  for (uint64_t i = 0; i < 6; ++i) p.OnRead(Read(i * kMiB, kMiB, 10ull * kMiB));
  std::vector<PrefetchRequest> out;
  p.Predict(3ull * kMiB, kMiB, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_block, 6u);
  EXPECT_EQ(out[0].block_count, 3u);  // budget
  out.clear();
  p.OnRead(Read(6 * kMiB, kMiB, 10ull * kMiB));
  p.Predict(100ull * kMiB, kMiB, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].block_count, 3u);  // end of file
  out.clear();
  p.Predict(100ull * kMiB, kMiB, &out);
  EXPECT_TRUE(out.empty());  // nothing new read since
  p.OnClose({1, {}});
  EXPECT_EQ(p.WindowBlocks(1), 0u);
}

TEST(SequentialPredictor, SmallSequentialReadsGrowTheWindowToo) {
  SequentialPredictor p({2, 16});
  for (uint64_t off = 0; off < 2 * kMiB; off += 128 * 1024) p.OnRead(Read(off, 128 * 1024));
  EXPECT_EQ(p.WindowBlocks(1), 16u);
}

ReadEvent ReadOf(uint64_t handle, uint64_t off, uint64_t size) {
  ReadEvent e = Read(off, kMiB, size);
  e.handle = handle;
  return e;
}

// Reads file `handle` of `blocks` blocks from its start to `upto_blocks`, then closes it.
void ReadAndClose(SequentialPredictor& p, uint64_t handle, uint64_t blocks, uint64_t upto_blocks) {
  p.OnOpen({handle, "f", 9, 3, blocks * kMiB, {}});
  for (uint64_t i = 0; i < upto_blocks; ++i) p.OnRead(ReadOf(handle, i * kMiB, blocks * kMiB));
  p.OnClose({handle, {}});
}

TEST(SequentialPredictor, FilesReadWholeOneAfterAnotherStartTheNextAtTheLargestWindow) {
  SequentialPredictor p({2, 64, 2});
  ReadAndClose(p, 1, 14, 14);
  p.OnOpen({2, "f", 9, 3, 14 * kMiB, {}});
  p.OnRead(ReadOf(2, 0, 14 * kMiB));
  EXPECT_EQ(p.WindowBlocks(2), 2u) << "one file read whole is not yet a pattern";
  p.OnClose({2, {}});  // left after its first block: the count starts again
  ReadAndClose(p, 3, 14, 14);
  ReadAndClose(p, 4, 14, 14);
  // Two shards read whole in a row: the next one's first read asks for all of it.
  p.OnOpen({5, "f", 9, 3, 14 * kMiB, {}});
  p.OnRead(ReadOf(5, 0, 14 * kMiB));
  EXPECT_EQ(p.WindowBlocks(5), 64u);
  std::vector<PrefetchRequest> out;
  p.Predict(1000ull * kMiB, kMiB, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_block, 1u);
  EXPECT_EQ(out[0].block_count, 13u);  // the rest of the file, not past its end

  // A file opened elsewhere than its start still starts small, and a reader that seeks away
  // from the start and closes ends the pattern.
  p.OnOpen({6, "f", 9, 3, 100 * kMiB, {}});
  p.OnRead(ReadOf(6, 50 * kMiB, 100 * kMiB));
  EXPECT_EQ(p.WindowBlocks(6), 2u);
  p.OnClose({6, {}});
  p.OnOpen({7, "f", 9, 3, 100 * kMiB, {}});
  p.OnRead(ReadOf(7, 0, 100 * kMiB));
  EXPECT_EQ(p.WindowBlocks(7), 2u);
}

TEST(SequentialPredictor, OpensWithoutReadsDoNotEndThePattern) {
  SequentialPredictor p({2, 64, 2});
  ReadAndClose(p, 1, 14, 14);
  ReadAndClose(p, 2, 14, 14);
  ReadAndClose(p, 3, 14, 0);  // a stat-like open
  p.OnOpen({4, "f", 9, 3, 14 * kMiB, {}});
  p.OnRead(ReadOf(4, 0, 14 * kMiB));
  EXPECT_EQ(p.WindowBlocks(4), 64u);
}

TEST(SequentialPredictor, WithoutLearningEveryFileStartsSmall) {
  SequentialPredictor p({2, 64, 0});
  for (uint64_t h = 1; h <= 4; ++h) ReadAndClose(p, h, 14, 14);
  p.OnOpen({5, "f", 9, 3, 14 * kMiB, {}});
  p.OnRead(ReadOf(5, 0, 14 * kMiB));
  EXPECT_EQ(p.WindowBlocks(5), 2u);
}

}  // namespace
}  // namespace spoke::agent
