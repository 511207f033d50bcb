// Spare block vectors: a block-sized vector let go is handed to the next taker (same memory,
// empty), others are freed, and at most kMaxSpareVectors are kept.
#include "common/spare_vectors.h"

#include <gtest/gtest.h>

#include <thread>

namespace spoke {
namespace {

// Empties the process-wide stock for a test that counts it.
void DrainStock() {
  std::vector<std::vector<char>> taken;
  while (SpareVectorCount() > 0) taken.push_back(TakeSpareVector(kSpareVectorCapacity));
}

TEST(SpareVectors, ABlockLetGoIsTheNextTakersMemoryEmpty) {
  DrainStock();
  std::vector<char> first = TakeSpareVector(kSpareVectorCapacity - 100);
  EXPECT_TRUE(first.empty());
  ASSERT_EQ(first.capacity(), kSpareVectorCapacity) << "reserved whole, so it can be kept";
  first.assign(kSpareVectorCapacity - 100, 'x');
  const char* memory = first.data();
  GiveSpareVector(std::move(first));
  EXPECT_TRUE(first.empty());  // NOLINT(bugprone-use-after-move): left empty, as promised
  EXPECT_EQ(SpareVectorCount(), 1u);
  std::vector<char> next = TakeSpareVector(kSpareVectorCapacity);
  EXPECT_EQ(next.data(), memory);
  EXPECT_TRUE(next.empty()) << "no bytes of the last block";
  EXPECT_EQ(SpareVectorCount(), 0u);
}

TEST(SpareVectors, OtherSizesAreNeitherTakenNorKept) {
  DrainStock();
  GiveSpareVector(TakeSpareVector(kSpareVectorCapacity));
  ASSERT_EQ(SpareVectorCount(), 1u);
  std::vector<char> small = TakeSpareVector(4096);  // a small file's block: its own size
  EXPECT_LT(small.capacity(), kSpareVectorCapacity);
  EXPECT_EQ(SpareVectorCount(), 1u);
  std::vector<char> big = TakeSpareVector(4 * kSpareVectorCapacity);
  EXPECT_GE(big.capacity(), 4 * kSpareVectorCapacity);
  GiveSpareVector(std::move(small));
  GiveSpareVector(std::move(big));
  EXPECT_EQ(SpareVectorCount(), 1u);
}

TEST(SpareVectors, AtMostTheBoundIsKept) {
  DrainStock();
  std::vector<std::vector<char>> held;
  for (size_t i = 0; i < kMaxSpareVectors + 5; ++i)
    held.push_back(TakeSpareVector(kSpareVectorCapacity));
  for (auto& v : held) GiveSpareVector(std::move(v));
  EXPECT_EQ(SpareVectorCount(), kMaxSpareVectors);
}

TEST(SpareVectors, TakersAndGiversOnManyThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        std::vector<char> v = TakeSpareVector(kSpareVectorCapacity);
        ASSERT_TRUE(v.empty());
        v.assign(1000, static_cast<char>(t));
        GiveSpareVector(std::move(v));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(SpareVectorCount(), kMaxSpareVectors);
}

}  // namespace
}  // namespace spoke
