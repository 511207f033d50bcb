// HandleTable: bounded by least recent use; a path's tree drops as one range.
#include "cache-agent/remote/handle_table.h"

#include <gtest/gtest.h>

#include <string>

namespace spoke::agent {
namespace {

TEST(HandleTable, KeepsTheMostRecentlyUsedWithinItsCapacity) {
  HandleTable t(3);
  t.Put("a", "fh-a", 1);
  t.Put("b", "fh-b", 2);
  t.Put("c", "fh-c", 3);
  ASSERT_TRUE(t.Find("a"));  // "b" is now the least recently used
  t.Put("d", "fh-d", 4);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_FALSE(t.Find("b"));
  ASSERT_TRUE(t.Find("a"));
  EXPECT_EQ(t.Find("a")->fh, "fh-a");
  EXPECT_EQ(t.Find("d")->file_id, 4u);
  // A new handle for a known path replaces the old one (a file replaced under its name).
  t.Put("a", "fh-a2", 9);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Find("a")->fh, "fh-a2");
  EXPECT_EQ(t.Find("a")->file_id, 9u);
}

TEST(HandleTable, DropTreeTakesThePathAndWhatIsUnderItOnly) {
  HandleTable t(100);
  for (const char* p : {"a", "a/x", "a/y/z", "ab", "a0", "b/a"}) t.Put(p, p, 1);
  t.DropTree("a");
  EXPECT_FALSE(t.Find("a"));
  EXPECT_FALSE(t.Find("a/x"));
  EXPECT_FALSE(t.Find("a/y/z"));
  EXPECT_TRUE(t.Find("ab"));
  EXPECT_TRUE(t.Find("a0"));
  EXPECT_TRUE(t.Find("b/a"));
  EXPECT_EQ(t.size(), 3u);
  t.DropTree("b/a");  // a file: itself only
  EXPECT_EQ(t.size(), 2u);
  // Dropped entries leave the recency list too: the table keeps filling to capacity.
  for (int i = 0; i < 200; ++i) t.Put("f" + std::to_string(i), "h", 1);
  EXPECT_EQ(t.size(), 100u);
}

TEST(HandleTable, CapacityZeroKeepsNothing) {
  HandleTable t(0);
  t.Put("a", "fh", 1);
  EXPECT_FALSE(t.Find("a"));
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace spoke::agent
