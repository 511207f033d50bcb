// spokectl's command line: parsed into a Command before anything talks to the agent, so a
// typo fails fast with the usage line (exit code 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/volume.h"

namespace spoke::cli {

inline constexpr char kDefaultSocket[] = "/run/spoke/agent.sock";

enum class Verb { kHelp, kVersion, kMount, kUnmount, kStatus, kStats, kWarmup, kEvict, kHint };

struct Command {
  Verb verb = Verb::kHelp;
  std::string socket = kDefaultSocket;
  std::string nfs_url;    // mount
  std::string dir;        // mount, unmount, stats, warmup, evict, hint
  std::string volume_id;  // stats --volume, warmup --volume
  std::string prefix;     // warmup, evict
  std::string hint_file;  // hint: a file or "-" (stdin)
  // mount options, as volume-context keys (only those given).
  StringMap mount_options;
  bool read_only = false;
  bool json = false;                   // warmup --json
  uint64_t rate_bytes_per_second = 0;  // warmup --rate (0: no limit)
  bool verify = false;                 // warmup --verify
};

// argv without the program name. kInvalidArgument with a message naming the flag or the
// missing argument.
Result<Command> ParseArgs(const std::vector<std::string>& args);

std::string Usage();

// A rate in bytes per second as `warmup --rate` takes it: a whole number of bytes with an
// optional Kubernetes quantity suffix (Ki Mi Gi Ti: powers of 1024; k M G T: of 1000) and an
// optional "/s": "52428800", "50Mi", "50Mi/s", "200M". Between 1 and 1Ti. kInvalidArgument
// naming --rate otherwise (zero, a sign, a fraction, another suffix, too large).
Result<uint64_t> ParseByteRate(std::string_view text);

// What `spokectl mount URL DIR ...` sends: volume id and volume context. kInvalidArgument
// naming the URL or the option.
struct MountPlan {
  std::string volume_id;
  StringMap volume_context;
  bool read_only = false;
};
Result<MountPlan> PlanMount(const Command& cmd);

// warmup/evict PREFIX as sent to the agent: a path in the volume mounted at `dir`, "" for all
// of it. ".", "/", "./sub", "sub/" are forgiven (NormalizePathInVolume), and an absolute
// path under DIR ("/mnt/d/train" for DIR /mnt/d, what a shell completes) is taken relative
// to DIR. kInvalidArgument naming PREFIX for "..", or an absolute path outside DIR.
Result<std::string> PrefixInVolume(const std::string& dir, const std::string& prefix);

// An absolute, lexically normal path for DIR (relative to the working directory).
std::string AbsoluteDir(const std::string& dir);

}  // namespace spoke::cli
