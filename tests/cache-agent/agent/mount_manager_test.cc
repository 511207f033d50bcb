#include "cache-agent/agent/mount_manager.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/fd_keeper.h"
#include "tests/cache-agent/agent/fakes.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

using testing::DatasetContext;
using testing::DatasetId;
using testing::FakeHostMounts;
using testing::FakeMounter;
using testing::FakeWorld;

class MountManagerTest : public ::testing::Test {
 protected:
  MountManagerTest() : world_(std::make_shared<FakeWorld>()), mounter_(world_, host_) {}

  std::unique_ptr<MountManager> NewManager(std::vector<std::string> roots = {}) {
    MountManager::Options o;
    o.mount_roots = std::move(roots);
    o.state_file = state_file();
    o.retry_initial = std::chrono::milliseconds(20);
    o.retry_max = std::chrono::milliseconds(40);
    o.health_interval = std::chrono::milliseconds(3600'000);
    return std::make_unique<MountManager>(mounter_, host_, registry_, o);
  }
  std::string state_file() const { return dir_.path() + "/state/mounts.json"; }
  std::string Target(const std::string& name) const { return dir_.path() + "/targets/" + name; }

  spoke::testing::TempDir dir_{"spoke-mm"};
  std::shared_ptr<FakeWorld> world_;
  FakeMounter mounter_;
  FakeHostMounts host_;
  metrics::Registry registry_;
};

TEST_F(MountManagerTest, MountIsIdempotentAndCreatesTheTarget) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_TRUE(std::filesystem::is_directory(Target("a")));
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_EQ(world_->mount_calls, 1);
  EXPECT_EQ(m->mounted_count(), 1u);
  ASSERT_NE(m->FindByVolume(DatasetId()), nullptr);
  EXPECT_EQ(m->FindByTarget(Target("a") + "/"), m->FindByVolume(DatasetId()));
  EXPECT_NE(registry_.Render().find("spoke_mounts 1"), std::string::npos);
}

// Whoever holds the socket, the agent mounts only under its mountRoots; a state file naming
// another target is not restored either.
TEST_F(MountManagerTest, TargetsOutsideTheMountRootsAreRefused) {
  std::string root = dir_.path() + "/targets";
  {
    auto m = NewManager();  // no roots: a table written by an older agent
    ASSERT_TRUE(m->Start());
    ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), dir_.path() + "/elsewhere/x", true));
    m->Shutdown();
  }
  world_->mount_calls = 0;
  auto m = NewManager({root});
  ASSERT_TRUE(m->Start());
  for (std::string bad : {dir_.path() + "/etc/cron.d", root, root + "x/a", std::string("/etc")}) {
    auto s = m->Mount(DatasetId(), DatasetContext(), bad, true);
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.error().code(), Code::kPermissionDenied);
    EXPECT_NE(s.error().message().find("mountRoots"), std::string::npos) << s.error().message();
    EXPECT_NE(s.error().message().find("target_path"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/etc"));
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_EQ(world_->mount_calls, 1);  // the old record outside the roots was not restored
  EXPECT_EQ(m->FindByTarget(dir_.path() + "/elsewhere/x"), nullptr);
}

// A volume's series (labelled as its mounter labels them) go when its last mount goes.
TEST_F(MountManagerTest, UnmountRemovesTheVolumesSeries) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  registry_.GetCounter("spoke_test_reads_total", "t", {{"volume", VolumeMetricsLabel(DatasetId())}})
      .Inc();
  EXPECT_NE(registry_.Render().find("spoke_test_reads_total{"), std::string::npos);
  ASSERT_TRUE(m->Unmount(Target("a")));
  EXPECT_EQ(registry_.Render().find("spoke_test_reads_total{"), std::string::npos)
      << registry_.Render();
}

TEST_F(MountManagerTest, AnotherVolumeAtTheTargetIsAlreadyExists) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  auto s = m->Mount(DatasetId("/srv/other"), DatasetContext("/srv/other"), Target("a"), true);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kAlreadyExists);
  EXPECT_NE(s.error().message().find("target_path"), std::string::npos);
  // Same volume, different read_only: also a conflict, not silently ignored.
  s = m->Mount(DatasetId(), DatasetContext(), Target("a"), false);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kAlreadyExists);
  // The same volume at a second target is fine.
  EXPECT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("b"), true));
}

