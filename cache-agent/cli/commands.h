// spokectl's commands: each talks to the agent over its unix socket with a deadline and
// returns the process exit code (0 ok, 1 failed, 2 usage).
#pragma once

#include <iosfwd>

#include "cache-agent/cli/spokectl_args.h"

namespace spoke::cli {

// `tty`: whether `out` is a terminal (warmup draws a progress bar instead of lines).
int RunCommand(const Command& cmd, std::ostream& out, std::ostream& err, bool tty);

}  // namespace spoke::cli
