// LibnfsRemote's POSIX operations and caller identity against a real nfs-ganesha hub
// (No_Root_Squash export): what reaches the hub is checked in the export directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cache-agent/remote/libnfs_remote.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

namespace fs = std::filesystem;

const Credentials kRoot{0, 0, {}};
const Credentials kAlice{1000, 1000, {}};

LibnfsRemote::Config TestConfig() {
  LibnfsRemote::Config c;
  c.connections = 1;
  c.inflight_per_connection = 16;
  c.request_timeout_seconds = 5;
  c.retries = 2;
  c.allow_root = true;
  return c;
}

struct stat HubStat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

std::string ReadHubFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class LibnfsRemotePosix : public ::testing::Test {
 protected:
  void SetUp() override {
    hub_ = testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
    // A directory anyone may create in, like a scratch volume's root.
    shared_ = hub_->export_dir() + "/shared";
    fs::create_directories(shared_);
    fs::permissions(shared_, fs::perms::all);
  }
  std::unique_ptr<LibnfsRemote> Connect(LibnfsRemote::Config config = TestConfig(),
                                        const std::string& root = "") {
    auto r = LibnfsRemote::Connect(hub_->address(), root, config, nullptr);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? std::move(*r) : nullptr;
  }
  std::string Hub(const std::string& rel) const { return hub_->export_dir() + "/" + rel; }
  std::unique_ptr<testing::TestHub> hub_;
  std::string shared_;
};

TEST_F(LibnfsRemotePosix, ExclusiveCreateFromTwoClientsHasOneWinner) {
  auto a = Connect();
  auto b = Connect();
  ASSERT_TRUE(a && b);
  for (int round = 0; round < 5; ++round) {
    std::string name = "shared/lock" + std::to_string(round);
    std::atomic<int> won{0}, exists{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      LibnfsRemote* remote = (t % 2 == 0) ? a.get() : b.get();
      threads.emplace_back([&, remote] {
        auto r = remote->CreateAs(kAlice, name, 0644, CreateMode::kExclusive);
        if (r) {
          won++;
        } else if (r.error().code() == Code::kAlreadyExists && r.error().ToErrno() == EEXIST) {
          exists++;
        } else {
          other++;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(won.load(), 1) << name;
    EXPECT_EQ(exists.load(), 5) << name;
    EXPECT_EQ(other.load(), 0) << name;
  }
  // Without O_EXCL an existing file is kept, contents included.
  ASSERT_TRUE(a->WriteAs(kAlice, "shared/lock0", 0, "abc", 3));
  auto again = b->CreateAs(kAlice, "shared/lock0", 0644, CreateMode::kUnchecked);
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(ReadHubFile(Hub("shared/lock0")), "abc");
}

TEST_F(LibnfsRemotePosix, FilesAreOwnedByTheCaller) {
  auto remote = Connect();
  ASSERT_TRUE(remote);
  auto f = remote->CreateAs(kAlice, "shared/alice.txt", 0640, CreateMode::kExclusive);
  ASSERT_TRUE(f) << f.error().ToString();
  EXPECT_EQ(f->uid, 1000u);
  EXPECT_EQ(f->gid, 1000u);
  EXPECT_EQ(HubStat(Hub("shared/alice.txt")).st_uid, 1000u);
  EXPECT_EQ(HubStat(Hub("shared/alice.txt")).st_gid, 1000u);
  auto d = remote->MkdirAs(Credentials{1001, 1002, {}}, "shared/bobdir", 0755);
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(HubStat(Hub("shared/bobdir")).st_uid, 1001u);
  EXPECT_EQ(HubStat(Hub("shared/bobdir")).st_gid, 1002u);

  // The hub's own permission checks apply: alice may not write root's 0644 file.
  std::ofstream(Hub("shared/roots.txt")) << "root";
  auto w = remote->WriteAs(kAlice, "shared/roots.txt", 0, "x", 1);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), Code::kPermissionDenied) << w.error().ToString();
  EXPECT_EQ(w.error().ToErrno(), EACCES);
  EXPECT_EQ(ReadHubFile(Hub("shared/roots.txt")), "root");
  auto rm = remote->UnlinkAs(Credentials{1001, 1001, {}}, "shared/alice.txt");
  EXPECT_TRUE(rm) << "shared/ is world-writable without sticky bit";

  // Supplementary groups reach the hub: a 0770 directory of group 2000.
  fs::create_directories(Hub("team"));
  ASSERT_EQ(::chown(Hub("team").c_str(), 0, 2000), 0);
  fs::permissions(Hub("team"), fs::perms::owner_all | fs::perms::group_all);
  auto denied = remote->CreateAs(kAlice, "team/x", 0644, CreateMode::kExclusive);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().ToErrno(), EACCES) << denied.error().ToString();
  auto member =
      remote->CreateAs(Credentials{1000, 1000, {5, 2000}}, "team/x", 0644, CreateMode::kExclusive);
  ASSERT_TRUE(member) << member.error().ToString();
  EXPECT_EQ(HubStat(Hub("team/x")).st_uid, 1000u);
  EXPECT_GE(remote->IdentityConnections(), 3u);
}

TEST_F(LibnfsRemotePosix, RootIsMappedUnlessAllowedAndFixedIdentitySquashesAll) {
  auto config = TestConfig();
  config.allow_root = false;
  config.fixed_uid = 4242;
  config.fixed_gid = 4343;
  auto remote = Connect(config);
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->EffectiveIdentity(kRoot).uid, 4242u);
  ASSERT_TRUE(remote->CreateAs(kRoot, "shared/by-root", 0644, CreateMode::kExclusive));
  EXPECT_EQ(HubStat(Hub("shared/by-root")).st_uid, 4242u);
  EXPECT_EQ(HubStat(Hub("shared/by-root")).st_gid, 4343u);
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/by-alice", 0644, CreateMode::kExclusive));
  EXPECT_EQ(HubStat(Hub("shared/by-alice")).st_uid, 1000u);

  config.identity_mode = LibnfsRemote::Config::IdentityMode::kFixed;
  auto squash = Connect(config);
  ASSERT_TRUE(squash);
  ASSERT_TRUE(squash->CreateAs(kAlice, "shared/squashed", 0644, CreateMode::kExclusive));
  EXPECT_EQ(HubStat(Hub("shared/squashed")).st_uid, 4242u);

  auto allowed = Connect();  // allow_root
  ASSERT_TRUE(allowed);
  ASSERT_TRUE(allowed->CreateAs(kRoot, "shared/real-root", 0644, CreateMode::kExclusive));
  EXPECT_EQ(HubStat(Hub("shared/real-root")).st_uid, 0u);
}

