#include "cache-agent/cli/spokectl_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string_view>

namespace spoke::cli {
namespace {

Error Usage(std::string why) { return Error(Code::kInvalidArgument, std::move(why)); }

}  // namespace

std::string Usage() {
  return "usage: spokectl [--socket PATH] COMMAND ...\n"
         "\n"
         "  mount NFS-URL DIR [--mode dataset|scratch] [--consistency immutable|ttl|strict]\n"
         "        [--prefetch off|readahead|auto] [--ttl SECONDS] [--hub-timeout SECONDS]\n"
         "        [--write-mode writeback|unstable|sync] [--read-only] [--allow-root]\n"
         "      NFS-URL: nfs://server/export/path?nfsport=N&mountport=M (NFSv3), or\n"
         "               nfs://server/export/path?version=4.1[&nfsport=N] (NFSv4.1: EFS)\n"
         "  unmount DIR\n"
         "  status                      mounts and hub reachability\n"
         "  stats [DIR | --volume ID]   cache, hub and prefetch figures\n"
         "  warmup DIR [PREFIX]         fetch everything (under PREFIX) into the cache\n"
         "  warmup --volume ID [PREFIX] the same for a volume named by its id (as in stats)\n"
         "        [--json]              progress as one JSON object per line\n"
         "        [--rate BYTES/s]      fetch at most this fast (50Mi, 200M; not readers)\n"
         "        [--verify]            then check what is cached (checksums, the hub's\n"
         "                              file versions) and fetch again what is bad\n"
         "  evict DIR [PREFIX]          drop cached blocks (under PREFIX)\n"
         "  hint DIR FILE|-             upcoming paths, one per line, in read order\n"
         "      PREFIX: a path in the volume (train, ./train/, or DIR/train); . or / is all of it\n"
         "  version\n"
         "\n"
         "  --socket PATH   the agent's socket (default " +
         std::string(kDefaultSocket) + ")\n";
}

namespace {

struct MountFlag {
  const char* flag;
  const char* key;  // volume-context key
};
constexpr MountFlag kMountFlags[] = {
    {"--mode", "mode"},      {"--consistency", "consistency"},       {"--prefetch", "prefetch"},
    {"--ttl", "ttlSeconds"}, {"--hub-timeout", "hubTimeoutSeconds"}, {"--write-mode", "writeMode"}};

struct Verbs {
  CLI::App* app;
  Verb verb;
  const char* positionals;  // what the usage error says is expected
  size_t min_args;
  size_t max_args;
};

// Flags that exist on some command: given to another one, the error names the command.
bool IsKnownFlag(std::string_view flag) {
  if (flag == "--volume" || flag == "--read-only" || flag == "--allow-root" || flag == "--json" ||
      flag == "--rate" || flag == "--verify")
    return true;
  for (const auto& f : kMountFlags) {
    if (flag == f.flag) return true;
  }
  return false;
}

// Help and version win wherever they appear, as in most tools; the usage text is ours.
std::optional<Command> HelpOrVersion(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") return Command{};
    if (a == "--version") {
      Command cmd;
      cmd.verb = Verb::kVersion;
      return cmd;
    }
  }
  return std::nullopt;
}

// spokectl's grammar in CLI11, and the variables its options fill besides those of `cmd`.
struct Grammar {
  explicit Grammar(Command& cmd);

  CLI::App app{"spokectl: the spoke-cache-agent client", "spokectl"};
  std::vector<std::string> positional;
  std::string mount_values[std::size(kMountFlags)];
  std::vector<CLI::Option*> mount_opts;
  // Root callers reach the hub as root (volume option allowRoot), not as hubUid/hubGid.
  bool allow_root = false;
  std::optional<std::string> rate;  // warmup --rate, parsed by ParseByteRate
  std::vector<Verbs> verbs;
};

Grammar::Grammar(Command& cmd) {
  app.set_help_flag();  // handled by HelpOrVersion
  app.allow_extras();   // unknown words and flags are reported by ChosenVerb, in our words
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--socket", cmd.socket);
  auto verb = [&](const char* name, Verb v, const char* positionals, size_t min, size_t max) {
    CLI::App* sub = app.add_subcommand(name);
    sub->set_help_flag();
    sub->allow_extras();
    sub->fallthrough();  // --socket after the command too
    if (max > 0) sub->add_option("args", positional);
    return Verbs{sub, v, positionals, min, max};
  };
  verbs = {
      verb("mount", Verb::kMount, "NFS-URL DIR", 2, 2),
      verb("unmount", Verb::kUnmount, "DIR", 1, 1),
      verb("status", Verb::kStatus, "no arguments", 0, 0),
      verb("stats", Verb::kStats, "[DIR | --volume ID]", 0, 1),
      verb("warmup", Verb::kWarmup, "DIR [PREFIX] or --volume ID [PREFIX]", 0, 2),
      verb("evict", Verb::kEvict, "DIR [PREFIX]", 1, 2),
      verb("hint", Verb::kHint, "DIR FILE|-", 2, 2),
      verb("version", Verb::kVersion, "no arguments", 0, 0),
      verb("help", Verb::kHelp, "no arguments", 0, 0),
  };
  verbs[1].app->alias("umount");
  CLI::App* mount = verbs[0].app;
  for (size_t i = 0; i < std::size(kMountFlags); ++i) {
    mount_opts.push_back(mount->add_option(kMountFlags[i].flag, mount_values[i]));
  }
  mount->add_flag("--read-only", cmd.read_only);
  mount->add_flag("--allow-root", allow_root);
  verbs[3].app->add_option("--volume", cmd.volume_id);
  // A pod that mounts a PVC sees the volume at its own path, not at the agent's target: it
  // names the volume by its id (the PV's volumeHandle) instead.
  verbs[4].app->add_option("--volume", cmd.volume_id);
  verbs[4].app->add_flag("--json", cmd.json);
  verbs[4].app->add_option("--rate", rate);
  verbs[4].app->add_flag("--verify", cmd.verify);
}

// CLI11's parse, its exceptions turned into usage errors.
Status ParseWithCli11(CLI::App& app, const std::vector<std::string>& args) {
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--socket: 1 required TEXT missing": an option given without its value.
    std::string what = e.what();
    if (what.starts_with("--"))
      return std::unexpected(Usage(what.substr(0, what.find(':')) + " needs a value"));
    return std::unexpected(Usage(what));
  } catch (const CLI::ParseError& e) {
    return std::unexpected(Usage(e.what()));
  }
  return Ok();
}

