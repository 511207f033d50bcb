// The real binaries as child processes of a test: started with their output in a log file,
// stopped by pid. spoke-cache-agent has its own start, which waits until its API answers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace spoke::testing {

struct SpawnOptions {
  std::vector<std::string> env;  // NAME=value, added to the test's environment
  std::string netns;             // a NetTopology namespace to run in ("" = the test's)
};

// Starts `args` (args[0] the binary's path) with stdout and stderr appended to `log` and no
// other descriptor of the test's. Everything is prepared before fork(), so a test whose
// threads allocate may call it. The child's pid, -1 when fork() failed.
pid_t SpawnLogged(const std::vector<std::string>& args, const std::string& log,
                  const SpawnOptions& options = {});

// Sends `sig` and reaps the process; SIGKILLs it (a test failure) when it has not exited
// after `timeout`. Returns the wait status; `pid` becomes -1.
int StopProcess(pid_t& pid, int sig, std::chrono::milliseconds timeout = std::chrono::seconds(15));

std::string AgentBinary();  // BinaryDir()/cache-agent/agent/spoke-cache-agent

// spokectl --socket `socket` `args` (a shell command line); (exit code, stdout+stderr).
std::pair<int, std::string> Spokectl(const std::string& socket, const std::string& args);

// Starts spoke-cache-agent --config `config` (output appended to `log`) and waits until its
// API answers `spokectl status` at `socket`; by then its /metrics listener is up too. The
// pid, or -1 (the process stopped) when it did not answer within `timeout`.
pid_t StartAgent(const std::string& config, const std::string& socket, const std::string& log,
                 const SpawnOptions& options = {},
                 std::chrono::milliseconds timeout = std::chrono::seconds(20));

// spoke-fuse-keeper --socket `socket` --orphan-timeout `orphan_timeout_seconds` (output in
// `log`), waited for until its socket exists; -1 (the log says why) when it did not appear
// within 2 s.
pid_t StartKeeper(const std::string& socket, const std::string& log,
                  const std::string& orphan_timeout_seconds = "300");

// The agent.yaml lines agent tests share: `socket`, cache and state directories and the mount
// root under `work`, a cache of `cache_size`, no metrics listener, info logs, the keeper at
// `keeper_socket` run by the test (fuseKeeperStart: false), a 5 s hand-over, and 2 hub
// connections x 16 with a 5 s request bound. Tests append their own lines.
std::string RestartTestAgentYaml(const std::string& work, const std::string& socket,
                                 const std::string& keeper_socket, const std::string& cache_size);

// The sum of every series of `name` (with `label`, e.g. `volume="v1"`, in its label set when
// given) in a Prometheus text exposition such as the agent's /metrics; -1 when there is none.
double MetricSum(const std::string& exposition, const std::string& name,
                 const std::string& label = "");

}  // namespace spoke::testing
