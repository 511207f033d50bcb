// Write-back faults with the real processes: spoke-cache-agent serving a spokectl scratch mount
// (writeMode writeback) of nfs-ganesha behind the WAN proxy, a spoke-fuse-keeper holding the
// connection, and a writer as uid 1000. A hub restart while writes are held loses nothing; an
// agent killed while it holds answered writes keeps what fsync acknowledged, and the writer's
// next call fails; a full hub fails the next call with ENOSPC.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/process.h"
#include "tests/support/run_as.h"

namespace spoke {
namespace {

namespace fs = std::filesystem;
using spoke::testing::BinaryDir;
using spoke::testing::ReadFileTail;
using spoke::testing::ReadWholeFile;
using spoke::testing::SpawnLogged;
using spoke::testing::StopProcess;

constexpr size_t kMiB = 1 << 20;

// Bytes that differ at every offset and between files.
std::string Pattern(size_t size, uint64_t seed) {
  std::string s(size, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

// A writer child as uid 1000 that runs one step per byte the test sends and answers 0 or the
// errno of the step's first failing call. Steps are made before fork(): the child only makes
// system calls.
class Writer {
 public:
  using Step = std::function<int(int& fd)>;
  explicit Writer(std::vector<Step> steps) : steps_(std::move(steps)) {
    if (::pipe(go_) != 0 || ::pipe(done_) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!spoke::testing::BecomeUser(1000)) ::_exit(spoke::testing::kCouldNotBecomeUser);
      int fd = -1;
      for (auto& step : steps_) {
        char c;
        if (::read(go_[0], &c, 1) != 1) ::_exit(91);
        unsigned char answer = static_cast<unsigned char>(step(fd));
        if (::write(done_[1], &answer, 1) != 1) ::_exit(92);
      }
      ::_exit(0);
    }
  }
  ~Writer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {go_[0], go_[1], done_[0], done_[1]}) ::close(fd);
  }
  // Runs the next step; its answer (0 or an errno), or -1 when the child is gone.
  int Next() {
    char c = 'w';
    if (::write(go_[1], &c, 1) != 1) return -1;
    unsigned char answer = 0;
    return ::read(done_[0], &answer, 1) == 1 ? answer : -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  std::vector<Step> steps_;
  int go_[2] = {-1, -1}, done_[2] = {-1, -1};
  pid_t pid_ = -1;
};

int WriteAll(int fd, const std::string& data, size_t chunk) {
  for (size_t off = 0; off < data.size(); off += chunk) {
    size_t n = std::min(chunk, data.size() - off);
    if (::write(fd, data.data() + off, n) != static_cast<ssize_t>(n)) return errno ? errno : EIO;
  }
  return 0;
}

class WriteBackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    hub_ = spoke::testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
    wan_ = spoke::testing::WanProxy::Start(*hub_, 10);
    ASSERT_NE(wan_, nullptr);
    work_ = std::make_unique<spoke::testing::TempDir>("spoke-writeback-it");
    ASSERT_EQ(::chmod(work_->path().c_str(), 0755), 0);  // uid 1000 walks to the mount
    mnt_ = work_->path() + "/mnt";
    socket_ = work_->path() + "/agent.sock";
    keeper_socket_ = work_->path() + "/keeper.sock";
    std::ofstream(work_->path() + "/agent.yaml")
        << spoke::testing::RestartTestAgentYaml(work_->path(), socket_, keeper_socket_, "256Mi");
    MakeUserDir();
    keeper_pid_ = spoke::testing::StartKeeper(keeper_socket_, work_->path() + "/keeper.log");
    ASSERT_GT(keeper_pid_, 0) << ReadWholeFile(work_->path() + "/keeper.log");
  }

