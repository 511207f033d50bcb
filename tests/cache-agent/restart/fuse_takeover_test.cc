// A FUSE connection changes hands between processes: a daemon (takeover_testfs, a child
// process) mounts through SessionIo and gives its /dev/fuse fd to the fd keeper (this test
// process); the daemon dies (SIGKILL) or hands over (SIGTERM + drain); a new daemon takes the
// fd from the keeper and serves the same mount. Readers must see neither an error nor a wrong
// byte, a read blocked in the dead daemon must complete, and a long-lived open file must keep
// working.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/fd_keeper.h"
#include "tests/cache-agent/restart/pattern.h"
#include "tests/support/hub.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;

std::string Expected(uint64_t off, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = testfs::Pattern(off + i);
  return s;
}

// One takeover_testfs child with its stdout. The files this test opens on the mount are not
// O_CLOEXEC on purpose: closing one sends FLUSH, and an exec that closed them while no daemon
// serves the mount would wait for the very daemon it is starting. Inherited, they stay open.
class Daemon {
 public:
  explicit Daemon(const std::vector<std::string>& args) {
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    std::string bin = spoke::testing::BinaryDir() + "/tests/cache-agent/restart/takeover_testfs";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      std::vector<char*> argv{const_cast<char*>(bin.c_str())};
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      _exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      // Bounded: a daemon stuck in the kernel is released by TearDown's forced unmount.
      Wait(5s);
    }
    if (out_ >= 0) ::close(out_);
  }
  // The next stdout line, or "" after `timeout`.
  std::string ReadLine(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[256];
      ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // Exit status after waiting at most `timeout`; -1 if still running.
  int Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
};

struct ReadResult {
  ssize_t rc;
  int err;
  std::string data;
};

