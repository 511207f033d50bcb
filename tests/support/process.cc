#include "tests/support/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "tests/support/hub.h"
#include "tests/support/netns.h"

extern char** environ;

namespace spoke::testing {

pid_t SpawnLogged(const std::vector<std::string>& args, const std::string& log,
                  const SpawnOptions& options) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const auto& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!options.netns.empty() && !NetTopology::JoinInChild(options.netns)) ::_exit(126);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    // Nothing of the test's, least of all its files on a FUSE mount: an agent closing one of
    // those when it dies would wait for its own answer.
    ::close_range(3, ~0u, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

int StopProcess(pid_t& pid, int sig, std::chrono::milliseconds timeout) {
  int status = 0;
  if (pid <= 0) return status;
  ::kill(pid, sig);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ADD_FAILURE() << "process " << pid << " did not stop on signal " << sig;
  pid = -1;
  return status;
}

pid_t StartKeeper(const std::string& socket, const std::string& log,
                  const std::string& orphan_timeout_seconds) {
  pid_t pid = SpawnLogged({BinaryDir() + "/cache-agent/keeper/spoke-fuse-keeper", "--socket",
                           socket, "--orphan-timeout", orphan_timeout_seconds},
                          log);
  for (int i = 0; i < 100 && !std::filesystem::exists(socket); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!std::filesystem::exists(socket)) StopProcess(pid, SIGKILL);
  return pid;
}

std::string RestartTestAgentYaml(const std::string& work, const std::string& socket,
                                 const std::string& keeper_socket, const std::string& cache_size) {
  std::ostringstream y;
  y << "socket: " << socket << "\n"
    << "cacheDir: " << work << "/cache\n"
    << "cacheSizeBytes: " << cache_size << "\n"
    << "stateDir: " << work << "/state\n"
    << "mountRoots: [" << work << "]\n"
    << "metricsAddress: \"\"\n"
    << "logLevel: info\n"
    << "fuseKeeperSocket: " << keeper_socket << "\n"
    << "fuseKeeperStart: false\n"
    << "handoverTimeoutSeconds: 5\n"
    << "hub: {connections: 2, inflightPerConnection: 16, requestTimeoutSeconds: 5}\n";
  return y.str();
}

std::string AgentBinary() { return BinaryDir() + "/cache-agent/agent/spoke-cache-agent"; }

std::pair<int, std::string> Spokectl(const std::string& socket, const std::string& args) {
  return Capture(BinaryDir() + "/cache-agent/cli/spokectl --socket " + socket + " " + args);
}

pid_t StartAgent(const std::string& config, const std::string& socket, const std::string& log,
                 const SpawnOptions& options, std::chrono::milliseconds timeout) {
  pid_t pid = SpawnLogged({AgentBinary(), "--config", config}, log, options);
  if (pid < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(socket) && Spokectl(socket, "status").first == 0) return pid;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return -1;  // it exited: the log says why
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  StopProcess(pid, SIGKILL);
  return -1;
}

double MetricSum(const std::string& exposition, const std::string& name, const std::string& label) {
  std::istringstream in(exposition);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    if (!(line.starts_with(name + " ") || line.starts_with(name + "{"))) continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    found = true;
  }
  return found ? sum : -1;
}

}  // namespace spoke::testing
