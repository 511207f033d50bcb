#include "cache-agent/exe/keeper_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "common/fd_keeper.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

bool KeeperAnswers(const std::string& socket) {
  FdKeeperClient keeper(socket, std::chrono::milliseconds(1000));
  return keeper.List().has_value();
}

std::string KeeperBinary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& candidate :
         {self.parent_path() / "spoke-fuse-keeper",
          self.parent_path().parent_path() / "keeper" / "spoke-fuse-keeper"}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return "spoke-fuse-keeper";  // PATH
}

}  // namespace

Status EnsureFuseKeeper(const std::string& socket, const std::string& log_file,
                        std::chrono::milliseconds timeout) {
  if (KeeperAnswers(socket)) return Ok();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket).parent_path(), ec);
  std::string binary = KeeperBinary();
  std::vector<std::string> args = {binary, "--socket", socket};
  pid_t child = ::fork();
  if (child < 0) return Fail(Code::kIo, "cannot start the fd keeper: fork failed");
  if (child == 0) {
    // Own session and a second fork: the keeper is nobody's child and no terminal or agent
    // signal reaches it. Only the stop signals of the keeper itself matter.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::close_range(3, ~0u, 0);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (KeeperAnswers(socket)) {
      log::Info("started the fd keeper", {{"socket", socket}, {"binary", binary}});
      return Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Fail(Code::kUnavailable, "the fd keeper " + binary + " did not answer at " + socket +
                                      " (see " + log_file + ")");
}

}  // namespace spoke::agent
