// The agent's operator new (cache-agent/exe/page_aligned_new.cc), linked into this test as into
// the agent: large allocations start on a page, so that a block's vector goes to the cache's
// O_DIRECT write in place.
#include "cache-agent/exe/page_aligned_new.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace {

bool PageAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4096 == 0; }

TEST(PageAlignedNewTest, BlockSizedVectorsStartOnAPage) {
  if (!spoke::agent::kPageAlignedNew) GTEST_SKIP() << "sanitizer build: its runtime's new is kept";
  for (int i = 0; i < 8; ++i) {
    std::vector<char> block;
    block.reserve(1 << 20);  // a hub reply's block
    EXPECT_TRUE(PageAligned(block.data()));
    std::vector<char> sample(110 * 1000);  // a small file's block
    EXPECT_TRUE(PageAligned(sample.data()));
    auto array = std::make_unique<char[]>(64 * 1024);
    EXPECT_TRUE(PageAligned(array.get()));
    std::unique_ptr<char[]> nothrow(new (std::nothrow) char[256 * 1024]);
    EXPECT_TRUE(PageAligned(nothrow.get()));
  }
}

TEST(PageAlignedNewTest, SmallAllocationsAndFailuresBehaveAsUsual) {
  std::vector<std::unique_ptr<int>> small;
  for (int i = 0; i < 1000; ++i) small.push_back(std::make_unique<int>(i));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(*small[i], i);
  // An impossible size throws bad_alloc (nothrow: nullptr), as the standard new does.
  const size_t huge = size_t{1} << 62;
  EXPECT_THROW((void)::operator new(huge), std::bad_alloc);
  EXPECT_EQ(::operator new(huge, std::nothrow), nullptr);
}

}  // namespace