TEST_F(MountManagerTest, SomethingElseMountedAtTheTargetIsAlreadyExists) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  host_.table.push_back(MountEntry{Target("a"), "tmpfs", "tmpfs"});
  auto s = m->Mount(DatasetId(), DatasetContext(), Target("a"), true);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kAlreadyExists);
  EXPECT_NE(s.error().message().find("tmpfs"), std::string::npos);
  EXPECT_EQ(world_->mount_calls, 0);
}

TEST_F(MountManagerTest, BadArgumentsNameTheField) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  struct Case {
    std::string id;
    StringMap ctx;
    std::string target;
    std::string field;
  };
  StringMap bad_ctx = DatasetContext();
  bad_ctx["consistency"] = "sometimes";
  StringMap escaping = DatasetContext();
  escaping["path"] = "../etc";
  const Case cases[] = {
      {"", DatasetContext(), Target("a"), "volume_id: required"},
      {"spoke1|dataset|x", DatasetContext(), Target("a"), "volume_id: malformed"},
      {std::string("id\x01"), DatasetContext(), Target("a"), "volume_id: contains a control"},
      {DatasetId(), DatasetContext(), "", "target_path: required"},
      {DatasetId(), DatasetContext(), "relative/dir", "target_path: must be absolute"},
      {DatasetId(), DatasetContext(), Target("a") + "/../b", "target_path: must be normalised"},
      {DatasetId(), DatasetContext(), "/", "target_path: cannot be /"},
      {DatasetId(), bad_ctx, Target("a"), "volume_context: "},
      {DatasetId(), escaping, Target("a"), "volume_context: "},
      {DatasetId(), {}, Target("a"), "volume_context: "},
  };
  for (const auto& c : cases) {
    auto s = m->Mount(c.id, c.ctx, c.target, true);
    ASSERT_FALSE(s) << c.field;
    EXPECT_EQ(s.error().code(), Code::kInvalidArgument) << c.field;
    EXPECT_EQ(s.error().message().rfind(c.field, 0), 0u) << s.error().message();
  }
  EXPECT_EQ(world_->mount_calls, 0);
}

TEST_F(MountManagerTest, AcceptsControllerSpokectlAndOpaqueIds) {
  EXPECT_TRUE(ValidateVolumeId("spoke1|scratch|delete|10.0.0.1|2049|0|/srv/x|team/job-1"));
  // spokectl: a scratch volume at the share root (the controller never makes one).
  EXPECT_TRUE(ValidateVolumeId("spoke1|scratch|retain|10.0.0.1|2049|0|/srv/x|"));
  EXPECT_TRUE(ValidateVolumeId("pvc-1234"));
  EXPECT_FALSE(ValidateVolumeId("spoke1|scratch|retain|10.0.0.1|2049|0|srv|"));
}

TEST_F(MountManagerTest, UnmountIsIdempotent) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  EXPECT_TRUE(m->Unmount(Target("never")));
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  ASSERT_TRUE(m->Unmount(Target("a")));
  EXPECT_TRUE(m->Unmount(Target("a")));
  EXPECT_EQ(world_->unmount_calls, 1);
  EXPECT_EQ(m->mounted_count(), 0u);
  EXPECT_EQ(m->FindByVolume(DatasetId()), nullptr);
  auto s = m->Unmount("relative");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
}

TEST_F(MountManagerTest, EveryChangeIsPersisted) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  ASSERT_TRUE(m->Mount(DatasetId("/srv/b"), DatasetContext("/srv/b"), Target("b"), false));
  auto records = ReadMountState(state_file());
  ASSERT_TRUE(records) << records.error().message();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0], (MountRecord{DatasetId(), DatasetContext(), Target("a"), true}));
  EXPECT_EQ((*records)[1].volume_id, DatasetId("/srv/b"));
  EXPECT_FALSE((*records)[1].read_only);
  ASSERT_TRUE(m->Unmount(Target("a")));
  records = ReadMountState(state_file());
  ASSERT_TRUE(records);
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].target_path, Target("b"));
}

TEST_F(MountManagerTest, AMountThatCannotBePersistedIsUndone) {
  std::filesystem::create_directories(dir_.path());
  std::ofstream(dir_.path() + "/state") << "a file where the state directory should be";
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  auto s = m->Mount(DatasetId(), DatasetContext(), Target("a"), true);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kIo);
  EXPECT_EQ(m->mounted_count(), 0u);
  EXPECT_EQ(world_->unmount_calls, 1);
}

