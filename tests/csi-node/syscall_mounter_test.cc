// SyscallMounter against the real kernel: bind mounts, read-only remounts, paths with
// spaces (mountinfo escapes), and a stale FUSE mount (its daemon died) detached lazily.
// Needs root (CAP_SYS_ADMIN) and /dev/fuse; skipped otherwise.
#define FUSE_USE_VERSION 34
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "csi-node/mounter.h"

namespace spoke::node {
namespace {

namespace fs = std::filesystem;

class SyscallMounterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    char tmpl[] = "/tmp/spoke-mounter-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A private tmpfs: nothing mounted here can leak into the host's namespace.
    ASSERT_EQ(::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=16m"), 0) << strerror(errno);
    ASSERT_EQ(::mount(nullptr, dir_.c_str(), nullptr, MS_PRIVATE, nullptr), 0);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    ::umount2(dir_.c_str(), MNT_DETACH);
    ::rmdir(dir_.c_str());
  }
  std::string dir_;
  SyscallMounter mounter_;
};

TEST_F(SyscallMounterTest, BindRemountReadOnlyUnmount) {
  std::string src = dir_ + "/src dir", dst = dir_ + "/pod target";
  fs::create_directories(src);
  fs::create_directories(dst);
  std::ofstream(src + "/file") << "hello";
  EXPECT_FALSE(*mounter_.IsMountPoint(dst));
  ASSERT_TRUE(mounter_.BindMount(src, dst));
  EXPECT_TRUE(*mounter_.IsMountPoint(dst));  // found through the \040 escape
  EXPECT_TRUE(fs::exists(dst + "/file"));
  EXPECT_FALSE(mounter_.IsStale(dst));
  auto entry = FindMount(*mounter_.ListMounts(), dst);
  ASSERT_TRUE(entry);
  EXPECT_FALSE(entry->read_only());

  ASSERT_TRUE(mounter_.RemountReadOnly(dst));
  entry = FindMount(*mounter_.ListMounts(), dst);
  EXPECT_TRUE(entry->read_only());
  EXPECT_LT(::open((dst + "/new").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EROFS);
  // The source stays writable: only the bind is read-only.
  int fd = ::open((src + "/new").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_GE(fd, 0);
  ::close(fd);

  ASSERT_TRUE(mounter_.Unmount(dst, false));
  EXPECT_FALSE(*mounter_.IsMountPoint(dst));
  EXPECT_TRUE(mounter_.Unmount(dst, false));            // not mounted: Ok
  EXPECT_TRUE(mounter_.Unmount(dir_ + "/gone", true));  // no such path: Ok
  EXPECT_FALSE(mounter_.RemountReadOnly(dst));
}

TEST_F(SyscallMounterTest, CanonicalPathResolvesSymlinkedParents) {
  fs::create_directories(dir_ + "/real/pods");
  fs::create_directory_symlink(dir_ + "/real", dir_ + "/link");
  fs::create_directories(dir_ + "/real/pods/t");
  ASSERT_TRUE(mounter_.BindMount(dir_ + "/real/pods", dir_ + "/link/pods/t"));
  EXPECT_EQ(mounter_.CanonicalPath(dir_ + "/link/pods/t"), dir_ + "/real/pods/t");
  EXPECT_TRUE(*mounter_.IsMountPoint(dir_ + "/link/pods/t/"));
  ASSERT_TRUE(mounter_.Unmount(dir_ + "/link/pods/t", false));
}

TEST_F(SyscallMounterTest, StaleFuseMountIsDetectedAndDetached) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  std::string mnt = dir_ + "/fuse";
  fs::create_directories(mnt);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A FUSE daemon that dies right after mounting, like a crashed cache agent.
    char arg0[] = "spoke-stale-test";
    char* argv[] = {arg0, nullptr};
    fuse_args args = FUSE_ARGS_INIT(1, argv);
    fuse_lowlevel_ops ops{};
    fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
    char ok = (se && fuse_session_mount(se, mnt.c_str()) == 0) ? 1 : 0;
    (void)!::write(pipefd[1], &ok, 1);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char ok = 0;
  ASSERT_EQ(::read(pipefd[0], &ok, 1), 1);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_EQ(ok, 1) << "fuse_session_mount failed";

  EXPECT_TRUE(*mounter_.IsMountPoint(mnt));
  EXPECT_TRUE(mounter_.IsStale(mnt));
  auto entry = FindMount(*mounter_.ListMounts(), mnt);
  ASSERT_TRUE(entry);
  EXPECT_TRUE(entry->fstype.starts_with("fuse"));
  ASSERT_TRUE(mounter_.Unmount(mnt, /*lazy=*/true));
  EXPECT_FALSE(*mounter_.IsMountPoint(mnt));
  EXPECT_FALSE(mounter_.IsStale(mnt));
}

TEST_F(SyscallMounterTest, HungFuseMountDoesNotHangTheProbe) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  std::string mnt = dir_ + "/hung";
  fs::create_directories(mnt);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Mounts, then never answers a request (not even INIT): a deadlocked daemon.
    char arg0[] = "spoke-hung-test";
    char* argv[] = {arg0, nullptr};
    fuse_args args = FUSE_ARGS_INIT(1, argv);
    fuse_lowlevel_ops ops{};
    fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
    char ok = (se && fuse_session_mount(se, mnt.c_str()) == 0) ? 1 : 0;
    (void)!::write(pipefd[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char ok = 0;
  ASSERT_EQ(::read(pipefd[0], &ok, 1), 1);
  ::close(pipefd[0]);
  ASSERT_EQ(ok, 1);

  SyscallMounter mounter(std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  // Not answering is not stale (the daemon may be slow or about to be replaced): only a
  // dead connection is; and the probe returns within its bound.
  EXPECT_FALSE(mounter.IsStale(mnt));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(*mounter.IsMountPoint(mnt));  // answered from mountinfo, never blocks
  ASSERT_TRUE(mounter.Unmount(mnt, /*lazy=*/true));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_FALSE(*mounter.IsMountPoint(mnt));
}

}  // namespace
}  // namespace spoke::node
