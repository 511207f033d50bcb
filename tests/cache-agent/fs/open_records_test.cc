#include "cache-agent/fs/open_records.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace spoke::agent {
namespace {

namespace fs = std::filesystem;

struct RecordsDir {
  RecordsDir() {
    char tmpl[] = "/tmp/spoke-open-records-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~RecordsDir() { fs::remove_all(root); }
  std::string path() const { return root + "/state/open-files/m"; }
  std::string root;
};

TEST(OpenRecords, ARecordOutlivesItsWriterAndACleanMountStartsEmpty) {
  RecordsDir dir;
  OpenRecords::Record writer{Credentials{1000, 2000, {7, 8}}, /*append=*/true};
  {
    auto r = OpenRecords::Open(dir.path(), /*clear=*/true);
    ASSERT_TRUE(r) << r.error().ToString();
    ASSERT_TRUE((*r)->Put(0xabc, writer));
    ASSERT_TRUE((*r)->Put(0xdef, OpenRecords::Record{Credentials{5, 6, {}}, false}));
  }
  EXPECT_EQ(fs::status(dir.path()).permissions() & fs::perms::all, fs::perms::owner_all);
  // The next agent, taking the mount over, finds what the first one kept.
  auto next = OpenRecords::Open(dir.path(), /*clear=*/false);
  ASSERT_TRUE(next);
  ASSERT_EQ((*next)->Find(0xabc), writer);
  EXPECT_EQ((*next)->Find(0xdef)->who.uid, 5u);
  EXPECT_FALSE((*next)->Find(0x123));
  (*next)->Forget(0xabc);
  EXPECT_FALSE((*next)->Find(0xabc));
  // A new mount of the same target: nothing of the old connection is taken for its handles.
  auto fresh = OpenRecords::Open(dir.path(), /*clear=*/true);
  ASSERT_TRUE(fresh);
  EXPECT_FALSE((*fresh)->Find(0xdef));
}

// Readers' records are links to one file per identity: each found alone, each removed alone,
// one file written per identity (also by the next agent, which knows none of them yet).
TEST(OpenRecords, ReadersOfOneIdentityShareOneRecordFile) {
  RecordsDir dir;
  const OpenRecords::Record alice{Credentials{1000, 1000, {27}}, false};
  const OpenRecords::Record bob{Credentials{1001, 1001, {}}, false};
  auto r = OpenRecords::Open(dir.path(), /*clear=*/true);
  ASSERT_TRUE(r);
  ASSERT_TRUE((*r)->PutShared(1, alice));
  ASSERT_TRUE((*r)->PutShared(2, alice));
  ASSERT_TRUE((*r)->PutShared(3, bob));
  auto next = OpenRecords::Open(dir.path(), /*clear=*/false);
  ASSERT_TRUE(next);
  ASSERT_TRUE((*next)->PutShared(4, alice));
  EXPECT_EQ((*next)->Find(1), alice);
  EXPECT_EQ((*next)->Find(4), alice);
  EXPECT_EQ((*next)->Find(3), bob);
  (*next)->ForgetShared(1);
  EXPECT_FALSE((*next)->Find(1));
  EXPECT_EQ((*next)->Find(2), alice) << "the others keep theirs";
  int identity_files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    identity_files += e.path().filename().string().starts_with("id-") ? 1 : 0;
  }
  EXPECT_EQ(identity_files, 2);
}

TEST(OpenRecords, APartOfARecordIsNoRecord) {
  RecordsDir dir;
  auto r = OpenRecords::Open(dir.path(), true);
  ASSERT_TRUE(r);
  ASSERT_TRUE((*r)->Put(1, OpenRecords::Record{Credentials{1000, 1000, {}}, false}));
  // What a torn write would leave (the agent writes a temp file and renames it: it cannot).
  for (const char* text : {"1000 1000", "", "1000 x 0\n", "1000 1000 2\n", "1000 1000 0 y\n"}) {
    std::ofstream(dir.path() + "/0000000000000001", std::ios::trunc) << text;
    EXPECT_FALSE((*r)->Find(1)) << "'" << text << "'";
  }
}

TEST(OpenRecords, OnlyTheGroupsTheHubCanSeeAreKept) {
  RecordsDir dir;
  auto r = OpenRecords::Open(dir.path(), true);
  ASSERT_TRUE(r);
  Credentials many{1, 1, {}};
  for (uint32_t g = 100; g < 140; ++g) many.groups.push_back(g);
  ASSERT_TRUE((*r)->Put(2, OpenRecords::Record{many, false}));
  auto got = (*r)->Find(2);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->who.groups.size(), 16u);  // AUTH_SYS
  EXPECT_EQ(got->who.groups.front(), 100u);
}

TEST(OpenRecords, AStateDirectoryThatCannotBeMadeIsAnError) {
  RecordsDir dir;
  std::ofstream(dir.root + "/file") << "x";
  auto r = OpenRecords::Open(dir.root + "/file/open-files", true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("file"), std::string::npos) << r.error().ToString();
}

}  // namespace
}  // namespace spoke::agent