TEST_F(MountManagerTest, ShutdownEndsSessionsAndKeepsTheStateForTheNextStart) {
  {
    auto m = NewManager();
    ASSERT_TRUE(m->Start());
    ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
    ASSERT_TRUE(m->Mount(DatasetId("/srv/b"), DatasetContext("/srv/b"), Target("b"), false));
    m->Shutdown();
    EXPECT_EQ(world_->unmount_calls, 2);
    EXPECT_TRUE(world_->live.empty());
    auto s = m->Mount(DatasetId("/srv/c"), DatasetContext("/srv/c"), Target("c"), true);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code(), Code::kUnavailable);
  }
  auto records = ReadMountState(state_file());
  ASSERT_TRUE(records);
  EXPECT_EQ(records->size(), 2u);

  // The next agent: stale FUSE mounts of the dead one first, then the same mounts again.
  host_.disconnected.insert(Target("a"));
  host_.table.push_back(MountEntry{Target("b"), "fuse.spoke", "spoke"});
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  EXPECT_EQ(host_.detached, (std::vector<std::string>{Target("a"), Target("b")}));
  for (int i = 0; i < 200 && m->mounted_count() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m->mounted_count(), 2u);
  ASSERT_NE(m->FindByVolume(DatasetId()), nullptr);
  EXPECT_TRUE(m->FindByVolume(DatasetId())->read_only());
  EXPECT_EQ(m->FindByTarget(Target("b"))->volume_id(), DatasetId("/srv/b"));
  EXPECT_EQ(world_->live.size(), 2u);
}

TEST_F(MountManagerTest, RestoreRetriesInTheBackgroundWhileTheHubIsDown) {
  ASSERT_TRUE(WriteMountState(state_file(), {{DatasetId(), DatasetContext(), Target("a"), true}}));
  world_->fail_mount = Code::kUnavailable;
  auto m = NewManager();
  ASSERT_TRUE(m->Start());  // does not wait for the hub
  for (int i = 0; i < 200; ++i) {
    if (m->List()[0].restore_attempts >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto list = m->List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_FALSE(list[0].mounted);
  EXPECT_GE(list[0].restore_attempts, 3);
  EXPECT_NE(list[0].last_error.find("fake mount failure"), std::string::npos);
  EXPECT_EQ(m->FindByVolume(DatasetId()), nullptr);
  EXPECT_NE(registry_.Render().find("spoke_mounts_pending 1"), std::string::npos);

  // While pending, the target still belongs to that volume. A call that meets a background
  // retry in progress is told to retry (UNAVAILABLE), as a caller of the agent would.
  auto mount_other = [&] {
    return m->Mount(DatasetId("/srv/x"), DatasetContext("/srv/x"), Target("a"), true);
  };
  auto s = mount_other();
  for (int i = 0; i < 200 && !s && s.error().code() == Code::kUnavailable; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = mount_other();
  }
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kAlreadyExists);

  world_->fail_mount.reset();
  for (int i = 0; i < 200 && m->mounted_count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m->mounted_count(), 1u);
  EXPECT_TRUE(m->List()[0].last_error.empty());
}

TEST_F(MountManagerTest, MountOfAPendingTargetMountsAtOnce) {
  ASSERT_TRUE(WriteMountState(state_file(), {{DatasetId(), DatasetContext(), Target("a"), true}}));
  world_->fail_mount = Code::kUnavailable;
  MountManager::Options o;
  o.state_file = state_file();
  o.retry_initial = std::chrono::hours(1);  // the background never retries in this test
  MountManager m(mounter_, host_, registry_, o);
  ASSERT_TRUE(m.Start());
  for (int i = 0; i < 200 && m.List()[0].restore_attempts == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  world_->fail_mount.reset();
  // The failed restore may still hold the target for a moment: the caller is told to retry,
  // as the node plugin would.
  Status s;
  for (int i = 0; i < 200; ++i) {
    s = m.Mount(DatasetId(), DatasetContext(), Target("a"), true);
    if (s || s.error().code() != Code::kUnavailable) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(m.mounted_count(), 1u);
  // Unmount of a pending target forgets it.
  ASSERT_TRUE(m.Unmount(Target("a")));
  EXPECT_TRUE(m.List().empty());
}

// A mount waiting on the hub holds its target: a retry of it (the node plugin's, after its
// own deadline) or an unmount is told to retry at once instead of parking a thread behind it.
TEST_F(MountManagerTest, AMountInProgressRefusesOtherCallsOnItsTargetInsteadOfQueuingThem) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->hold_mount = true;
  }
  std::thread first(
      [&] { EXPECT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true)); });
  for (int i = 0; i < 500; ++i) {
    std::lock_guard<std::mutex> l(world_->mu);
    if (world_->mount_calls == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto again = m->Mount(DatasetId(), DatasetContext(), Target("a"), true);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kUnavailable);
  EXPECT_NE(again.error().message().find("in progress"), std::string::npos);
  auto un = m->Unmount(Target("a"));
  ASSERT_FALSE(un);
  EXPECT_EQ(un.error().code(), Code::kUnavailable);
  // Other targets are not held up.
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->hold_mount = false;
  }
  world_->mount_cv.notify_all();
  first.join();
  EXPECT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_EQ(world_->mount_calls, 1);
  EXPECT_EQ(m->mounted_count(), 1u);
}