TEST_F(LibnfsRemotePosix, LinksNodesAndReadlink) {
  auto remote = Connect();
  ASSERT_TRUE(remote);
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/f", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(remote->WriteAs(kAlice, "shared/f", 0, "hello", 5));

  auto s = remote->SymlinkAs(kAlice, "../elsewhere/f", "shared/sym");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_TRUE(s->is_symlink());
  EXPECT_EQ(s->uid, 1000u);
  EXPECT_EQ(fs::read_symlink(Hub("shared/sym")).string(), "../elsewhere/f");
  auto target = remote->ReadLink("shared/sym");
  ASSERT_TRUE(target) << target.error().ToString();
  EXPECT_EQ(*target, "../elsewhere/f");
  auto not_link = remote->ReadLink("shared/f");
  ASSERT_FALSE(not_link);
  EXPECT_EQ(not_link.error().ToErrno(), EINVAL) << not_link.error().ToString();

  auto l = remote->LinkAs(kAlice, "shared/f", "shared/f2");
  ASSERT_TRUE(l) << l.error().ToString();
  auto orig = remote->Stat("shared/f");
  ASSERT_TRUE(orig);
  EXPECT_EQ(l->file_id, orig->file_id);
  EXPECT_EQ(l->nlink, 2u);
  EXPECT_EQ(HubStat(Hub("shared/f2")).st_ino, HubStat(Hub("shared/f")).st_ino);
  auto dup = remote->LinkAs(kAlice, "shared/f", "shared/f2");
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code(), Code::kAlreadyExists);

  auto fifo = remote->MknodAs(kAlice, "shared/pipe", S_IFIFO | 0640, 0);
  ASSERT_TRUE(fifo) << fifo.error().ToString();
  EXPECT_EQ(fifo->mode & S_IFMT, static_cast<uint32_t>(S_IFIFO));
  struct stat hs = HubStat(Hub("shared/pipe"));
  EXPECT_TRUE(S_ISFIFO(hs.st_mode));
  EXPECT_EQ(hs.st_mode & 0777, 0640u);
  EXPECT_EQ(hs.st_uid, 1000u);
}