  void TearDown() override {
    if (agent_pid_ > 0) {
      spoke::testing::Spokectl(socket_, "unmount " + mnt_);
      StopProcess(agent_pid_, SIGTERM);
    }
    if (!mnt_.empty()) ::umount2(mnt_.c_str(), MNT_DETACH);
    if (keeper_pid_ > 0) StopProcess(keeper_pid_, SIGTERM);
    work_.reset();
    wan_.reset();
    if (!tmpfs_.empty()) {
      hub_->Stop();
      ::umount2(tmpfs_.c_str(), MNT_DETACH);
    }
    hub_.reset();
  }

  void MakeUserDir() {
    const std::string dir = hub_->export_dir() + "/u1000";
    fs::create_directories(dir);
    ASSERT_EQ(::chown(dir.c_str(), 1000, 1000), 0);
  }

  void StartAgent() {
    std::error_code ec;
    fs::remove(socket_, ec);
    agent_pid_ = spoke::testing::StartAgent(work_->path() + "/agent.yaml", socket_,
                                            work_->path() + "/agent.log");
    ASSERT_GT(agent_pid_, 0) << "spoke-cache-agent did not come up" << Diagnostics();
  }

  void MountScratch(const std::string& write_mode = "writeback") {
    HubAddress wan = wan_->address();
    std::string url = "'nfs://127.0.0.1" + wan.share + "?nfsport=" + std::to_string(wan.nfs_port) +
                      "&mountport=" + std::to_string(wan.mount_port) + "'";
    auto [rc, out] = spoke::testing::Spokectl(
        socket_, "mount " + url + " " + mnt_ + " --mode scratch --write-mode " + write_mode);
    ASSERT_EQ(rc, 0) << out << Diagnostics();
  }

