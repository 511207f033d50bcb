#include "cache-agent/fs/inode_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace spoke::agent {
namespace {

TEST(InodeTable, InsertFindEraseLikeAMap) {
  InodeTable<std::string> t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.find(1), t.end());
  auto [it, created] = t.try_emplace(1);
  EXPECT_TRUE(created);
  it->second = "root";
  EXPECT_FALSE(t.try_emplace(1).second);
  t[7] = "seven";
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at(1), "root");
  EXPECT_TRUE(t.contains(7));
  EXPECT_THROW(t.at(8), std::out_of_range);
  t.erase(t.find(1));
  EXPECT_FALSE(t.contains(1));
  EXPECT_EQ(t.at(7), "seven");
  EXPECT_EQ(t.size(), 1u);
}

// Against std::map under random inserts and erases (keys that collide in a small index,
// sequential ones and hashed ones): same contents; references and iterators to entries stay
// valid across inserts and erases of others.
TEST(InodeTable, MatchesAMapUnderRandomChurn) {
  InodeTable<uint64_t> t;
  std::map<uint64_t, uint64_t> m;
  std::mt19937_64 rng(14);
  const auto key = [&rng] {
    switch (rng() % 3) {
      case 0:
        return 1 + rng() % 2000;
      case 1:
        return (rng() % 64) << 32;  // same low bits
      default:
        return rng() | 1;
    }
  };
  t[424242] = 1;
  m[424242] = 1;
  uint64_t& pinned = t.at(424242);
  auto pinned_it = t.find(424242);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t k = key();
    if (k == 424242) continue;
    if (rng() % 3 == 0) {
      auto it = t.find(k);
      ASSERT_EQ(it != t.end(), m.contains(k)) << k;
      if (it != t.end()) {
        t.erase(it);
        m.erase(k);
      }
    } else {
      t[k] = k * 3;
      m[k] = k * 3;
    }
    ASSERT_EQ(t.size(), m.size());
  }
  EXPECT_EQ(&pinned, &t.at(424242));
  EXPECT_EQ(pinned_it->first, 424242u);
  size_t seen = 0;
  for (const auto& [k, v] : t) {
    ASSERT_TRUE(m.contains(k)) << k;
    EXPECT_EQ(v, m.at(k));
    ++seen;
  }
  EXPECT_EQ(seen, m.size());
  for (const auto& [k, v] : m) {
    ASSERT_TRUE(t.contains(k)) << k;
    EXPECT_EQ(t.at(k), v);
  }
}

}  // namespace
}  // namespace spoke::agent
