#include "cache-agent/fs/dir_entries.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace spoke::agent {
namespace {

TEST(CompactName, KeepsShortAndLongNames) {
  for (const std::string& s : std::vector<std::string>{
           std::string(), "a", std::string(15, 'x'), std::string(16, 'y'), std::string(255, 'z')}) {
    CompactName n(s);
    EXPECT_EQ(n.view(), s);
    CompactName copy(n);
    EXPECT_EQ(copy.view(), s);
    CompactName moved(std::move(copy));
    EXPECT_EQ(moved.view(), s);
    moved = std::string(40, 'q');
    EXPECT_EQ(moved.view(), std::string(40, 'q'));
    moved = n;
    EXPECT_EQ(moved.view(), s);
    moved = moved.view();  // from its own bytes
    EXPECT_EQ(moved.view(), s);
  }
}

std::vector<std::pair<std::string, uint64_t>> Listed(const DirEntries& d) {
  std::vector<std::pair<std::string, uint64_t>> out;
  d.ForEach([&](std::string_view name, uint64_t ino) { out.emplace_back(name, ino); });
  return out;
}

TEST(DirEntries, KeepsListingOrderAcrossReplaceAndRemove) {
  DirEntries d;
  EXPECT_EQ(d.Set("b", 2), 0u);
  EXPECT_EQ(d.Set("a", 1), 0u);
  EXPECT_EQ(d.Set("a-very-long-name-beyond-inline", 3), 0u);
  EXPECT_EQ(d.Set("b", 20), 2u);  // keeps its place
  EXPECT_EQ(d.Find("b"), 20u);
  EXPECT_EQ(d.Find("nope"), 0u);
  EXPECT_EQ(d.Erase("a"), 1u);
  EXPECT_EQ(d.Erase("a"), 0u);
  EXPECT_EQ(d.Find("a"), 0u);
  EXPECT_EQ(d.Set("a", 4), 0u);  // back, in its old place
  EXPECT_EQ(d.Set("c", 5), 0u);
  using V = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(Listed(d), (V{{"b", 20}, {"a", 4}, {"a-very-long-name-beyond-inline", 3}, {"c", 5}}));
  EXPECT_EQ(d.size(), 4u);
}

// Against std::map under random operations: every name found, listing order kept, and the
// memory of removed names given back (create/unlink cycles leave the directory's size flat).
TEST(DirEntries, MatchesAMapUnderRandomOperationsAndGivesBackRemovedNames) {
  DirEntries d;
  std::map<std::string, uint64_t> want;
  std::vector<std::string> order;  // first creations
  std::set<std::string> removed;
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    std::string name = "f" + std::to_string(rng() % 5000);
    if (rng() % 3 == 0) {
      EXPECT_EQ(d.Erase(name), want.contains(name) ? want[name] : 0u);
      if (want.erase(name)) removed.insert(name);
    } else {
      uint64_t ino = 1 + rng() % 1000000;
      EXPECT_EQ(d.Set(name, ino), want.contains(name) ? want[name] : 0u);
      if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
      want[name] = ino;
    }
  }
  ASSERT_EQ(d.size(), want.size());
  for (const auto& [name, ino] : want) EXPECT_EQ(d.Find(name), ino) << name;
  // Names never removed are listed in creation order (a removed one comes back in its old
  // place or, after a compaction dropped it, last).
  auto listed = Listed(d);
  ASSERT_EQ(listed.size(), want.size());
  std::vector<std::string> kept_listed, kept_created;
  for (const auto& [name, ino] : listed) {
    if (!removed.contains(name)) kept_listed.push_back(name);
  }
  for (const auto& name : order) {
    if (!removed.contains(name) && want.contains(name)) kept_created.push_back(name);
  }
  EXPECT_EQ(kept_listed, kept_created);

  // Cycles: 10 rounds of 10,000 names created and removed.
  DirEntries c;
  size_t after_first = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 10000; ++i) c.Set("n" + std::to_string(round) + "_" + std::to_string(i), 1);
    for (int i = 0; i < 10000; ++i) c.Erase("n" + std::to_string(round) + "_" + std::to_string(i));
    if (round == 0) after_first = c.HeapBytes();
  }
  EXPECT_TRUE(c.empty());
  EXPECT_LE(c.HeapBytes(), after_first);
}

// 24 bytes a slot plus at most 8 of index per entry once listed (a listing reserves its size).
TEST(DirEntries, CostsAtMost40BytesPerEntryOfAListing) {
  DirEntries d;
  constexpr int kNames = 100000;
  d.Reserve(kNames);
  for (int i = 0; i < kNames; ++i) d.Set("f" + std::to_string(i) + ".jpg", i + 1);
  EXPECT_LE(d.HeapBytes() / kNames, 40u);
}

TEST(CompactHandle, KeepsTheBytesAndNothingWhenEmpty) {
  CompactHandle h;
  EXPECT_TRUE(h.empty());
  h.Assign(std::string("\0\1fh", 4));
  EXPECT_EQ(h.view(), std::string("\0\1fh", 4));
  CompactHandle moved(std::move(h));
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(moved.view().size(), 4u);
  moved.Clear();
  EXPECT_TRUE(moved.empty());
  moved.Assign(std::string(300, 'x'));  // not an NFSv3 handle: not kept
  EXPECT_TRUE(moved.empty());
}

}  // namespace
}  // namespace spoke::agent
