// The hub clients (ConnectHub: LibnfsRemote for NFSv3, Nfs4Remote for NFSv4.1)
// against one real nfs-ganesha hub that serves the export over both, with the same
// expectations: what RemoteFs promises must not depend on the protocol.
#include "cache-agent/remote/hub_client.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "cache-agent/remote/nfs4_remote.h"
#include "common/interrupt.h"
#include "tests/support/files.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using spoke::testing::ReadWholeFile;

using spoke::testing::Pattern;
void WriteFile(const std::string& path, const std::string& data) {
  spoke::testing::WriteFileWithDirs(path, data);
}

LibnfsRemote::Config SmallConfig(double timeout_s = 3) {
  LibnfsRemote::Config c;
  c.connections = 2;
  c.inflight_per_connection = 16;
  c.request_timeout_seconds = timeout_s;
  c.retries = 2;
  return c;
}

std::string Text(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

class HubClient : public ::testing::TestWithParam<NfsVersion> {
 protected:
  void SetUp() override {
    hub_ = testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
  }
  HubAddress Address() const { return hub_->address(GetParam()); }
  std::unique_ptr<RemoteFs> Connect(const std::string& root = "",
                                    LibnfsRemote::Config config = SmallConfig(),
                                    metrics::Registry* registry = nullptr) {
    auto r = ConnectHub(Address(), root, config, registry);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? std::move(r->remote) : nullptr;
  }
  std::unique_ptr<testing::TestHub> hub_;
};

TEST_P(HubClient, StatsListsAndReadsManyInFlight) {
  const std::string big = Pattern(3 * (1 << 20) + 123, 1);
  WriteFile(hub_->export_dir() + "/d/big.bin", big);
  WriteFile(hub_->export_dir() + "/d/small.txt", "hello");
  fs::create_directories(hub_->export_dir() + "/d/sub");
  ::symlink("small.txt", (hub_->export_dir() + "/d/link").c_str());
  metrics::Registry reg;
  auto remote = Connect("", SmallConfig(), &reg);
  ASSERT_NE(remote, nullptr);

  auto st = remote->Stat("d/big.bin");
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_TRUE(st->is_reg());
  EXPECT_EQ(st->size, big.size());
  struct stat local {};
  ASSERT_EQ(::stat((hub_->export_dir() + "/d/big.bin").c_str(), &local), 0);
  EXPECT_EQ(st->file_id, local.st_ino);
  EXPECT_EQ(st->mode, local.st_mode);
  EXPECT_EQ(st->mtime.tv_sec, local.st_mtim.tv_sec);
  EXPECT_EQ(st->mtime.tv_nsec, local.st_mtim.tv_nsec);
  auto root = remote->Stat("");
  ASSERT_TRUE(root) << root.error().ToString();
  EXPECT_TRUE(root->is_dir());
  auto missing = remote->Stat("d/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound) << missing.error().ToString();

  auto dir = remote->ReadDir("d");
  ASSERT_TRUE(dir) << dir.error().ToString();
  std::map<std::string, DirEntry> byname;
  for (auto& e : *dir) byname[e.name] = e;
  ASSERT_EQ(byname.size(), 4u);
  EXPECT_TRUE(byname["sub"].attr.is_dir());
  EXPECT_TRUE(byname["link"].attr.is_symlink());
  EXPECT_EQ(byname["big.bin"].attr.size, big.size());
  EXPECT_EQ(byname["big.bin"].attr.file_id, st->file_id);
  EXPECT_EQ(byname["big.bin"].attr.ContentVersion(), st->ContentVersion());

  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  std::string got(big.size(), '\0');
  bool ok = true;
  for (uint64_t off = 0; off < big.size(); off += 1 << 20) {
    ++pending;
    remote->ReadCheckedAsync("d/big.bin", st->file_id, off, 1 << 20,
                             [&, off](Result<RemoteFs::CheckedRead> res) {
                               std::lock_guard<std::mutex> lock(mu);
                               if (!res || res->attr.file_id != st->file_id) {
                                 ok = false;
                               } else {
                                 std::copy(res->data.begin(), res->data.end(), got.begin() + off);
                               }
                               if (--pending == 0) cv.notify_all();
                             });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  EXPECT_TRUE(ok);
  EXPECT_TRUE(got == big);
  auto tail = remote->Read("d/big.bin", big.size() - 10, 4096);
  ASSERT_TRUE(tail) << tail.error().ToString();
  EXPECT_EQ(tail->size(), 10u);
  auto past = remote->Read("d/big.bin", big.size() + 10, 4096);
  ASSERT_TRUE(past) << past.error().ToString();
  EXPECT_EQ(past->size(), 0u);
  auto link = remote->ReadLink("d/link");
  ASSERT_TRUE(link) << link.error().ToString();
  EXPECT_EQ(*link, "small.txt");

  auto fsst = remote->StatFs();
  ASSERT_TRUE(fsst) << fsst.error().ToString();
  EXPECT_GT(fsst->total_bytes, 0u);
  EXPECT_TRUE(remote->Reachable());
  EXPECT_NE(reg.Render().find("spoke_hub_request_seconds"), std::string::npos);

  // A volume rooted in a sub-directory of the share sees paths relative to it.
  auto sub = Connect("d");
  ASSERT_NE(sub, nullptr);
  auto small = sub->Read("small.txt", 0, 100);
  ASSERT_TRUE(small) << small.error().ToString();
  EXPECT_EQ(Text(*small), "hello");
  auto subroot = sub->ReadDir("");
  ASSERT_TRUE(subroot) << subroot.error().ToString();
  EXPECT_EQ(subroot->size(), 4u);
}

// A checked read delivers bytes only from the file the caller knows: after the name was
// replaced on the hub (by another client), it fails with ESTALE and gives nothing.
TEST_P(HubClient, ACheckedReadOfAReplacedFileGivesNoBytes) {
  WriteFile(hub_->export_dir() + "/f", "old content");
  auto remote = Connect();
  ASSERT_NE(remote, nullptr);
  ASSERT_TRUE(remote->ReadDir(""));  // the listing's handle is kept
  auto st = remote->Stat("f");
  ASSERT_TRUE(st);
  auto first = remote->ReadChecked("f", st->file_id, 0, 100);
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(Text(first->data), "old content");

  // Another client replaces it (the hub's own cache would not see a change behind its back).
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->Create("f.new", 0644));
  ASSERT_TRUE(other->Write("f.new", 0, "new content", 11));
  ASSERT_TRUE(other->Rename("f.new", "f"));
  auto stale = remote->ReadChecked("f", st->file_id, 0, 100);
  ASSERT_FALSE(stale) << "read " << Text(stale->data);
  EXPECT_EQ(stale.error().code(), Code::kNotFound) << stale.error().ToString();
  EXPECT_EQ(stale.error().ToErrno(), ESTALE);
  auto now = remote->Stat("f");
  ASSERT_TRUE(now);
  auto fresh = remote->ReadChecked("f", now->file_id, 0, 100);
  ASSERT_TRUE(fresh) << fresh.error().ToString();
  EXPECT_EQ(Text(fresh->data), "new content");
}

TEST_P(HubClient, ChangesReachTheHubAsTheCaller) {
  const Credentials user{1000, 1000, {}};
  fs::create_directories(hub_->export_dir() + "/home");
  ASSERT_EQ(::chown((hub_->export_dir() + "/home").c_str(), 1000, 1000), 0);
  auto remote = Connect();
  ASSERT_NE(remote, nullptr);

  auto created = remote->CreateAs(user, "home/ckpt.tmp", 0640, CreateMode::kExclusive);
  ASSERT_TRUE(created) << created.error().ToString();
  auto again = remote->CreateAs(user, "home/ckpt.tmp", 0640, CreateMode::kExclusive);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kAlreadyExists) << again.error().ToString();

  const std::string data = Pattern(3 * (1 << 20) + 7, 2);
  auto wrote = remote->WriteAs(user, "home/ckpt.tmp", 0, data.data(), data.size());
  ASSERT_TRUE(wrote) << wrote.error().ToString();
  EXPECT_EQ(*wrote, data.size());
  ASSERT_TRUE(remote->FsyncAs(user, "home/ckpt.tmp"));
  ASSERT_TRUE(remote->RenameAs(user, "home/ckpt.tmp", "home/ckpt"));
  EXPECT_EQ(ReadWholeFile(hub_->export_dir() + "/home/ckpt"), data);
  struct stat local {};
  ASSERT_EQ(::stat((hub_->export_dir() + "/home/ckpt").c_str(), &local), 0);
  EXPECT_EQ(local.st_uid, 1000u);
  EXPECT_EQ(local.st_mode & 07777, 0640u);
  // And the client reports the owner as a number (a v4 hub must send numeric owners).
  auto seen = remote->StatAs(user, "home/ckpt");
  ASSERT_TRUE(seen) << seen.error().ToString();
  EXPECT_EQ(seen->uid, 1000u);
  EXPECT_EQ(seen->gid, 1000u);
  auto listed = remote->ReadDirAs(user, "home");
  ASSERT_TRUE(listed) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().attr.uid, 1000u);

  SetAttrRequest truncate;
  truncate.size = 5;
  auto after = remote->SetAttrAs(user, "home/ckpt", truncate);
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_EQ(after->size, 5u);
  EXPECT_EQ(ReadWholeFile(hub_->export_dir() + "/home/ckpt"), data.substr(0, 5));

  ASSERT_TRUE(remote->MkdirAs(user, "home/dir", 0750));
  ASSERT_TRUE(remote->SymlinkAs(user, "../ckpt", "home/dir/link"));
  auto target = remote->ReadLinkAs(user, "home/dir/link");
  ASSERT_TRUE(target) << target.error().ToString();
  EXPECT_EQ(*target, "../ckpt");
  auto linked = remote->LinkAs(user, "home/ckpt", "home/dir/hard");
  ASSERT_TRUE(linked) << linked.error().ToString();
  EXPECT_EQ(linked->nlink, 2u);
  auto not_empty = remote->RmdirAs(user, "home/dir");
  ASSERT_FALSE(not_empty);
  EXPECT_EQ(not_empty.error().code(), Code::kNotEmpty) << not_empty.error().ToString();
  ASSERT_TRUE(remote->UnlinkAs(user, "home/dir/link"));
  ASSERT_TRUE(remote->UnlinkAs(user, "home/dir/hard"));
  ASSERT_TRUE(remote->RmdirAs(user, "home/dir"));
  EXPECT_FALSE(fs::exists(hub_->export_dir() + "/home/dir"));

  // Another user's private directory refuses this caller: the hub checks who asks.
  fs::create_directories(hub_->export_dir() + "/private");
  ASSERT_EQ(::chmod((hub_->export_dir() + "/private").c_str(), 0700), 0);
  auto refused = remote->CreateAs(user, "private/x", 0644, CreateMode::kExclusive);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kPermissionDenied) << refused.error().ToString();
}