// The gRPC caller gave up (deadline) while the hub was slow: nobody will ever unmount what it
// does not know exists, so the mount is undone instead of kept.
TEST_F(MountManagerTest, AMountFinishedAfterItsCallerGaveUpIsUndone) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  auto s = m->Mount(DatasetId(), DatasetContext(), Target("a"), true, [] { return true; });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kCancelled);
  EXPECT_NE(s.error().message().find("gave up"), std::string::npos);
  EXPECT_EQ(m->mounted_count(), 0u);
  EXPECT_TRUE(m->List().empty());
  EXPECT_EQ(world_->unmount_calls, 1);
  EXPECT_TRUE(world_->live.empty());
  auto records = ReadMountState(state_file());
  EXPECT_TRUE(!records || records->empty());
  // A caller still waiting gets its mount.
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true, [] { return false; }));
  EXPECT_EQ(m->mounted_count(), 1u);
}

// The node plugin's stale-mount cleanup (or an admin's umount) detached a mount the agent
// still lists: the next Mount must not answer "already mounted" for an empty directory.
TEST_F(MountManagerTest, AMountDetachedBehindTheAgentsBackIsMountedAgain) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  auto first = m->FindByTarget(Target("a"));
  ASSERT_TRUE(host_.DetachUnmount(Target("a")));
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_EQ(world_->mount_calls, 2);
  EXPECT_EQ(world_->unmount_calls, 1);  // the old session was ended
  EXPECT_NE(m->FindByTarget(Target("a")), first);
  EXPECT_EQ(m->mounted_count(), 1u);
  EXPECT_EQ(world_->live.size(), 1u);
  // Still mounted: idempotent again.
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  EXPECT_EQ(world_->mount_calls, 2);
}

// Each FUSE session may take a while to end: shutdown ends them together, so the agent stops
// within one session's bound, not the sum of all of them.
TEST_F(MountManagerTest, ShutdownEndsEverySessionAtOnce) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  for (std::string name : {"a", "b", "c"}) {
    ASSERT_TRUE(
        m->Mount(DatasetId("/srv/" + name), DatasetContext("/srv/" + name), Target(name), true));
  }
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->unmount_delay = std::chrono::milliseconds(300);
  }
  m->Shutdown();
  EXPECT_EQ(world_->unmount_calls, 3);
  EXPECT_EQ(world_->most_unmounts_at_once, 3);
}

TEST_F(MountManagerTest, AnUnreadableStateFileIsMovedAside) {
  std::filesystem::create_directories(dir_.path() + "/state");
  std::ofstream(state_file()) << "{not json";
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  EXPECT_TRUE(m->List().empty());
  EXPECT_TRUE(std::filesystem::exists(state_file() + ".bad"));
}

TEST_F(MountManagerTest, HealthRefreshTracksHubReachability) {
  auto m = NewManager();
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), Target("a"), true));
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->figures.hub_reachable = false;
    world_->figures.last_hub_error = "hub timed out";
  }
  m->RunBackgroundOnce(false);
  EXPECT_FALSE(m->List()[0].hub_reachable);
  EXPECT_EQ(m->List()[0].last_error, "hub timed out");
}

TEST(MountStateTest, RoundTripAndErrorsNameTheEntry) {
  spoke::testing::TempDir dir("spoke-state");
  std::string f = dir.path() + "/mounts.json";
  auto empty = ReadMountState(f);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  std::vector<MountRecord> recs = {{"id|1", {{"server", "h"}, {"path", "a b"}}, "/t/1", true},
                                   {"id\"2", {}, "/t/ü", false}};
  ASSERT_TRUE(WriteMountState(f, recs));
  auto back = ReadMountState(f);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, recs);
  EXPECT_FALSE(std::filesystem::exists(f + ".tmp"));

  std::ofstream(f) << R"({"version":1,"mounts":[{"volumeId":"x","targetPath":5}]})";
  auto bad = ReadMountState(f);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("mounts[0].targetPath"), std::string::npos);
  std::ofstream(f) << R"({"version":7,"mounts":[]})";
  EXPECT_FALSE(ReadMountState(f));
}

}  // namespace
}  // namespace spoke::agent