ReadResult PreadAll(int fd, size_t n, off_t off) {
  std::string buf(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::pread(fd, buf.data() + got, n - got, off + static_cast<off_t>(got));
    if (k < 0) return {k, errno, ""};
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  buf.resize(got);
  return {static_cast<ssize_t>(got), 0, buf};
}

// Reads on a detached thread: if a test fails with the reader still blocked in the kernel, the
// future does not block the test's exit (std::async's would); TearDown then aborts the
// connection, which releases the reader.
std::future<ReadResult> AsyncPread(int fd, size_t n, off_t off) {
  std::promise<ReadResult> promise;
  auto future = promise.get_future();
  std::thread([fd, n, off, p = std::move(promise)]() mutable {
    p.set_value(PreadAll(fd, n, off));
  }).detach();
  return future;
}

class FuseTakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "spoke-takeover-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    mnt_ = dir_ + "/mnt";
    std::filesystem::create_directory(mnt_);
    FdKeeperServer::Config config;
    config.socket_path = dir_ + "/keeper.sock";
    keeper_ = std::make_unique<FdKeeperServer>(config);
    ASSERT_TRUE(keeper_->Start());
  }
  void TearDown() override {
    if (dir_.empty()) return;
    // MNT_FORCE on FUSE aborts the connection: readers still blocked (a failed test) get an
    // error instead of hanging this process forever.
    ::umount2(mnt_.c_str(), MNT_FORCE);
    ::umount2(mnt_.c_str(), MNT_DETACH);
    keeper_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::vector<std::string> Args(const std::string& mode, std::vector<std::string> extra) {
    std::vector<std::string> a{"--keeper", dir_ + "/keeper.sock",      "--key", "vol", mode,
                               "--marker", dir_ + "/slow-read-started"};
    if (mode == "mount") a.insert(a.end(), {"--mountpoint", mnt_});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  void WaitForSlowRead() {
    for (int i = 0; i < 1000 && ::access((dir_ + "/slow-read-started").c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(::access((dir_ + "/slow-read-started").c_str(), F_OK), 0)
        << "the read of /slow never reached the daemon";
  }

  std::string dir_, mnt_;
  std::unique_ptr<FdKeeperServer> keeper_;
};

TEST_F(FuseTakeoverTest, SigkillMidReadIsInvisibleToReaders) {
  auto a = std::make_unique<Daemon>(Args("mount", {"--slow", "block"}));
  ASSERT_EQ(a->ReadLine(10s), "ready resend=not-attempted init_match=0");
  ASSERT_EQ(keeper_->size(), 1u);

  int data = ::open((mnt_ + "/data").c_str(), O_RDONLY);
  ASSERT_GE(data, 0) << std::strerror(errno);
  auto before = PreadAll(data, 64 << 10, 1 << 20);
  ASSERT_EQ(before.rc, 64 << 10);
  EXPECT_EQ(before.data, Expected(1 << 20, 64 << 10));

  int slow = ::open((mnt_ + "/slow").c_str(), O_RDONLY);
  ASSERT_GE(slow, 0) << std::strerror(errno);
  auto blocked = AsyncPread(slow, 128 << 10, 12345);
  WaitForSlowRead();
  EXPECT_EQ(blocked.wait_for(200ms), std::future_status::timeout) << "read did not block";

  a->Signal(SIGKILL);
  ASSERT_NE(a->Wait(5s), -1);
  a.reset();

  Daemon b(Args("takeover", {}));
  EXPECT_EQ(b.ReadLine(10s), "ready resend=sent init_match=1");

  ASSERT_EQ(blocked.wait_for(10s), std::future_status::ready) << "resent read never answered";
  auto r = blocked.get();
  EXPECT_EQ(r.rc, 128 << 10) << std::strerror(r.err);
  EXPECT_EQ(r.data, Expected(12345, 128 << 10));

  // The descriptor opened under the dead daemon: its fh reaches the new one unchanged.
  auto after = PreadAll(data, 256 << 10, 3 << 20);
  EXPECT_EQ(after.rc, 256 << 10) << std::strerror(after.err);
  EXPECT_EQ(after.data, Expected(3 << 20, 256 << 10));
  // New lookups and opens work too.
  int again = ::open((mnt_ + "/slow").c_str(), O_RDONLY);
  ASSERT_GE(again, 0) << std::strerror(errno);
  EXPECT_EQ(PreadAll(again, 4096, 0).data, Expected(0, 4096));
  ::close(again);
  ::close(slow);
  ::close(data);
}

TEST_F(FuseTakeoverTest, SigtermDrainsInFlightReadsThenHandsOver) {
  auto a = std::make_unique<Daemon>(Args("mount", {"--slow", "1500"}));
  ASSERT_EQ(a->ReadLine(10s), "ready resend=not-attempted init_match=0");
  int data = ::open((mnt_ + "/data").c_str(), O_RDONLY);
  int slow = ::open((mnt_ + "/slow").c_str(), O_RDONLY);
  ASSERT_GE(data, 0);
  ASSERT_GE(slow, 0);
  auto in_flight = AsyncPread(slow, 64 << 10, 777);
  WaitForSlowRead();

  a->Signal(SIGTERM);
  // Issued while the old daemon drains: waits in the kernel for the next daemon.
  std::this_thread::sleep_for(100ms);
  auto queued = AsyncPread(data, 64 << 10, 4096);
  EXPECT_EQ(a->ReadLine(10s), "drained ok");
  int status = a->Wait(10s);
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  a.reset();
  // The in-flight read was answered by the old daemon before it left.
  ASSERT_EQ(in_flight.wait_for(0s), std::future_status::ready);
  auto r1 = in_flight.get();
  EXPECT_EQ(r1.rc, 64 << 10) << std::strerror(r1.err);
  EXPECT_EQ(r1.data, Expected(777, 64 << 10));

  Daemon b(Args("takeover", {}));
  EXPECT_EQ(b.ReadLine(10s), "ready resend=sent init_match=1");
  ASSERT_EQ(queued.wait_for(10s), std::future_status::ready);
  auto r2 = queued.get();
  EXPECT_EQ(r2.rc, 64 << 10) << std::strerror(r2.err);
  EXPECT_EQ(r2.data, Expected(4096, 64 << 10));
  auto r3 = PreadAll(slow, 4096, 1 << 20);
  EXPECT_EQ(r3.data, Expected(1 << 20, 4096));
  ::close(slow);
  ::close(data);
}

TEST_F(FuseTakeoverTest, DrainIsBoundedAndTheSuccessorResendsWhatWasLeft) {
  auto a = std::make_unique<Daemon>(Args("mount", {"--slow", "block", "--drain-ms", "300"}));
  ASSERT_EQ(a->ReadLine(10s), "ready resend=not-attempted init_match=0");
  int slow = ::open((mnt_ + "/slow").c_str(), O_RDONLY);
  ASSERT_GE(slow, 0);
  auto stuck = AsyncPread(slow, 8192, 99);
  WaitForSlowRead();
  a->Signal(SIGTERM);
  EXPECT_EQ(a->ReadLine(10s), "drained timeout");
  // The handler thread still sleeps in the read: the process is ended the hard way.
  a.reset();
  Daemon b(Args("takeover", {}));
  EXPECT_EQ(b.ReadLine(10s), "ready resend=sent init_match=1");
  ASSERT_EQ(stuck.wait_for(10s), std::future_status::ready);
  auto r = stuck.get();
  EXPECT_EQ(r.rc, 8192) << std::strerror(r.err);
  EXPECT_EQ(r.data, Expected(99, 8192));
  ::close(slow);
}

}  // namespace
}  // namespace spoke