TEST_P(HubClient, ReconnectsAfterHubRestart) {
  const std::string data = Pattern(100000, 3);
  WriteFile(hub_->export_dir() + "/f.bin", data);
  auto remote = Connect("", SmallConfig(2));
  ASSERT_NE(remote, nullptr);
  ASSERT_TRUE(remote->Read("f.bin", 0, 1000));

  hub_->Stop();
  auto start = std::chrono::steady_clock::now();
  auto down = remote->Read("f.bin", 1000, 1000);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "bounded by the request timeout";
  ASSERT_FALSE(down);
  EXPECT_TRUE(down.error().code() == Code::kTimeout || down.error().code() == Code::kUnavailable)
      << down.error().ToString();
  EXPECT_EQ(down.error().ToErrno(), EIO) << "a process sees EIO, as from a kernel NFS mount";
  EXPECT_FALSE(remote->Reachable());

  ASSERT_TRUE(hub_->Restart());
  Result<std::vector<char>> up = std::unexpected(Error(Code::kInternal, "not tried"));
  auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    up = remote->Read("f.bin", 1000, 1000);
    if (up) break;
  }
  ASSERT_TRUE(up) << up.error().ToString();
  EXPECT_EQ(Text(*up), data.substr(1000, 1000));
  // Changes work again too (v4.1: a new client id and session after the restart).
  auto created = remote->Create("after-restart", 0644);
  ASSERT_TRUE(created) << created.error().ToString();
  EXPECT_TRUE(remote->Reachable());
}

