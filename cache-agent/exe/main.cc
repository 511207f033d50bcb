// spoke-cache-agent: owns the node's FUSE mounts, the block cache and the WAN client pools;
// serves the agent API on a root-only unix socket and /metrics + /healthz over HTTP.
//
//   spoke-cache-agent --config /etc/spoke/agent.yaml [--log-level debug|info|warn|error]
//
// SIGTERM/SIGINT: stop HTTP, hand every FUSE connection over (stop reading, answer what was
// read; no unmount: the fd keeper holds the connections and the next agent takes them over,
// docs/agent-restarts.md), close the cache (persist its index). Without a keeper the sessions
// end (lazy unmount). mounts.json is kept, so the next start serves the same volumes again.
#include <malloc.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cache-agent/agent/agent_config.h"
#include "cache-agent/agent/agent_service.h"
#include "cache-agent/agent/host_mounts.h"
#include "cache-agent/agent/http_server.h"
#include "cache-agent/agent/mount_manager.h"
#include "cache-agent/exe/keeper_launch.h"
#include "cache-agent/exe/mint_peer_cert.h"
#include "cache-agent/exe/wiring.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/resident_watch.h"
#include "common/version.h"

namespace {

constexpr char kUsage[] =
    "usage: spoke-cache-agent --config FILE [--log-level debug|info|warn|error]\n"
    "       spoke-cache-agent --version\n"
    "       spoke-cache-agent mint-peer-cert --help   (the chart's init container)\n";

using spoke::agent::AgentConfig;

struct CommandLine {
  std::string config_path = "/etc/spoke/agent.yaml";
  std::string log_level;
};

// Fills `out` from argv; returns an exit code when the process should end now (--version,
// --help, a bad argument).
std::optional<int> ParseCommandLine(int argc, char** argv, CommandLine& out) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string_view flag) -> std::string {
      if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') {
        return a.substr(flag.size() + 1);
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n%s", std::string(flag).c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--config" || a.starts_with("--config=")) {
      out.config_path = value("--config");
    } else if (a == "--log-level" || a.starts_with("--log-level=")) {
      out.log_level = value("--log-level");
    } else if (a == "--version") {
      std::printf("spoke-cache-agent %s\n", std::string(spoke::Version()).c_str());
      return 0;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  return std::nullopt;
}

// The config file with --log-level applied; reports what is wrong on stderr.
std::optional<AgentConfig> LoadConfig(const CommandLine& cl) {
  auto config = spoke::agent::LoadAgentConfig(cl.config_path);
  if (!config) {
    std::fprintf(stderr, "spoke-cache-agent: %s\n", config.error().message().c_str());
    return std::nullopt;
  }
  if (!cl.log_level.empty()) {
    auto level = spoke::log::ParseLevel(cl.log_level);
    if (!level) {
      std::fprintf(stderr, "--log-level: must be debug | info | warn | error, got '%s'\n",
                   cl.log_level.c_str());
      return std::nullopt;
    }
    config->log_level = *level;
  }
  return std::move(*config);
}

bool CreateAgentDirectories(const AgentConfig& config) {
  std::error_code ec;
  for (const std::string& dir : {config.state_dir, config.cache_dir}) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      spoke::log::Error("cannot create directory", {{"dir", dir}, {"error", ec.message()}});
      return false;
    }
  }
  ::chmod(config.state_dir.c_str(), 0700);
  return true;
}

void StartFuseKeeperIfAsked(const AgentConfig& config) {
  if (config.fuse_keeper_socket.empty() || !config.fuse_keeper_start) return;
  if (auto s = spoke::agent::EnsureFuseKeeper(config.fuse_keeper_socket,
                                              config.state_dir + "/fuse-keeper.log",
                                              std::chrono::seconds(5));
      !s) {
    spoke::log::Warn("no fd keeper: mounts will not outlive this agent",
                     {{"error", s.error().message()}});
  }
}