TEST_F(LibnfsRemotePosix, SetAttrTruncateAppendAndTimes) {
  auto remote = Connect();
  ASSERT_TRUE(remote);
  std::string big(1 << 20, 'x');
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/ckpt", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(remote->WriteAs(kAlice, "shared/ckpt", 0, big.data(), big.size()));

  // open(O_TRUNC) then a shorter write: only the new bytes remain.
  SetAttrRequest trunc;
  trunc.size = 0;
  auto t = remote->SetAttrAs(kAlice, "shared/ckpt", trunc);
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_EQ(t->size, 0u);
  ASSERT_TRUE(remote->WriteAs(kAlice, "shared/ckpt", 0, "abc\n", 4));
  EXPECT_EQ(ReadHubFile(Hub("shared/ckpt")), "abc\n");

  // O_APPEND writes at the hub's size, also after another client grew the file.
  auto other = Connect();
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->WriteAs(kAlice, "shared/ckpt", 4, "more", 4));
  auto end = remote->AppendAs(kAlice, "shared/ckpt", "+tail", 5);
  ASSERT_TRUE(end) << end.error().ToString();
  EXPECT_EQ(*end, 13u);
  EXPECT_EQ(ReadHubFile(Hub("shared/ckpt")), "abc\nmore+tail");

  // chmod/chown by the owner and by root; a non-owner chmod is refused.
  SetAttrRequest mode;
  mode.mode = 0600;
  ASSERT_TRUE(remote->SetAttrAs(kAlice, "shared/ckpt", mode));
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_mode & 0777, 0600u);
  auto not_owner = remote->SetAttrAs(Credentials{1001, 1001, {}}, "shared/ckpt", mode);
  ASSERT_FALSE(not_owner);
  EXPECT_EQ(not_owner.error().code(), Code::kPermissionDenied);
  SetAttrRequest own;
  own.uid = 1234;
  own.gid = 5678;
  auto chowned = remote->SetAttrAs(kRoot, "shared/ckpt", own);
  ASSERT_TRUE(chowned) << chowned.error().ToString();
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_uid, 1234u);
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_gid, 5678u);

  // utimensat: explicit mtime with atime omitted keeps atime.
  SetAttrRequest times;
  times.atime = timespec{1000, 0};
  times.mtime = timespec{2000, 0};
  ASSERT_TRUE(remote->SetAttrAs(kRoot, "shared/ckpt", times));
  SetAttrRequest omit;
  omit.atime = timespec{0, UTIME_OMIT};
  omit.mtime = timespec{3000, 0};
  auto o = remote->SetAttrAs(kRoot, "shared/ckpt", omit);
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_atime, 1000);
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_mtime, 3000);
  // UTIME_NOW for both: the hub's clock (same machine here).
  SetAttrRequest now;
  now.atime = timespec{0, UTIME_NOW};
  now.mtime = timespec{0, UTIME_NOW};
  time_t before = ::time(nullptr);
  ASSERT_TRUE(remote->SetAttrAs(kRoot, "shared/ckpt", now));
  EXPECT_GE(HubStat(Hub("shared/ckpt")).st_mtime, before - 1);
  EXPECT_GE(HubStat(Hub("shared/ckpt")).st_atime, before - 1);
  // Both omitted: nothing changes.
  SetAttrRequest none;
  none.atime = timespec{0, UTIME_OMIT};
  none.mtime = timespec{0, UTIME_OMIT};
  ASSERT_TRUE(remote->SetAttrAs(kRoot, "shared/ckpt", omit));
  ASSERT_TRUE(remote->SetAttrAs(kRoot, "shared/ckpt", none));
  EXPECT_EQ(HubStat(Hub("shared/ckpt")).st_mtime, 3000);
}