TEST_P(HubClient, ADeadHubFailsWithinTheBound) {
  testing::Blackhole silent;
  HubAddress dead = Address();
  dead.nfs_port = silent.port();
  if (dead.nfs_version == NfsVersion::kV3) dead.mount_port = silent.port();
  auto start = std::chrono::steady_clock::now();
  auto r = ConnectHub(dead, "", SmallConfig(2), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error().ToString();
  EXPECT_NE(r.error().message().find(std::to_string(silent.port())), std::string::npos)
      << "names the hub: " << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);

  // Made without waiting for the mount (an agent taking over while the hub is down): calls
  // fail within the bound, saying so.
  auto config = SmallConfig(2);
  config.wait_for_mount = false;
  auto lazy = ConnectHub(dead, "", config, nullptr);
  ASSERT_TRUE(lazy) << lazy.error().ToString();
  start = std::chrono::steady_clock::now();
  auto st = lazy->remote->Stat("x");
  ASSERT_FALSE(st);
  EXPECT_TRUE(st.error().code() == Code::kTimeout || st.error().code() == Code::kUnavailable)
      << st.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// A process that gets a signal while it waits on a hub that stopped answering is answered at
// once (FUSE INTERRUPT: kInterrupted), not at the hub bound; the call goes on to its own bound.
TEST_P(HubClient, AnInterruptedWaitOnASilentHubEndsAtOnce) {
  WriteFile(hub_->export_dir() + "/f", "x");
  auto proxy = testing::WanProxy::Start(*hub_, 1);
  ASSERT_NE(proxy, nullptr);
  auto r = ConnectHub(testing::WithNfsVersion(proxy->address(), GetParam()), "", SmallConfig(8),
                      nullptr);
  ASSERT_TRUE(r) << r.error().ToString();
  auto& remote = *r->remote;
  ASSERT_TRUE(remote.Stat("f"));
  proxy->Freeze(true);
  Interrupt interrupt;
  std::thread signal([&] {
    std::this_thread::sleep_for(300ms);
    interrupt.Fire();
  });
  auto start = std::chrono::steady_clock::now();
  Result<FileAttr> st = std::unexpected(Error(Code::kInternal, "not tried"));
  {
    InterruptScope scope(&interrupt);
    st = remote.Stat("g");
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  signal.join();
  proxy->Freeze(false);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code(), Code::kInterrupted) << st.error().ToString();
  EXPECT_LT(waited, 6s) << "ended by the interrupt, not the 8 s bound";
}

INSTANTIATE_TEST_SUITE_P(Versions, HubClient, ::testing::Values(NfsVersion::kV3, NfsVersion::kV41),
                         [](const ::testing::TestParamInfo<NfsVersion>& info) {
                           return std::string(info.param == NfsVersion::kV41 ? "nfs41" : "nfs3");
                         });

}  // namespace
}  // namespace spoke::agent