bool CorruptServedBlocksFault() {
#ifdef SPOKE_TEST_FAULTS
  // Test-only fault (tests/cache-agent/peer): this agent corrupts the blocks it serves peers.
  // Release builds do not have it (SPOKE_TEST_FAULTS).
  const char* fault = std::getenv("SPOKE_TEST_FAULT_PEER_CORRUPT_SERVED_BLOCKS");
  return fault != nullptr && std::string(fault) == "1";
#else
  return false;
#endif
}

// The data plane under the mount manager. Members are destroyed in reverse order: the
// mounter before the peers, the cache last.
struct DataPlane {
  std::unique_ptr<spoke::agent::BlockCache> cache;
  std::unique_ptr<spoke::MemoryBudget> memory;
  std::unique_ptr<spoke::ResidentWatch> resident;
  std::unique_ptr<spoke::agent::PeerNode> peers;
  std::unique_ptr<spoke::agent::VolumeMounter> mounter;
};

// Opens the cache, the memory budget, the peer node and the FUSE mounter; logs what failed.
bool StartDataPlane(const AgentConfig& config, spoke::metrics::Registry& registry, DataPlane& out) {
  using namespace spoke;
  using namespace spoke::agent;
  auto cache = OpenAgentCache(config, registry);
  if (!cache) {
    log::Error("cannot open the block cache", {{"error", cache.error().message()}});
    return false;
  }
  out.cache = std::move(*cache);
  auto memory = MakeMemoryBudget(config, registry);
  if (!memory) {
    log::Error("invalid memory budget", {{"error", memory.error().message()}});
    return false;
  }
  out.memory = std::move(*memory);
  // From here on, what the agent holds over this point counts against the budget's levels.
  out.resident = std::make_unique<ResidentWatch>(*out.memory, std::chrono::milliseconds(10));
  log::Info("memory budget", {{"bytes", out.memory->total()},
                              {"background_limit", out.memory->background_limit()},
                              {"resident_at_start", out.resident->start_bytes()}});
  auto peers = StartAgentPeers(config, registry, CorruptServedBlocksFault());
  if (!peers) {
    log::Error("cannot start the peer node", {{"error", peers.error().message()}});
    return false;
  }
  out.peers = std::move(*peers);
  auto mounter = MakeAgentMounter(config, *out.cache, registry, *out.memory, out.peers.get());
  if (!mounter) {
    log::Error("cannot create the FUSE mounter", {{"error", mounter.error().message()}});
    return false;
  }
  out.mounter = std::move(*mounter);
  return true;
}

spoke::agent::MountManager::Options MountManagerOptions(const AgentConfig& config) {
  spoke::agent::MountManager::Options mo;
  mo.state_file = config.state_dir + "/mounts.json";
  mo.mount_roots = config.mount_roots;
  mo.keeper_socket = config.fuse_keeper_socket;
  mo.keeper_handover_wait =
      std::chrono::milliseconds(static_cast<int64_t>(config.keeper_wait_seconds * 1000));
  return mo;
}

// On a signal: stop HTTP and the peers, then hand the mounts over (or end them without a
// keeper).
void StopServing(const AgentConfig& config, spoke::agent::HttpServer& http,
                 spoke::agent::PeerNode* peers, spoke::agent::MountManager& manager) {
  http.Stop();
  if (peers) peers->Shutdown();
  // An upgrade or restart must not end the mounts: only NodeUnstage / spokectl unmount do.
  if (!config.fuse_keeper_socket.empty()) {
    const auto drain =
        std::chrono::milliseconds(static_cast<int64_t>(config.handover_timeout_seconds * 1000));
    manager.HandOver(drain);
  } else {
    manager.Shutdown();
  }
}

