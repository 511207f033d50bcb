#define FUSE_USE_VERSION 34
#include "cache-agent/agent/host_mounts.h"

#include <fuse_lowlevel.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tests/cache-agent/agent/fakes.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

using testing::FakeHostMounts;

constexpr char kSample[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:35 / /var/lib/kubelet/plugins/kubernetes.io/csi/spoke.csi.dev/abc/globalmount "
    "rw,nosuid,nodev,relatime shared:20 master:3 - fuse.spoke spoke:vol1 "
    "rw,user_id=0,group_id=0\n"
    "41 22 0:36 / /mnt/with\\040space rw - fuse spoke rw,user_id=0\n"
    "42 22 0:37 / /mnt/other rw - fuse.sshfs host:/x rw\n"
    "garbage line\n"
    "43 22 0:38 / /mnt/tmp rw - tmpfs tmpfs rw\n";

TEST(MountInfoTest, ParsesFieldsAndEscapes) {
  auto m = ParseMountInfo(kSample);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].mount_point, "/");
  EXPECT_EQ(m[0].fs_type, "ext4");
  EXPECT_EQ(m[1].mount_point,
            "/var/lib/kubelet/plugins/kubernetes.io/csi/spoke.csi.dev/abc/globalmount");
  EXPECT_EQ(m[1].fs_type, "fuse.spoke");
  EXPECT_EQ(m[1].source, "spoke:vol1");
  EXPECT_EQ(m[2].mount_point, "/mnt/with space");
  EXPECT_EQ(m[4].fs_type, "tmpfs");
}

TEST(MountInfoTest, RecognisesSpokeFuseMounts) {
  auto m = ParseMountInfo(kSample);
  EXPECT_FALSE(IsSpokeFuseMount(m[0]));
  EXPECT_TRUE(IsSpokeFuseMount(m[1]));   // fuse.spoke
  EXPECT_TRUE(IsSpokeFuseMount(m[2]));   // fuse with a spoke source
  EXPECT_FALSE(IsSpokeFuseMount(m[3]));  // someone else's FUSE file system
  EXPECT_FALSE(IsSpokeFuseMount(m[4]));
}

TEST(MountInfoTest, FindMountTakesTheTopOfAStack) {
  auto m = ParseMountInfo(
      "1 0 0:1 / /a rw - tmpfs tmpfs rw\n"
      "2 1 0:2 / /a rw - fuse.spoke spoke rw\n");
  const MountEntry* e = FindMount(m, "/a");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->fs_type, "fuse.spoke");
  EXPECT_EQ(FindMount(m, "/b"), nullptr);
}

TEST(CleanStaleMountTest, DetachesDisconnectedAndSpokeMountsOnly) {
  FakeHostMounts host;
  host.table = ParseMountInfo(kSample);
  host.disconnected.insert("/mnt/dead");  // not in the table: ENOTCONN alone is enough
  auto r = CleanStaleMount(host, "/mnt/dead");
  ASSERT_TRUE(r);
  EXPECT_TRUE(*r);
  r = CleanStaleMount(host, "/mnt/with space");
  ASSERT_TRUE(r);
  EXPECT_TRUE(*r);
  r = CleanStaleMount(host, "/mnt/other");  // sshfs: not ours, left alone
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  r = CleanStaleMount(host, "/mnt/nothing");
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  EXPECT_EQ(host.detached, (std::vector<std::string>{"/mnt/dead", "/mnt/with space"}));
}

// A real FUSE mount whose daemon is killed -9: the state a crashed agent leaves behind.
TEST(LinuxHostMountsTest, DetectsAndCleansAKilledFuseDaemon) {
  if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
    GTEST_SKIP() << "needs root and /dev/fuse";
  }
  spoke::testing::TempDir dir("spoke-stale");
  std::string mnt = dir.path() + "/mnt";
  std::filesystem::create_directories(mnt);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: an empty FUSE file system mounted as fuse.spoke.
    const char* argv[] = {"spoke-test", "-o", "fsname=spoke-test,subtype=spoke"};
    struct fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
    struct fuse_lowlevel_ops ops {};
    struct fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
    if (!se || fuse_session_mount(se, mnt.c_str()) != 0) _exit(1);
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    fuse_session_loop(se);
    _exit(0);
  }
  ::close(ready[1]);
  // Whatever happens below, leave no mount and no child behind.
  struct Cleanup {
    pid_t pid;
    std::string mnt;
    ~Cleanup() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, WNOHANG);
      ::umount2(mnt.c_str(), MNT_DETACH);
    }
  } cleanup{pid, mnt};
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the FUSE child did not mount";
  ::close(ready[0]);

  LinuxHostMounts host;
  const MountEntry* live = nullptr;
  auto table = host.List();
  live = FindMount(table, mnt);
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(live->fs_type, "fuse.spoke");
  EXPECT_FALSE(host.IsDisconnected(mnt));

  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(host.IsDisconnected(mnt));

  auto cleaned = CleanStaleMount(host, mnt);
  ASSERT_TRUE(cleaned) << cleaned.error().message();
  EXPECT_TRUE(*cleaned);
  EXPECT_FALSE(host.IsDisconnected(mnt));
  table = host.List();
  EXPECT_EQ(FindMount(table, mnt), nullptr);
  struct stat st;
  EXPECT_EQ(::stat(mnt.c_str(), &st), 0);
}

}  // namespace
}  // namespace spoke::agent