// The command given; a usage error for a missing or unknown command, a flag of another
// command, or words CLI11 left unparsed.
Result<const Verbs*> ChosenVerb(Grammar& g) {
  const Verbs* chosen = nullptr;
  for (const auto& v : g.verbs) {
    if (v.app->parsed()) chosen = &v;
  }
  for (const std::string& extra : g.app.remaining(true)) {
    if (extra.size() > 1 && extra.front() == '-') {
      std::string flag = extra.substr(0, extra.find('='));
      if (chosen && IsKnownFlag(flag)) {
        return std::unexpected(Usage(flag + " is not an option of " + chosen->app->get_name()));
      }
      return std::unexpected(Usage("unknown flag '" + extra + "'"));
    }
    if (!chosen) return std::unexpected(Usage("unknown command '" + extra + "'"));
    // Only commands without arguments leave words unparsed.
    return std::unexpected(Usage(chosen->app->get_name() + ": expected " + chosen->positionals));
  }
  if (!chosen) return std::unexpected(Usage("no command given"));
  return chosen;
}

// The mount flags given, as volume-context keys.
void CopyMountOptions(const Grammar& g, Command& cmd) {
  for (size_t i = 0; i < g.mount_opts.size(); ++i) {
    if (g.mount_opts[i]->count() > 0) cmd.mount_options[kMountFlags[i].key] = g.mount_values[i];
  }
  if (g.allow_root) cmd.mount_options[std::string(kParamAllowRoot)] = "true";
}

// warmup --volume ID [PREFIX]: PREFIX is a path in the volume ("/" is its root).
Status AssignWarmupByVolume(const std::vector<std::string>& positional, Command& cmd) {
  if (positional.size() > 1) {
    return std::unexpected(Usage("warmup: with --volume, expected at most PREFIX"));
  }
  if (positional.empty()) return Ok();
  auto prefix = PrefixInVolume("/", positional[0]);
  if (!prefix) return std::unexpected(Usage("warmup: " + prefix.error().message()));
  cmd.prefix = *prefix;
  return Ok();
}

// Puts the command's positional arguments (their number already checked) into `cmd`.
Status AssignPositionals(const std::vector<std::string>& positional, const std::string& name,
                         Command& cmd) {
  switch (cmd.verb) {
    case Verb::kMount:
      cmd.nfs_url = positional[0];
      cmd.dir = positional[1];
      break;
    case Verb::kHint:
      cmd.dir = positional[0];
      cmd.hint_file = positional[1];
      break;
    case Verb::kStats:
      if (!positional.empty()) cmd.dir = positional[0];
      if (!cmd.dir.empty() && !cmd.volume_id.empty()) {
        return std::unexpected(Usage("stats: give DIR or --volume ID, not both"));
      }
      break;
    case Verb::kUnmount:
      cmd.dir = positional[0];
      break;
    case Verb::kWarmup:
      if (!cmd.volume_id.empty()) return AssignWarmupByVolume(positional, cmd);
      if (positional.empty()) {
        return std::unexpected(Usage("warmup: expected DIR [PREFIX] or --volume ID [PREFIX]"));
      }
      [[fallthrough]];
    case Verb::kEvict:
      cmd.dir = positional[0];
      if (positional.size() > 1) {
        auto prefix = PrefixInVolume(cmd.dir, positional[1]);
        if (!prefix) return std::unexpected(Usage(name + ": " + prefix.error().message()));
        cmd.prefix = *prefix;
      }
      break;
    case Verb::kStatus:
    case Verb::kVersion:
    case Verb::kHelp:
      break;
  }
  return Ok();
}

}  // namespace

