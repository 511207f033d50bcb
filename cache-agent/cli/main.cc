// spokectl: the command-line client of spoke-cache-agent (mount without Kubernetes, status,
// stats, warm-up with a progress bar, evict, hints). `spokectl --help` lists the commands.
#include <unistd.h>

#include <iostream>

#include "cache-agent/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto cmd = spoke::cli::ParseArgs(args);
  if (!cmd) {
    std::cerr << "spokectl: " << cmd.error().message() << "\n\n" << spoke::cli::Usage();
    return 2;
  }
  return spoke::cli::RunCommand(*cmd, std::cout, std::cerr, ::isatty(STDOUT_FILENO) != 0);
}
