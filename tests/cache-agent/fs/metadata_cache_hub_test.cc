// MetadataCache as the LibnfsRemote's handle store, against a real nfs-ganesha hub: the
// handles READDIRPLUS gave live in the inodes, reads of listed files go by them, and a read
// never returns another file's bytes when names change under the cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache-agent/fs/metadata_cache.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(MetadataCacheHub, ListedFilesAreReadByTheHandleInTheirInodeAndNeverServeAnotherFile) {
  auto hub = testing::TestHub::Start();
  ASSERT_NE(hub, nullptr);
  const std::string root = hub->export_dir() + "/ds";
  fs::create_directories(root + "/a");
  for (int i = 0; i < 5; ++i) std::ofstream(root + "/a/f" + std::to_string(i)) << "f" << i;
  LibnfsRemote::Config rc;
  rc.connections = 1;
  rc.request_timeout_seconds = 5;
  rc.allow_root = true;
  auto remote = LibnfsRemote::Connect(hub->address(), "ds", rc, nullptr);
  ASSERT_TRUE(remote) << remote.error().ToString();
  ManualClock clock;
  MetadataCache meta(**remote, {}, clock);
  ASSERT_TRUE(meta.Init());
  (*remote)->UseHandleStore(&meta);
  meta.StartWalk();
  ASSERT_TRUE(meta.WaitWalk(30s));
  EXPECT_EQ(meta.handles(), 6u);              // a and its five files
  EXPECT_EQ((*remote)->handles_known(), 0u);  // no second table by path

  for (int i = 0; i < 5; ++i) {
    const std::string rel = "a/f" + std::to_string(i);
    auto a = meta.Resolve(rel);
    ASSERT_TRUE(a);
    auto r = (*remote)->ReadChecked(rel, a->attr.file_id, 0, 100);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(std::string(r->data.begin(), r->data.end()), "f" + std::to_string(i));
  }
  EXPECT_EQ((*remote)->reads_by_handle(), 5u);
  // The directory's own handle lists it (READDIRPLUS by handle: no lookups by path).
  ASSERT_TRUE(meta.ReadDir(meta.Resolve("a")->ino));

  // Replaced on the hub by another client: the cached inode still names the old file, whose
  // handle gives the old bytes or ESTALE; the new file's id never gets them, nor the reverse.
  auto old_f1 = meta.Resolve("a/f1");
  ASSERT_TRUE(old_f1);
  rc.fh_table_size = 0;  // another client: by path, its own connection
  auto plain = LibnfsRemote::Connect(hub->address(), "ds", rc, nullptr);
  ASSERT_TRUE(plain) << plain.error().ToString();
  const Credentials root_user{0, 0, {}};
  ASSERT_TRUE((*plain)->CreateAs(root_user, "a/f1.new", 0644, CreateMode::kExclusive));
  ASSERT_TRUE((*plain)->WriteAs(root_user, "a/f1.new", 0, "NEW", 3));
  ASSERT_TRUE((*plain)->RenameAs(root_user, "a/f1.new", "a/f1"));
  auto fresh = (*plain)->Stat("a/f1");
  ASSERT_TRUE(fresh);
  ASSERT_NE(fresh->file_id, old_f1->attr.file_id);
  auto stale = (*remote)->ReadChecked("a/f1", old_f1->attr.file_id, 0, 100);
  if (stale) {
    EXPECT_EQ(std::string(stale->data.begin(), stale->data.end()), "f1");
  } else {
    EXPECT_EQ(stale.error().ToErrno(), ESTALE) << stale.error().ToString();
  }
  auto now = (*remote)->ReadChecked("a/f1", fresh->file_id, 0, 100);
  ASSERT_TRUE(now) << now.error().ToString();
  EXPECT_EQ(std::string(now->data.begin(), now->data.end()), "NEW");

  // Our own rename of the directory: the files are read under the new name.
  ASSERT_TRUE((*remote)->Rename("a", "b"));
  meta.Renamed(kRootIno, "a", kRootIno, "b");
  auto f2 = meta.Resolve("b/f2");
  ASSERT_TRUE(f2);
  auto moved = (*remote)->ReadChecked("b/f2", f2->attr.file_id, 0, 100);
  ASSERT_TRUE(moved) << moved.error().ToString();
  EXPECT_EQ(std::string(moved->data.begin(), moved->data.end()), "f2");
  (*remote)->UseHandleStore(nullptr);
}

}  // namespace
}  // namespace spoke::agent