TEST_F(LibnfsRemotePosix, RenameOverAndRmdirNotEmpty) {
  auto remote = Connect();
  ASSERT_TRUE(remote);
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/ckpt.pt", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(remote->WriteAs(kAlice, "shared/ckpt.pt", 0, "old-old-old", 11));
  ASSERT_TRUE(remote->Read("shared/ckpt.pt", 0, 100));  // a handle is cached now
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/ckpt.tmp", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(remote->WriteAs(kAlice, "shared/ckpt.tmp", 0, "new", 3));
  auto r = remote->RenameAs(kAlice, "shared/ckpt.tmp", "shared/ckpt.pt");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(ReadHubFile(Hub("shared/ckpt.pt")), "new");
  EXPECT_FALSE(fs::exists(Hub("shared/ckpt.tmp")));
  auto back = remote->Read("shared/ckpt.pt", 0, 100);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(std::string(back->begin(), back->end()), "new");

  ASSERT_TRUE(remote->MkdirAs(kAlice, "shared/d1", 0755));
  ASSERT_TRUE(remote->MkdirAs(kAlice, "shared/d2", 0755));
  ASSERT_TRUE(remote->CreateAs(kAlice, "shared/d1/inner", 0644, CreateMode::kExclusive));
  // Onto an empty directory: replaced.
  ASSERT_TRUE(remote->RenameAs(kAlice, "shared/d1", "shared/d2"));
  EXPECT_TRUE(fs::exists(Hub("shared/d2/inner")));
  // Onto a non-empty one, and rmdir of a non-empty one: ENOTEMPTY.
  ASSERT_TRUE(remote->MkdirAs(kAlice, "shared/d3", 0755));
  auto onto_full = remote->RenameAs(kAlice, "shared/d3", "shared/d2");
  ASSERT_FALSE(onto_full);
  EXPECT_EQ(onto_full.error().ToErrno(), ENOTEMPTY) << onto_full.error().ToString();
  auto rm = remote->RmdirAs(kAlice, "shared/d2");
  ASSERT_FALSE(rm);
  EXPECT_EQ(rm.error().code(), Code::kNotEmpty) << rm.error().ToString();
  EXPECT_EQ(rm.error().ToErrno(), ENOTEMPTY);

  auto st = remote->StatFs();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_GT(st->total_bytes, 0u);
  EXPECT_GT(st->total_files, 0u);
}