Result<Command> ParseArgs(const std::vector<std::string>& args) {
  if (auto cmd = HelpOrVersion(args)) return *cmd;
  if (args.empty()) return std::unexpected(Usage("no command given"));

  Command cmd;
  Grammar g(cmd);
  SPOKE_RETURN_IF_ERROR(ParseWithCli11(g.app, args));
  SPOKE_TRY(const Verbs* chosen, ChosenVerb(g));
  const std::string name = chosen->app->get_name();
  if (cmd.socket.empty() || cmd.socket.front() != '/') {
    return std::unexpected(Usage("--socket: must be an absolute path"));
  }
  if (g.positional.size() < chosen->min_args || g.positional.size() > chosen->max_args) {
    return std::unexpected(Usage(name + ": expected " + chosen->positionals));
  }
  cmd.verb = chosen->verb;
  CopyMountOptions(g, cmd);
  if (g.rate) {
    SPOKE_TRY(cmd.rate_bytes_per_second, ParseByteRate(*g.rate));
  }
  SPOKE_RETURN_IF_ERROR(AssignPositionals(g.positional, name, cmd));
  return cmd;
}

Result<uint64_t> ParseByteRate(std::string_view text) {
  auto bad = [&](std::string why) {
    return Fail(Code::kInvalidArgument,
                "--rate: '" + std::string(text) + "' " + why +
                    " (bytes per second: a whole number with an optional Ki, Mi, Gi, Ti, k, M, G "
                    "or T, e.g. 50Mi)");
  };
  std::string_view s = text;
  if (s.ends_with("/s")) s.remove_suffix(2);
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) return bad("is not a rate");
  const std::string_view suffix = s.substr(digits);
  static constexpr std::pair<std::string_view, uint64_t> kSuffixes[] = {
      {"", 1},
      {"Ki", 1ull << 10},
      {"Mi", 1ull << 20},
      {"Gi", 1ull << 30},
      {"Ti", 1ull << 40},
      {"k", 1000},
      {"M", 1000ull * 1000},
      {"G", 1000ull * 1000 * 1000},
      {"T", 1000ull * 1000 * 1000 * 1000}};
  uint64_t unit = 0;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) unit = factor;
  }
  if (unit == 0) return bad("has an unknown unit");
  constexpr uint64_t kMax = 1ull << 40;
  if (digits > 13) return bad("is too large (at most 1Ti)");
  uint64_t n = 0;
  for (size_t i = 0; i < digits; ++i) n = n * 10 + static_cast<uint64_t>(s[i] - '0');
  if (n == 0) return bad("is zero (leave --rate out for no limit)");
  if (n > kMax / unit) return bad("is too large (at most 1Ti)");
  return n * unit;
}

Result<MountPlan> PlanMount(const Command& cmd) {
  SPOKE_TRY(auto hub, ParseNfsUrl(cmd.nfs_url));
  StringMap ctx = cmd.mount_options;
  ctx[std::string(kParamServer)] = hub.server;
  ctx[std::string(kParamShare)] = hub.share;
  ctx[std::string(kParamNfsPort)] = std::to_string(hub.nfs_port);
  ctx[std::string(kParamMountPort)] = std::to_string(hub.mount_port);
  if (hub.nfs_version != NfsVersion::kV3) {
    ctx[std::string(kParamNfsVersion)] = std::string(ToString(hub.nfs_version));
  }
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
                             {"--hub-timeout", "hubTimeoutSeconds"},
                             {"--write-mode", "writeMode"}}) {
      if (msg.find(key) != std::string::npos) {
        msg = std::string(flag) + ": " + msg;
        break;
      }
    }
    return Fail(Code::kInvalidArgument, msg);
  }
  MountPlan plan;
  VolumeId id;
  id.hub = hub;
  id.mode = parsed->mode;
  id.on_delete = OnDelete::kRetain;  // spokectl never deletes data on the hub
  id.path = "";
  plan.volume_id = id.Encode();
  // The full context (defaults made explicit), so status shows what the volume runs with.
  plan.volume_context = parsed->ToMap();
  plan.read_only = cmd.read_only || parsed->read_only();
  return plan;
}

Result<std::string> PrefixInVolume(const std::string& dir, const std::string& prefix) {
  // Leading slashes go before the checks: "/" and "//" are the volume root too.
  const size_t first = std::min(prefix.find_first_not_of('/'), prefix.size());
  SPOKE_TRY(std::string path,
            NormalizePathInVolume(std::string_view(prefix).substr(first), "PREFIX"));
  if (prefix.empty() || prefix.front() != '/' || path.empty()) return path;
  // An absolute PREFIX is a path on this host: it must be DIR or under it.
  const std::string root = AbsoluteDir(dir);
  const std::string abs = "/" + path;
  if (abs == root) return std::string();
  if (root == "/") return path;
  if (abs.starts_with(root + "/")) return abs.substr(root.size() + 1);
  return Fail(
      Code::kInvalidArgument,
      "PREFIX: '" + prefix + "' is not under DIR " + root +
          "; give a path in the volume (e.g. train/, or . or / for all of it) or one under " +
          root);
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
