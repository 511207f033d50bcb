#include "cache-agent/cli/spokectl_args.h"

#include <filesystem>

namespace spoke::cli {
namespace {

Error Usage(std::string why) { return Error(Code::kInvalidArgument, std::move(why)); }

}  // namespace

std::string Usage() {
  return "usage: spokectl [--socket PATH] COMMAND ...\n"
         "\n"
         "  mount NFS-URL DIR [--mode dataset|scratch] [--consistency immutable|ttl|strict]\n"
         "        [--prefetch off|readahead|auto] [--ttl SECONDS] [--hub-timeout SECONDS]\n"
         "        [--read-only]\n"
         "      NFS-URL: nfs://server/export/path?nfsport=N&mountport=M\n"
         "  unmount DIR\n"
         "  status                      mounts and hub reachability\n"
         "  stats [DIR | --volume ID]   cache, hub and prefetch figures\n"
         "  warmup DIR [PREFIX]         fetch everything (under PREFIX) into the cache\n"
         "  evict DIR [PREFIX]          drop cached blocks (under PREFIX)\n"
         "  hint DIR FILE|-             upcoming paths, one per line, in read order\n"
         "  version\n"
         "\n"
         "  --socket PATH   the agent's socket (default " +
         std::string(kDefaultSocket) + ")\n";
}

Result<Command> ParseArgs(const std::vector<std::string>& args) {
  Command cmd;
  std::vector<std::string> positional;
  std::optional<std::string> verb;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // --flag VALUE or --flag=VALUE.
    auto take = [&](std::string_view flag, std::string* out) -> Result<bool> {
      if (a == flag) {
        if (i + 1 >= args.size())
          return std::unexpected(Usage(std::string(flag) + " needs a value"));
        *out = args[++i];
        return true;
      }
      if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') {
        *out = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string value;
    struct MountFlag {
      std::string_view flag;
      std::string_view key;
    };
    static constexpr MountFlag kMountFlags[] = {{"--mode", "mode"},
                                                {"--consistency", "consistency"},
                                                {"--prefetch", "prefetch"},
                                                {"--ttl", "ttlSeconds"},
                                                {"--hub-timeout", "hubTimeoutSeconds"}};
    bool matched = false;
    if (auto r = take("--socket", &cmd.socket); !r) {
      return std::unexpected(r.error());
    } else if (*r) {
      matched = true;
    }
    if (!matched) {
      if (auto r = take("--volume", &cmd.volume_id); !r) {
        return std::unexpected(r.error());
      } else if (*r) {
        matched = true;
      }
    }
    for (const auto& f : kMountFlags) {
      if (matched) break;
      auto r = take(f.flag, &value);
      if (!r) return std::unexpected(r.error());
      if (*r) {
        cmd.mount_options[std::string(f.key)] = value;
        matched = true;
      }
    }
    if (matched) continue;
    if (a == "--read-only") {
      cmd.read_only = true;
    } else if (a == "-h" || a == "--help" || a == "help") {
      cmd.verb = Verb::kHelp;
      return cmd;
    } else if (a == "--version") {
      cmd.verb = Verb::kVersion;
      return cmd;
    } else if (a == "-") {
      positional.push_back(a);
    } else if (a.starts_with("-")) {
      return std::unexpected(Usage("unknown flag '" + a + "'"));
    } else if (!verb) {
      verb = a;
    } else {
      positional.push_back(a);
    }
  }
  if (!verb) return std::unexpected(Usage("no command given"));
  if (cmd.socket.empty() || cmd.socket.front() != '/') {
    return std::unexpected(Usage("--socket: must be an absolute path"));
  }
  auto want = [&](size_t min, size_t max, std::string_view what) -> Status {
    if (positional.size() < min || positional.size() > max) {
      return std::unexpected(Usage(*verb + ": expected " + std::string(what)));
    }
    return {};
  };
  auto only_for = [&](bool ok, std::string_view flag) -> Status {
    if (!ok) {
      return std::unexpected(Usage(std::string(flag) + " is not an option of " + *verb));
    }
    return {};
  };
  Status s;
  const std::string& v = *verb;
  const bool is_mount = v == "mount";
  if (s = only_for(is_mount || cmd.mount_options.empty(),
                   "--mode/--consistency/--prefetch/--ttl/--hub-timeout");
      !s)
    return std::unexpected(s.error());
  if (s = only_for(is_mount || !cmd.read_only, "--read-only"); !s)
    return std::unexpected(s.error());
  if (s = only_for(v == "stats" || cmd.volume_id.empty(), "--volume"); !s)
    return std::unexpected(s.error());
  if (is_mount) {
    cmd.verb = Verb::kMount;
    if (s = want(2, 2, "NFS-URL DIR"); !s) return std::unexpected(s.error());
    cmd.nfs_url = positional[0];
    cmd.dir = positional[1];
  } else if (v == "unmount" || v == "umount") {
    cmd.verb = Verb::kUnmount;
    if (s = want(1, 1, "DIR"); !s) return std::unexpected(s.error());
    cmd.dir = positional[0];
  } else if (v == "status") {
    cmd.verb = Verb::kStatus;
    if (s = want(0, 0, "no arguments"); !s) return std::unexpected(s.error());
  } else if (v == "stats") {
    cmd.verb = Verb::kStats;
    if (s = want(0, 1, "[DIR | --volume ID]"); !s) return std::unexpected(s.error());
    if (!positional.empty()) cmd.dir = positional[0];
    if (!cmd.dir.empty() && !cmd.volume_id.empty()) {
      return std::unexpected(Usage("stats: give DIR or --volume ID, not both"));
    }
  } else if (v == "warmup" || v == "evict") {
    cmd.verb = v == "warmup" ? Verb::kWarmup : Verb::kEvict;
    if (s = want(1, 2, "DIR [PREFIX]"); !s) return std::unexpected(s.error());
    cmd.dir = positional[0];
    if (positional.size() > 1) cmd.prefix = positional[1];
  } else if (v == "hint") {
    cmd.verb = Verb::kHint;
    if (s = want(2, 2, "DIR FILE|-"); !s) return std::unexpected(s.error());
    cmd.dir = positional[0];
    cmd.hint_file = positional[1];
  } else if (v == "version") {
    cmd.verb = Verb::kVersion;
  } else {
    return std::unexpected(Usage("unknown command '" + v + "'"));
  }
  return cmd;
}

Result<MountPlan> PlanMount(const Command& cmd) {
  auto hub = ParseNfsUrl(cmd.nfs_url);
  if (!hub) return std::unexpected(hub.error());
  StringMap ctx = cmd.mount_options;
  ctx[std::string(kParamServer)] = hub->server;
  ctx[std::string(kParamShare)] = hub->share;
  ctx[std::string(kParamNfsPort)] = std::to_string(hub->nfs_port);
  ctx[std::string(kParamMountPort)] = std::to_string(hub->mount_port);
  ctx[std::string(kCtxPath)] = "";
  if (!ctx.contains(std::string(kParamMode))) ctx[std::string(kParamMode)] = "dataset";
  // Validate here so that a bad flag names the flag's key before anything is sent.
  auto parsed = VolumeContext::FromMap(ctx);
  if (!parsed) {
    std::string msg = parsed.error().message();
    for (auto [flag, key] : {std::pair{"--mode", "mode"},
                             {"--consistency", "consistency"},
                             {"--prefetch", "prefetch"},
                             {"--ttl", "ttlSeconds"},
                             {"--hub-timeout", "hubTimeoutSeconds"}}) {
      if (msg.find(key) != std::string::npos) {
        msg = std::string(flag) + ": " + msg;
        break;
      }
    }
    return Fail(Code::kInvalidArgument, msg);
  }
  MountPlan plan;
  VolumeId id;
  id.hub = hub.value();
  id.mode = parsed->mode;
  id.on_delete = OnDelete::kRetain;  // spokectl never deletes data on the hub
  id.path = "";
  plan.volume_id = id.Encode();
  // The full context (defaults made explicit), so status shows what the volume runs with.
  plan.volume_context = parsed->ToMap();
  plan.read_only = cmd.read_only || parsed->read_only();
  return plan;
}

std::string AbsoluteDir(const std::string& dir) {
  std::filesystem::path p(dir);
  std::error_code ec;
  if (p.is_relative()) p = std::filesystem::current_path(ec) / p;
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace spoke::cli
