#include "csi-node/mountinfo.h"

#include <gtest/gtest.h>

#include "csi-node/mounter.h"

namespace spoke::node {
namespace {

TEST(MountInfo, ParsesTheKernelExample) {
  auto e = ParseMountInfoLine(
      "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue");
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->id, 36);
  EXPECT_EQ(e->parent_id, 35);
  EXPECT_EQ(e->major, 98u);
  EXPECT_EQ(e->minor, 0u);
  EXPECT_EQ(e->root, "/mnt1");
  EXPECT_EQ(e->mount_point, "/mnt2");
  EXPECT_EQ(e->options, (std::vector<std::string>{"rw", "noatime"}));
  EXPECT_EQ(e->optional_fields, (std::vector<std::string>{"master:1"}));
  EXPECT_EQ(e->fstype, "ext3");
  EXPECT_EQ(e->source, "/dev/root");
  EXPECT_EQ(e->super_options, "rw,errors=continue");
  EXPECT_FALSE(e->read_only());
  EXPECT_TRUE(e->HasOption("noatime"));
}

TEST(MountInfo, NoOptionalFieldsAndSeveral) {
  auto none =
      ParseMountInfoLine("22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->optional_fields.empty());
  EXPECT_EQ(none->fstype, "proc");
  auto many = ParseMountInfoLine(
      "300 29 0:55 / /var/lib/kubelet/x ro,nosuid,nodev,relatime shared:7 master:3 - fuse.spoke "
      "spoke rw,user_id=0,group_id=0");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->optional_fields.size(), 2u);
  EXPECT_TRUE(many->read_only());
  EXPECT_EQ(many->fstype, "fuse.spoke");
}

TEST(MountInfo, UnescapesSpacesTabsNewlinesBackslashes) {
  auto e = ParseMountInfoLine(
      "40 22 0:60 /a\\134b /mnt/my\\040dir/tab\\011nl\\012end rw - fuse.spoke my\\040src rw");
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->mount_point, "/mnt/my dir/tab\tnl\nend");
  EXPECT_EQ(e->root, "/a\\b");
  EXPECT_EQ(e->source, "my src");
  EXPECT_EQ(UnescapeMountPath("trailing\\04"), "trailing\\04");  // not three digits: kept
  EXPECT_EQ(UnescapeMountPath("\\999"), "\\999");                // not octal: kept
}

TEST(MountInfo, MissingSuperOptionsIsAccepted) {
  auto e = ParseMountInfoLine("41 22 0:61 / /m rw - tmpfs tmpfs");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->super_options, "");
}

TEST(MountInfo, RejectsMalformedLines) {
  EXPECT_FALSE(ParseMountInfoLine("garbage"));
  EXPECT_FALSE(ParseMountInfoLine("36 35 98-0 /mnt1 /mnt2 rw - ext3 /dev/root rw"));
  EXPECT_FALSE(ParseMountInfoLine("x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw"));
  EXPECT_FALSE(ParseMountInfoLine("36 35 98:0 /mnt1 /mnt2 rw shared:1 ext3 /dev/root rw x"));
  EXPECT_FALSE(ParseMountInfoLine("36 35 98:0 /mnt1 relative rw - ext3 /dev/root rw"));
  auto all = ParseMountInfo("22 1 0:21 / /proc rw - proc proc rw\nbad line\n");
  ASSERT_FALSE(all);
  EXPECT_NE(all.error().message().find("line 2"), std::string::npos) << all.error().message();
}

TEST(MountInfo, FindMountReturnsTheTopMost) {
  auto all = ParseMountInfo(
      "22 1 0:21 / / rw - ext4 /dev/sda rw\n"
      "\n"
      "50 22 0:40 / /t rw - fuse.spoke spoke rw\n"
      "51 50 0:41 /sub /t ro - fuse.spoke spoke rw\n");
  ASSERT_TRUE(all) << all.error().message();
  ASSERT_EQ(all->size(), 3u);
  auto top = FindMount(*all, "/t");
  ASSERT_TRUE(top);
  EXPECT_EQ(top->id, 51);
  EXPECT_FALSE(FindMount(*all, "/t/x"));
  EXPECT_TRUE((*all)[1].SameTree((*all)[1]));
  EXPECT_FALSE((*all)[1].SameTree((*all)[2]));
}

TEST(MountInfo, ReadsThisProcess) {
  auto all = ReadMountInfo();
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_TRUE(FindMount(*all, "/"));
  EXPECT_FALSE(ReadMountInfo("/nonexistent/mountinfo"));
}

TEST(CleanPath, Normalises) {
  EXPECT_EQ(CleanPath("//a/./b/"), "/a/b");
  EXPECT_EQ(CleanPath("/a/b/../c"), "/a/c");
  EXPECT_EQ(CleanPath("/"), "/");
}

}  // namespace
}  // namespace spoke::node
