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

}  // namespace
}  // namespace spoke::agent
