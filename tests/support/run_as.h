// A non-root caller for tests that run as root: a child process as another uid and gid.
// Header-only, so that unit tests use it without linking spoke_test_support.
#pragma once

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace spoke::testing {

// The exit code of a child that could not become the user.
inline constexpr int kCouldNotBecomeUser = 90;

// In a child between fork() and exec() or _exit(): becomes uid and gid `id` with the
// supplementary `groups` (none by default). System calls only, so it is safe in a child of a
// threaded test.
inline bool BecomeUser(uint32_t id, const std::vector<gid_t>& groups = {}) {
  return ::setgroups(groups.size(), groups.data()) == 0 && ::setgid(id) == 0 && ::setuid(id) == 0;
}

// Runs `body` in a child process as uid and gid `id` (and `groups`); the child's exit code
// (body's return value, or kCouldNotBecomeUser), -1 when it did not exit normally.
inline int RunAsUser(uint32_t id, const std::function<int()>& body,
                     const std::vector<gid_t>& groups = {}) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!BecomeUser(id, groups)) ::_exit(kCouldNotBecomeUser);
    ::_exit(body());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace spoke::testing