namespace spoke::agent {
namespace {

// A mount whose "connection" is a pipe: what the keeper is given and what a successor adopts.
class KeptVolume : public testing::FakeVolume {
 public:
  KeptVolume(std::shared_ptr<FakeWorld> w, std::string id, VolumeContext ctx, std::string target,
             bool ro, UniqueFd fd, std::atomic<int>* handovers)
      : FakeVolume(std::move(w), std::move(id), std::move(ctx), std::move(target), ro),
        fd_(std::move(fd)),
        handovers_(handovers) {}
  int fuse_fd() const override { return fd_.get(); }
  std::string takeover_json() const override { return R"({"init_request":"00"})"; }
  Status HandOver(std::chrono::milliseconds) override {
    (*handovers_)++;
    return Ok();
  }

 private:
  UniqueFd fd_;
  std::atomic<int>* handovers_;
};

class KeeperMounter : public VolumeMounter {
 public:
  explicit KeeperMounter(std::shared_ptr<FakeWorld> w) : w_(std::move(w)) {}
  Result<std::unique_ptr<MountedVolume>> Mount(const std::string& id, const VolumeContext& ctx,
                                               const std::string& target, bool ro) override {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return Fail(Code::kIo, "pipe");
    ::close(p[1]);
    mounts++;
    return std::unique_ptr<MountedVolume>(
        std::make_unique<KeptVolume>(w_, id, ctx, target, ro, UniqueFd(p[0]), &handovers));
  }
  Result<std::unique_ptr<MountedVolume>> Adopt(const std::string& id, const VolumeContext& ctx,
                                               const std::string& target, bool ro, UniqueFd fd,
                                               const std::string& takeover_json) override {
    adopted_targets.push_back(target);
    adopted_json = takeover_json;
    return std::unique_ptr<MountedVolume>(
        std::make_unique<KeptVolume>(w_, id, ctx, target, ro, std::move(fd), &handovers));
  }
  std::shared_ptr<FakeWorld> w_;
  int mounts = 0;
  std::vector<std::string> adopted_targets;
  std::string adopted_json;
  std::atomic<int> handovers{0};
};

FdKeeperServer::Config KeeperConfig(const spoke::testing::TempDir& dir) {
  FdKeeperServer::Config kc;
  kc.socket_path = dir.path() + "/keeper.sock";
  kc.allowed_uid = ::geteuid();
  return kc;
}

// A manager of mounts in `dir` whose keeper serves `keeper_socket`, checked every 20 ms.
MountManager::Options KeeperOptions(const spoke::testing::TempDir& dir,
                                    const std::string& keeper_socket) {
  MountManager::Options o;
  o.state_file = dir.path() + "/state/mounts.json";
  o.keeper_socket = keeper_socket;
  o.keeper_interval = std::chrono::milliseconds(20);
  o.health_interval = std::chrono::milliseconds(3600'000);
  return o;
}

TEST(MountManagerKeeperTest, MountsAreKeptTakenOverHandedOverAndForgottenOnUnmount) {
  spoke::testing::TempDir dir("spoke-mm-keeper");
  const FdKeeperServer::Config kc = KeeperConfig(dir);
  auto keeper = std::make_unique<FdKeeperServer>(kc);
  ASSERT_TRUE(keeper->Start());
  auto world = std::make_shared<FakeWorld>();
  KeeperMounter mounter(world);
  testing::FakeHostMounts host;
  metrics::Registry registry;
  const MountManager::Options o = KeeperOptions(dir, kc.socket_path);
  const std::string a = dir.path() + "/targets/a";

  auto m = std::make_unique<MountManager>(mounter, host, registry, o);
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), a, true));
  EXPECT_EQ(keeper->size(), 1u);
  // SIGTERM: handed over, not unmounted.
  m->HandOver(std::chrono::milliseconds(100));
  EXPECT_EQ(mounter.handovers.load(), 1);
  EXPECT_EQ(world->unmount_calls, 0);
  m.reset();
  EXPECT_EQ(keeper->size(), 1u);