  void WaitKept() {
    for (int i = 0;
         i < 100 && ReadWholeFile(work_->path() + "/keeper.log").find("kept") == std::string::npos;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(ReadWholeFile(work_->path() + "/keeper.log").find("kept"), std::string::npos);
  }

  // The export on an 8 MiB tmpfs, written with 16 MiB: the hub answers NFS3ERR_NOSPC.
  void FillHub(const std::string& write_mode);

  std::string Diagnostics() {
    return "\nagent log (tail):\n" + ReadFileTail(work_->path() + "/agent.log", 8000);
  }

  std::unique_ptr<spoke::testing::TestHub> hub_;
  std::unique_ptr<spoke::testing::WanProxy> wan_;
  std::unique_ptr<spoke::testing::TempDir> work_;
  std::string mnt_, socket_, keeper_socket_, tmpfs_;
  pid_t agent_pid_ = -1;
  pid_t keeper_pid_ = -1;
};

TEST_F(WriteBackTest, AHubRestartWhileWritesAreHeldLosesNothing) {
  StartAgent();
  MountScratch();
  if (HasFatalFailure()) return;
  const std::string file = mnt_ + "/u1000/ckpt.bin";
  const std::string first = Pattern(8 * kMiB, 1), rest = Pattern(24 * kMiB, 2);
  Writer w({[&](int& fd) {
              fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
              return fd < 0 ? errno : WriteAll(fd, first, kMiB);
            },
            [&](int& fd) { return WriteAll(fd, rest, kMiB); },
            [&](int& fd) { return ::fsync(fd) == 0 ? 0 : errno; },
            [&](int& fd) { return ::close(fd) == 0 ? 0 : errno; }});
  ASSERT_TRUE(w.started());
  ASSERT_EQ(w.Next(), 0) << "the first 8 MiB" << Diagnostics();
  hub_->Stop();  // the rest is answered while the hub is down: held, sent again when it is back
  ASSERT_EQ(w.Next(), 0) << "writes while the hub is down" << Diagnostics();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_TRUE(hub_->Restart());
  EXPECT_EQ(w.Next(), 0) << "fsync after the hub came back" << Diagnostics();
  EXPECT_EQ(w.Next(), 0) << "close" << Diagnostics();
  const std::string got = ReadWholeFile(hub_->export_dir() + "/u1000/ckpt.bin");
  EXPECT_EQ(got.size(), first.size() + rest.size());
  EXPECT_TRUE(got == first + rest) << "the hub's file differs from what was written";
  struct stat st;
  ASSERT_EQ(::stat((hub_->export_dir() + "/u1000/ckpt.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
}

// writeMode unstable: the hub answers WRITEs before its disk has them. A hub that restarts
// before the COMMIT comes back with another write verifier, and what it answered may be gone
// (here: the file cut to nothing while the hub is down, as a crash of its machine would): the
// agent sends every uncommitted write again before fsync returns.
TEST_F(WriteBackTest, AHubRestartBeforeTheCommitHasTheAnsweredWritesSentAgain) {
  StartAgent();
  MountScratch("unstable");
  if (HasFatalFailure()) return;
  const std::string file = mnt_ + "/u1000/ckpt.bin";
  const std::string on_hub = hub_->export_dir() + "/u1000/ckpt.bin";
  const std::string data = Pattern(3 * kMiB, 7);  // under the 4 MiB a COMMIT starts at
  Writer w({[&](int& fd) {
              fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
              return fd < 0 ? errno : WriteAll(fd, data, kMiB);
            },
            [&](int& fd) { return ::fsync(fd) == 0 ? 0 : errno; },
            [&](int& fd) { return ::close(fd) == 0 ? 0 : errno; }});
  ASSERT_TRUE(w.started());
  ASSERT_EQ(w.Next(), 0) << "the writes" << Diagnostics();
  // Answered: the hub applied them (no COMMIT yet, nobody waits).
  for (int i = 0; i < 100 && ReadWholeFile(on_hub).size() < data.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ReadWholeFile(on_hub).size(), data.size()) << Diagnostics();
  hub_->Stop();
  ASSERT_EQ(::truncate(on_hub.c_str(), 0), 0) << std::strerror(errno);
  ASSERT_TRUE(hub_->Restart());
  EXPECT_EQ(w.Next(), 0) << "fsync after the hub came back" << Diagnostics();
  EXPECT_TRUE(ReadWholeFile(on_hub) == data) << "the uncommitted writes were not sent again";
  EXPECT_NE(ReadWholeFile(work_->path() + "/agent.log").find("write verifier changed"),
            std::string::npos)
      << Diagnostics();
  EXPECT_EQ(w.Next(), 0) << "close" << Diagnostics();
}

// close-to-open: once close() returns, the hub has every byte (no fsync), and a rename
// after it with an fsync of the directory leaves the file whole under its new name.
TEST_F(WriteBackTest, CloseReturnsOnceTheHubHasEveryByte) {
  StartAgent();
  MountScratch();
  if (HasFatalFailure()) return;
  const std::string tmp = mnt_ + "/u1000/step-1.tmp", final_name = mnt_ + "/u1000/step-1.pt";
  const std::string data = Pattern(16 * kMiB + 123, 6);
  const std::string dir = mnt_ + "/u1000";
  Writer w({[&](int& fd) {
              fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
              if (fd < 0) return errno;
              if (int e = WriteAll(fd, data, kMiB); e != 0) return e;
              return ::close(fd) == 0 ? 0 : errno;
            },
            [&](int&) {
              if (::rename(tmp.c_str(), final_name.c_str()) != 0) return errno;
              int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
              if (d < 0) return errno;
              int rc = ::fsync(d) == 0 ? 0 : errno;
              ::close(d);
              return rc;
            }});
  ASSERT_TRUE(w.started());
  ASSERT_EQ(w.Next(), 0) << "write and close" << Diagnostics();
  EXPECT_TRUE(ReadWholeFile(hub_->export_dir() + "/u1000/step-1.tmp") == data)
      << "close returned before the hub had the file";
  ASSERT_EQ(w.Next(), 0) << "rename and fsync of the directory" << Diagnostics();
  EXPECT_TRUE(ReadWholeFile(hub_->export_dir() + "/u1000/step-1.pt") == data);
  EXPECT_TRUE(ReadWholeFile(final_name) == data) << "read back through the mount";
}

TEST_F(WriteBackTest, AKilledAgentKeepsWhatFsyncAcknowledgedAndTellsTheWriter) {
  StartAgent();
  MountScratch();
  if (HasFatalFailure()) return;
  WaitKept();
  if (HasFatalFailure()) return;
  const std::string file = mnt_ + "/u1000/records.bin";
  const std::string acked = Pattern(4 * kMiB, 3), unacked = Pattern(4 * kMiB, 4);
  Writer w({[&](int& fd) {
              fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
              if (fd < 0) return errno;
              if (int e = WriteAll(fd, acked, kMiB); e != 0) return e;
              return ::fsync(fd) == 0 ? 0 : errno;
            },
            [&](int& fd) { return WriteAll(fd, unacked, kMiB); },
            [&](int& fd) { return ::fsync(fd) == 0 ? 0 : errno; },
            [&](int& fd) { return ::close(fd) == 0 ? 0 : errno; }});
  ASSERT_TRUE(w.started());
  ASSERT_EQ(w.Next(), 0) << "the acknowledged records" << Diagnostics();
  wan_->Freeze(true);  // the next writes are answered and held: the hub has none of them
  ASSERT_EQ(w.Next(), 0) << "writes answered while held" << Diagnostics();
  StopProcess(agent_pid_, SIGKILL);
  wan_->Freeze(false);
  StartAgent();
  if (HasFatalFailure()) return;
  EXPECT_EQ(w.Next(), EIO) << "fsync after the kill must report the possible loss" << Diagnostics();
  EXPECT_EQ(w.Next(), 0) << "close after the loss was reported" << Diagnostics();
  const std::string got = ReadWholeFile(hub_->export_dir() + "/u1000/records.bin");
  ASSERT_GE(got.size(), acked.size());
  EXPECT_TRUE(got.compare(0, acked.size(), acked) == 0) << "fsync-acknowledged bytes were lost";
  // Through the mount, the file is what the hub has.
  EXPECT_TRUE(ReadWholeFile(file) == got);
}

void WriteBackTest::FillHub(const std::string& write_mode) {
  // The export on an 8 MiB tmpfs: the hub answers NFS3ERR_NOSPC once it is full.
  hub_->Stop();
  tmpfs_ = hub_->export_dir();
  ASSERT_EQ(::mount("tmpfs", tmpfs_.c_str(), "tmpfs", 0, "size=8m,mode=0755"), 0)
      << std::strerror(errno);
  MakeUserDir();
  ASSERT_TRUE(hub_->Restart());
  StartAgent();
  MountScratch(write_mode);
  if (HasFatalFailure()) return;
  const std::string file = mnt_ + "/u1000/big.bin";
  const std::string data = Pattern(16 * kMiB, 5);
  Writer w({[&](int& fd) {
              fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
              if (fd < 0) return errno;
              // A write fails once an earlier one's ENOSPC came back; otherwise fsync does.
              if (int e = WriteAll(fd, data, kMiB); e != 0) return e;
              return ::fsync(fd) == 0 ? 0 : errno;
            },
            [&](int& fd) { return ::close(fd) == 0 ? 0 : errno; }});
  ASSERT_TRUE(w.started());
  EXPECT_EQ(w.Next(), ENOSPC) << Diagnostics();
  EXPECT_EQ(w.Next(), 0) << "close after the error was reported" << Diagnostics();
}

TEST_F(WriteBackTest, AFullHubFailsTheNextCallWithEnospc) { FillHub("writeback"); }

TEST_F(WriteBackTest, AFullHubFailsTheWriteWithEnospcInSyncMode) { FillHub("sync"); }

TEST_F(WriteBackTest, AFullHubFailsTheNextCallWithEnospcInUnstableMode) { FillHub("unstable"); }

}  // namespace
}  // namespace spoke