// Another node replaces a file by rename (the checkpoint pattern) while this node has a
// handle cached for the name: a read of the old file id never returns the new file's
// bytes, and a read of the new id never returns the old file's bytes through the cached
// handle.
TEST_F(LibnfsRemotePosix, CheckedReadNeverServesAnotherFileAfterRenameOnTheHub) {
  auto node = Connect();
  auto other = Connect();
  ASSERT_TRUE(node && other);
  ASSERT_TRUE(other->CreateAs(kAlice, "shared/ckpt.pt", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(other->WriteAs(kAlice, "shared/ckpt.pt", 0, "old-bytes", 9));
  auto old_attr = node->Stat("shared/ckpt.pt");
  ASSERT_TRUE(old_attr);
  auto first = node->ReadChecked("shared/ckpt.pt", old_attr->file_id, 0, 100);
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(std::string(first->data.begin(), first->data.end()), "old-bytes");
  EXPECT_EQ(first->attr.file_id, old_attr->file_id);
  EXPECT_EQ(first->attr.ContentVersion(), old_attr->ContentVersion());

  ASSERT_TRUE(other->CreateAs(kAlice, "shared/ckpt.new", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(other->WriteAs(kAlice, "shared/ckpt.new", 0, "NEW", 3));
  ASSERT_TRUE(other->RenameAs(kAlice, "shared/ckpt.new", "shared/ckpt.pt"));
  auto new_attr = node->Stat("shared/ckpt.pt");
  ASSERT_TRUE(new_attr);
  ASSERT_NE(new_attr->file_id, old_attr->file_id);

  // The old id: either the old file's own bytes (its cached handle still reaches the
  // unlinked file, like an open fd) or ESTALE; never the new file's bytes.
  auto stale = node->ReadChecked("shared/ckpt.pt", old_attr->file_id, 0, 100);
  if (stale) {
    EXPECT_EQ(std::string(stale->data.begin(), stale->data.end()), "old-bytes");
    EXPECT_EQ(stale->attr.file_id, old_attr->file_id);
  } else {
    EXPECT_EQ(stale.error().ToErrno(), ESTALE) << stale.error().ToString();
    EXPECT_EQ(stale.error().code(), Code::kNotFound);
  }
  // A node that never had a handle for the old file gets ESTALE for the old id.
  auto cold = Connect();
  ASSERT_TRUE(cold);
  auto gone = cold->ReadChecked("shared/ckpt.pt", old_attr->file_id, 0, 100);
  ASSERT_FALSE(gone) << std::string(gone->data.begin(), gone->data.end());
  EXPECT_EQ(gone.error().ToErrno(), ESTALE) << gone.error().ToString();
  // The new id: the new file's bytes, with its attributes.
  auto fresh = node->ReadChecked("shared/ckpt.pt", new_attr->file_id, 0, 100);
  ASSERT_TRUE(fresh) << fresh.error().ToString();
  EXPECT_EQ(std::string(fresh->data.begin(), fresh->data.end()), "NEW");
  EXPECT_EQ(fresh->attr.file_id, new_attr->file_id);
  EXPECT_EQ(fresh->attr.size, 3u);

  // A change in place shows in the attributes delivered with the read.
  ASSERT_TRUE(other->WriteAs(kAlice, "shared/ckpt.pt", 3, "+more", 5));
  auto grown = node->ReadChecked("shared/ckpt.pt", new_attr->file_id, 0, 100);
  ASSERT_TRUE(grown) << grown.error().ToString();
  EXPECT_EQ(std::string(grown->data.begin(), grown->data.end()), "NEW+more");
  EXPECT_NE(grown->attr.ContentVersion(), fresh->attr.ContentVersion());
}

// What a listing gave is read by its handle in one round trip; listings by handle equal
// those by path; a handle never serves another file than the one the caller means.
TEST_F(LibnfsRemotePosix, ListedFilesAreReadByHandleAndNeverServeAnotherFile) {
  fs::create_directories(Hub("shared/ds/a"));
  fs::create_directories(Hub("shared/ds/b"));
  std::map<std::string, std::string> files;
  for (int i = 0; i < 5; ++i) files["a/f" + std::to_string(i)] = "bytes of f" + std::to_string(i);
  files["b/g"] = std::string(2 * (1 << 20) + 77, 'g');  // several READs
  for (const auto& [rel, data] : files) std::ofstream(Hub("shared/ds/" + rel)) << data;
  fs::create_symlink("a/f0", Hub("shared/ds/link"));

  auto by_path_config = TestConfig();
  by_path_config.fh_table_size = 0;
  auto plain = Connect(by_path_config, "shared/ds");
  auto node = Connect(TestConfig(), "shared/ds");  // the volume root inside the share
  ASSERT_TRUE(plain && node);
  for (const std::string dir : {"", "a", "b"}) {
    auto want = plain->ReadDir(dir);
    auto got = node->ReadDir(dir);
    ASSERT_TRUE(want && got) << dir;
    ASSERT_EQ(got->size(), want->size()) << dir;
    std::map<std::string, FileAttr> by_name;
    for (const auto& e : *want) by_name[e.name] = e.attr;
    for (const auto& e : *got) {
      ASSERT_TRUE(by_name.contains(e.name)) << e.name;
      const FileAttr& w = by_name[e.name];
      EXPECT_EQ(e.attr.file_id, w.file_id) << e.name;
      EXPECT_EQ(e.attr.mode, w.mode) << e.name;
      EXPECT_EQ(e.attr.size, w.size) << e.name;
      EXPECT_EQ(e.attr.nlink, w.nlink) << e.name;
      EXPECT_EQ(e.attr.uid, w.uid) << e.name;
      EXPECT_EQ(e.attr.ContentVersion(), w.ContentVersion()) << e.name;
      // The hub file system, from READDIRPLUS and from libnfs' listing and stat alike.
      EXPECT_EQ(e.attr.fsid, w.fsid) << e.name;
      auto st = plain->Stat(dir.empty() ? e.name : dir + "/" + e.name);
      ASSERT_TRUE(st) << e.name;
      EXPECT_EQ(st->fsid, e.attr.fsid) << e.name;
    }
  }
  EXPECT_EQ(plain->handles_known(), 0u);
  EXPECT_GE(node->handles_known(), files.size() + 2);

  uint64_t reads = 0;
  for (const auto& [rel, data] : files) {
    auto a = node->Stat(rel);
    ASSERT_TRUE(a) << rel;
    // As the fetcher asks: a block's length, short for a file's last block; whole 1 MiB
    // blocks go by handle too (no open's lookups before a big file's first block).
    const auto len = static_cast<uint32_t>(std::min<size_t>(data.size(), 1 << 20));
    auto r = node->ReadChecked(rel, a->file_id, 0, len);
    ASSERT_TRUE(r) << rel << ": " << r.error().ToString();
    EXPECT_EQ(std::string(r->data.begin(), r->data.end()), data.substr(0, len)) << rel;
    EXPECT_EQ(r->attr.ContentVersion(), a->ContentVersion()) << rel;
    EXPECT_EQ(node->reads_by_handle(), ++reads) << rel;
  }
  auto g = node->Stat("b/g");
  ASSERT_TRUE(g);
  auto tail = node->ReadChecked("b/g", g->file_id, 2 << 20, 77);
  ASSERT_TRUE(tail);
  EXPECT_EQ(std::string(tail->data.begin(), tail->data.end()), std::string(77, 'g'));
  EXPECT_EQ(node->reads_by_handle(), ++reads);
  EXPECT_EQ(plain->reads_by_handle(), 0u);

  // Replaced on the hub by another client after the listing: the old id gets the old file's
  // bytes or ESTALE, the new id the new file's; never the other's.
  auto old_attr = node->Stat("a/f1");
  ASSERT_TRUE(old_attr);
  ASSERT_TRUE(plain->CreateAs(kRoot, "a/f1.new", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(plain->WriteAs(kRoot, "a/f1.new", 0, "NEW", 3));
  ASSERT_TRUE(plain->RenameAs(kRoot, "a/f1.new", "a/f1"));
  auto fresh = plain->Stat("a/f1");
  ASSERT_TRUE(fresh);
  ASSERT_NE(fresh->file_id, old_attr->file_id);
  auto stale = node->ReadChecked("a/f1", old_attr->file_id, 0, 100);
  if (stale) {
    EXPECT_EQ(std::string(stale->data.begin(), stale->data.end()), "bytes of f1");
  } else {
    EXPECT_EQ(stale.error().ToErrno(), ESTALE) << stale.error().ToString();
  }
  auto now = node->ReadChecked("a/f1", fresh->file_id, 0, 100);
  ASSERT_TRUE(now) << now.error().ToString();
  EXPECT_EQ(std::string(now->data.begin(), now->data.end()), "NEW");

  // Our own unlink and create under the same name: the new file's bytes.
  ASSERT_TRUE(node->UnlinkAs(kRoot, "a/f2"));
  ASSERT_TRUE(node->CreateAs(kRoot, "a/f2", 0644, CreateMode::kExclusive));
  ASSERT_TRUE(node->WriteAs(kRoot, "a/f2", 0, "again", 5));
  auto again = node->Stat("a/f2");
  ASSERT_TRUE(again);
  auto r = node->ReadChecked("a/f2", again->file_id, 0, 100);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(std::string(r->data.begin(), r->data.end()), "again");
}

// A large read across the hub's READ size arrives whole, with checked and plain reads.
TEST_F(LibnfsRemotePosix, CheckedReadIsWholeAcrossChunks) {
  std::string data(3 * (1 << 20) + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  std::ofstream(Hub("shared/big"), std::ios::binary) << data;
  auto node = Connect();
  ASSERT_TRUE(node);
  auto a = node->Stat("shared/big");
  ASSERT_TRUE(a);
  auto r = node->ReadChecked("shared/big", a->file_id, 1 << 20, 1 << 20);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->data.size(), 1u << 20);
  EXPECT_TRUE(std::equal(r->data.begin(), r->data.end(), data.begin() + (1 << 20)));
  auto tail = node->ReadChecked("shared/big", a->file_id, data.size() - 5, 1 << 20);
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->data.size(), 5u);
}

}  // namespace
}  // namespace spoke::agent
