// KernelInodeLog: what an agent that takes a mount over reads back of the inodes the kernel
// holds: the latest place of each, none dropped, whatever bytes names and handles hold, and
// nothing of a line a crash cut short.
#include "cache-agent/fs/kernel_inode_log.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace spoke::agent {
namespace {

class KernelInodeLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "inode-log-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    file_ = dir_ + "/inodes";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static KernelInodeLog::Entry Entry(uint64_t ino, uint64_t parent, std::string name) {
    KernelInodeLog::Entry e;
    e.ino = ino;
    e.parent = parent;
    e.name = std::move(name);
    e.attr.file_id = ino * 10;
    e.attr.fsid = 7;
    e.attr.mode = 0100644;
    e.attr.size = ino * 1000;
    e.attr.mtime = {1700000000, 123};
    e.fh = std::string("\x00\x01 \n\xff", 5) + std::to_string(ino);
    return e;
  }
  // The fields that make an entry, compared as text (FileAttr has no operator==).
  static std::string Text(const KernelInodeLog::Entry& e) {
    const FileAttr& a = e.attr;
    return std::to_string(e.ino) + " " + std::to_string(e.parent) + " " + e.name + " " + e.fh +
           " " + std::to_string(a.file_id) + " " + std::to_string(a.fsid) + " " +
           std::to_string(a.mode) + " " + std::to_string(a.size) + " " +
           std::to_string(a.mtime.tv_sec) + "." + std::to_string(a.mtime.tv_nsec);
  }
  std::string Contents() const {
    std::ifstream in(file_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_, file_;
};

TEST_F(KernelInodeLogTest, LoadGivesTheLatestPlaceOfEachInodeAndNoneDropped) {
  {
    auto log = KernelInodeLog::Open(file_, /*fresh=*/true);
    ASSERT_TRUE(log) << log.error().ToString();
    (*log)->Kept(Entry(5, 1, "dir with space"));
    (*log)->Kept(Entry(6, 5, "a\nb"));
    (*log)->Kept(Entry(7, 5, "gone"));
    (*log)->Kept(Entry(6, 1, "renamed"));  // replaces the first line of 6
    (*log)->Dropped(7);
    EXPECT_EQ((*log)->lines(), 5u);
  }  // written on destruction
  auto live = KernelInodeLog::Load(file_);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(Text(live[0]), Text(Entry(5, 1, "dir with space")));
  EXPECT_EQ(Text(live[1]), Text(Entry(6, 1, "renamed")));
}

TEST_F(KernelInodeLogTest, AppendsAcrossOpensUnlessFreshAndSkipsALineCutShort) {
  {
    auto log = KernelInodeLog::Open(file_, true);
    ASSERT_TRUE(log);
    (*log)->Kept(Entry(5, 1, "a"));
  }
  {
    auto log = KernelInodeLog::Open(file_, /*fresh=*/false);  // a takeover: keeps appending
    ASSERT_TRUE(log);
    EXPECT_EQ((*log)->lines(), 1u);
    (*log)->Kept(Entry(6, 1, "b"));
    (*log)->Flush();
  }
  // A crash in the middle of a write: the last line lacks its end.
  std::string whole = Contents();
  {
    std::ofstream out(file_, std::ios::app);
    out << "K 8 1 7 80 33188";
  }
  auto live = KernelInodeLog::Load(file_);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[1].name, "b");
  // A "D" line cut short drops nothing.
  {
    std::ofstream out(file_, std::ios::trunc);
    out << whole << "D 5";
  }
  EXPECT_EQ(KernelInodeLog::Load(file_).size(), 2u);

  auto fresh = KernelInodeLog::Open(file_, /*fresh=*/true);  // a new mount
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(KernelInodeLog::Load(file_).empty());
}

TEST_F(KernelInodeLogTest, RewriteKeepsOnlyTheLiveEntriesAndLaterLinesFollowThem) {
  auto log = KernelInodeLog::Open(file_, true);
  ASSERT_TRUE(log);
  for (uint64_t i = 2; i < 100; ++i) (*log)->Kept(Entry(i, 1, "f" + std::to_string(i)));
  for (uint64_t i = 2; i < 98; ++i) (*log)->Dropped(i);
  (*log)->Flush();
  (*log)->Rewrite({Entry(98, 1, "f98"), Entry(99, 1, "f99")});
  (*log)->Kept(Entry(100, 99, "new"));  // after the rewrite: kept too
  EXPECT_EQ((*log)->lines(), 3u);
  (*log)->Flush();
  auto live = KernelInodeLog::Load(file_);
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(Text(live[2]), Text(Entry(100, 99, "new")));
  const std::string text = Contents();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
}

TEST_F(KernelInodeLogTest, AFileThatCannotBeOpenedIsAnErrorNamingIt) {
  auto log = KernelInodeLog::Open(dir_ + "/no/such/dir/inodes", true);
  ASSERT_FALSE(log);
  EXPECT_NE(log.error().ToString().find("no/such/dir/inodes"), std::string::npos)
      << log.error().ToString();
}

}  // namespace
}  // namespace spoke::agent
