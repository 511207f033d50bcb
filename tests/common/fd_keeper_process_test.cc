// The real spoke-fuse-keeper binary with clients in other processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "common/fd_keeper.h"
#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/process.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;
using spoke::testing::ReadUpTo;
using spoke::testing::TempDir;

// The real binary, clients in other processes: a client puts a pipe and is SIGKILLed; a new
// client lists it and reads through it.
TEST(FdKeeperProcessTest, DescriptorOutlivesAKilledClient) {
  TempDir dir;
  std::string sock = dir.path() + "/keeper.sock";
  std::string bin = spoke::testing::BinaryDir() + "/cache-agent/keeper/spoke-fuse-keeper";
  // Stopped below while it keeps a descriptor no client holds a lease on: it serves for
  // --handover-wait first (the agent's successor would take it over), then exits.
  pid_t keeper = spoke::testing::SpawnLogged(
      {bin, "--socket", sock, "--log-level", "warn", "--handover-wait", "1"},
      dir.path() + "/keeper.log");
  ASSERT_GT(keeper, 0);
  struct StopAtExit {
    pid_t& pid;
    ~StopAtExit() { spoke::testing::StopProcess(pid, SIGKILL); }
  } stop_keeper{keeper};
  FdKeeperClient client(sock, 2000ms);
  for (int i = 0; i < 200 && !client.List(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(client.List()) << "spoke-fuse-keeper did not come up at " << sock;
  struct stat st {};
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    // The "agent": creates a pipe, writes into it, hands the read end over, then hangs.
    int p[2];
    if (::pipe(p) != 0) _exit(1);
    if (::write(p[1], "survived", 8) != 8) _exit(2);
    if (!FdKeeperClient(sock, 2000ms).Put("vol", R"({"gen":7})", p[0])) _exit(3);
    ::close(p[0]);
    ::close(p[1]);
    if (::write(ready[1], "k", 1) != 1) _exit(4);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);

  auto list = client.List();
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].metadata_json, R"({"gen":7})");
  EXPECT_EQ(ReadUpTo((*list)[0].fd.get(), 8), "survived");

  int status = spoke::testing::StopProcess(keeper, SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(spoke::testing::ReadWholeFile(dir.path() + "/keeper.log")
                .find("no agent took the kept connections in time"),
            std::string::npos);
  EXPECT_NE(::access(sock.c_str(), F_OK), 0) << "socket file left behind";
}

}  // namespace
}  // namespace spoke