  // The next agent takes the kept connection over instead of mounting again.
  m = std::make_unique<MountManager>(mounter, host, registry, o);
  ASSERT_TRUE(m->Start());
  ASSERT_EQ(mounter.adopted_targets, std::vector<std::string>{a});
  EXPECT_EQ(mounter.adopted_json, R"({"init_request":"00"})");
  EXPECT_EQ(mounter.mounts, 1);
  EXPECT_EQ(m->mounted_count(), 1u);
  EXPECT_NE(registry.Render().find("spoke_mounts_adopted_total 1"), std::string::npos);

  // A restarted keeper gets the connection again from the background thread.
  keeper.reset();
  keeper = std::make_unique<FdKeeperServer>(kc);
  ASSERT_TRUE(keeper->Start());
  for (int i = 0; i < 500 && keeper->size() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(keeper->size(), 1u);

  // Unmount forgets it in the keeper.
  ASSERT_TRUE(m->Unmount(a));
  EXPECT_EQ(keeper->size(), 0u);
  m.reset();

  // A kept connection for a target not in the mount table is detached and dropped.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[1]);
  FdKeeperClient client(kc.socket_path, std::chrono::milliseconds(2000));
  ASSERT_TRUE(client.Put(MountManager::KeeperKey(dir.path() + "/targets/gone"),
                         R"({"target":")" + dir.path() +
                             R"(/targets/gone","volume_id":"x",)"
                             R"("takeover":{}})",
                         p[0]));
  ::close(p[0]);
  m = std::make_unique<MountManager>(mounter, host, registry, o);
  ASSERT_TRUE(m->Start());
  EXPECT_EQ(keeper->size(), 0u);
  EXPECT_EQ(mounter.adopted_targets.size(), 1u);
}

// The node plugin (the keeper) and the agent upgraded at once. Whichever goes first, some
// process holds the connection at every moment: an agent handing over while no keeper answers
// offers the connection until the next keeper takes it, and a stopping keeper left as the
// connection's only holder stays until the next agent has taken it over.
TEST(MountManagerKeeperTest, AnAgentAndItsKeeperUpgradedTogetherKeepTheConnection) {
  spoke::testing::TempDir dir("spoke-mm-keeper2");
  const FdKeeperServer::Config kc = KeeperConfig(dir);
  auto keeper = std::make_unique<FdKeeperServer>(kc);
  ASSERT_TRUE(keeper->Start());
  auto world = std::make_shared<FakeWorld>();
  KeeperMounter mounter(world);
  testing::FakeHostMounts host;
  metrics::Registry registry;
  MountManager::Options o = KeeperOptions(dir, kc.socket_path);
  o.keeper_handover_wait = std::chrono::seconds(20);
  const std::string a = dir.path() + "/targets/a";

  // 1. The keeper goes first (its agent held the lease) and the agent hands over while no
  //    keeper answers: the connection is offered until the next keeper is up.
  auto m = std::make_unique<MountManager>(mounter, host, registry, o);
  ASSERT_TRUE(m->Start());
  ASSERT_TRUE(m->Mount(DatasetId(), DatasetContext(), a, true));
  ASSERT_EQ(keeper->size(), 1u);
  keeper->FinishServing(std::chrono::seconds(20));  // the agent holds the lease: at once
  keeper.reset();
  auto handed =
      std::async(std::launch::async, [&] { m->HandOver(std::chrono::milliseconds(100)); });
  EXPECT_EQ(handed.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout)
      << "handed over with no keeper to take the connection";
  keeper = std::make_unique<FdKeeperServer>(kc);
  ASSERT_TRUE(keeper->Start());
  ASSERT_EQ(handed.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  EXPECT_EQ(world->unmount_calls, 0) << "the mount was ended instead of handed over";
  EXPECT_EQ(keeper->size(), 1u);
  m.reset();

  // 2. The agent went first: the stopping keeper is the connection's only holder and stays
  //    until the next agent has taken it over (LIST, then the lease).
  auto finished =
      std::async(std::launch::async, [&] { keeper->FinishServing(std::chrono::seconds(20)); });
  EXPECT_EQ(finished.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  m = std::make_unique<MountManager>(mounter, host, registry, o);
  ASSERT_TRUE(m->Start());
  EXPECT_EQ(mounter.adopted_targets, std::vector<std::string>{a});
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  keeper.reset();
  keeper = std::make_unique<FdKeeperServer>(kc);
  ASSERT_TRUE(keeper->Start());
  for (int i = 0; i < 500 && keeper->size() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(keeper->size(), 1u) << "the next keeper was not given the connection";
  EXPECT_EQ(world->unmount_calls, 0);
}

}  // namespace
}  // namespace spoke::agent