// Restores the mounts and serves the agent API and /metrics until a signal, then closes the
// data plane; returns the exit code.
int ServeAgent(const AgentConfig& config, spoke::metrics::Registry& registry, DataPlane& plane) {
  using namespace spoke;
  using namespace spoke::agent;
  LinuxHostMounts host;
  auto manager =
      std::make_unique<MountManager>(*plane.mounter, host, registry, MountManagerOptions(config));
  if (auto s = manager->Start(); !s) {
    log::Error("cannot restore mounts", {{"error", s.error().message()}});
  }

  AgentService::Options so;
  so.cache_capacity_bytes = plane.cache->Stats().capacity_bytes;
  so.block_size = plane.cache->block_size();
  AgentService service(*manager, so);

  HttpServer http(registry, *manager);
  if (!config.metrics_address.empty()) {
    if (auto s = http.Start(config.MetricsHost(), config.MetricsPort()); !s) {
      log::Error("cannot serve metrics", {{"error", s.error().message()}});
      manager->Shutdown();
      return 1;
    }
  }

  GrpcServerOptions go;
  go.endpoint = "unix://" + config.socket;
  go.socket_mode = 0600;  // root only: the API mounts file systems
  auto served = ServeUntilSignal(go, {&service},
                                 [&] { StopServing(config, http, plane.peers.get(), *manager); });
  int rc = 0;
  if (!served) {
    log::Error("cannot serve the agent API", {{"error", served.error().message()}});
    http.Stop();
    manager->Shutdown();
    rc = 1;
  }
  manager.reset();
  plane.mounter.reset();
  plane.peers.reset();  // after every volume (each leaves the peer node when it closes)
  if (auto s = plane.cache->Close(); !s) {
    log::Error("cannot persist the cache index (the next start rebuilds it by scanning)",
               {{"error", s.error().message()}});
  }
  log::Info("stopped");
  return rc;
}

int Run(int argc, char** argv) {
  using namespace spoke;
  CommandLine cl;
  if (auto exit_code = ParseCommandLine(argc, argv, cl)) return *exit_code;
  // Before any thread exists, so that all of them inherit the blocked SIGTERM/SIGINT.
  BlockShutdownSignals();

  auto config = LoadConfig(cl);
  if (!config) return 2;
  log::SetLevel(config->log_level);
  log::Info("starting spoke-cache-agent", {{"version", std::string(Version())},
                                           {"config", cl.config_path},
                                           {"socket", config->socket},
                                           {"cache_dir", config->cache_dir},
                                           {"cache_bytes", config->cache_size_bytes}});
  if (!CreateAgentDirectories(*config)) return 1;
  StartFuseKeeperIfAsked(*config);

  metrics::Registry registry;
  DataPlane plane;
  if (!StartDataPlane(*config, registry, plane)) return 1;
  return ServeAgent(*config, registry, plane);
}

}  // namespace

int main(int argc, char** argv) {
  // Blocks (up to 1 MiB), hub replies (libnfs reads each into a buffer of its own) and FUSE
  // write buffers are allocated and freed at WAN speed. Kept in glibc's heap once freed, they
  // are reused in place; above the mmap threshold each was an mmap of its own, 256 zero-filled
  // page faults and an munmap: half the agent's CPU in a shard fill (bench/RESULTS.md, "Freed
  // buffers reused in place"). glibc's own trim of the heap's top is off too: the resident
  // watch counts what the heaps keep against the memory budget and gives it back when the
  // agent holds more than it accounts (common/resident_watch.h).
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  // Two heaps for every thread instead of glibc's eight per core: each heap keeps the memory
  // freed into it, so with dozens of FUSE workers and hub loops more heaps meant an RSS well
  // over the budget (bench/RESULTS.md, "Agent memory"). MALLOC_ARENA_MAX still decides.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
  spoke::DisableAbseilDeadlockDetection();
  if (argc > 1 && std::string_view(argv[1]) == "mint-peer-cert") {
    return spoke::agent::RunMintPeerCert(argc - 1, argv + 1);
  }
  return Run(argc, argv);
}
