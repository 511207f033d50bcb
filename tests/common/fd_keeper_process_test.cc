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
#include "tests/support/hub.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "spoke-keeper-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::read(fd, out.data() + got, n - got);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  out.resize(got);
  return out;
}

// The real binary, clients in other processes: a client puts a pipe and is SIGKILLed; a new
// client lists it and reads through it.
TEST(FdKeeperProcessTest, DescriptorOutlivesAKilledClient) {
  TempDir dir;
  std::string sock = dir.path() + "/keeper.sock";
  std::string bin = spoke::testing::BinaryDir() + "/cache-agent/keeper/spoke-fuse-keeper";
  pid_t keeper = ::fork();
  ASSERT_GE(keeper, 0);
  if (keeper == 0) {
    ::execl(bin.c_str(), bin.c_str(), "--socket", sock.c_str(), "--log-level", "warn", nullptr);
    _exit(127);
  }
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
  EXPECT_EQ(ReadAll((*list)[0].fd.get(), 8), "survived");

  ::kill(keeper, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(keeper, &status, 0), keeper);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(::access(sock.c_str(), F_OK), 0) << "socket file left behind";
}

}  // namespace
}  // namespace spoke
