#include "cache-agent/agent/agent_config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cache-agent/agent/mount_manager.h"
#include "cache-agent/cache/block_cache.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "common/config.h"

namespace spoke::agent {

const std::vector<std::string>& EvictionPolicyNames() {
  static const std::vector<std::string> names = {"lru", "nothrash"};
  return names;
}
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

constexpr uint64_t kMinCacheBlocks = 64;

std::vector<std::string> ParseMountRoots(ConfigReader& r) {
  std::vector<std::string> roots = r.StringList("mountRoots", AgentConfig().mount_roots);
  if (roots.empty()) r.Reject("mountRoots", "must name at least one directory");
  for (const std::string& root : roots) {
    if (root.empty() || root.front() != '/' || root == "/" || NormalizeTarget(root) != root) {
      r.Reject("mountRoots",
               "each must be an absolute normalised directory other than /, got '" + root + "'");
    }
  }
  return roots;
}

// Keeps ParseHostPort's "why" (the reader prefixes the file and key).
void CheckHostPort(ConfigReader& r, std::string_view key, const std::string& value) {
  if (auto s = ParseHostPort(value, key, nullptr, nullptr); !s) {
    std::string why = s.error().message();
    r.Reject(key, why.substr(why.find(": ") + 2));
  }
}

void ParsePeerConfig(ConfigReader& r, PeerConfig* p) {
  p->listen_address = r.String("peerListenAddress", p->listen_address);
  if (auto expanded = ExpandMetricsAddress(
          p->listen_address, [](const char* n) -> const char* { return std::getenv(n); });
      !expanded) {
    r.Reject("peerListenAddress", expanded.error().message());
  } else {
    p->listen_address = *expanded;
  }
  if (!p->listen_address.empty()) CheckHostPort(r, "peerListenAddress", p->listen_address);
  p->peers = r.StringList("peers", p->peers);
  for (const auto& peer : p->peers) CheckHostPort(r, "peers", peer);
  p->service = r.String("peerService", p->service);
  if (!p->service.empty()) CheckHostPort(r, "peerService", p->service);
  p->token_file = r.String("peerTokenFile", p->token_file);
  p->timeout_ms = static_cast<int>(r.Int("peerTimeoutMs", p->timeout_ms, 10, 60000));
  p->keep_local_copy = r.Bool("peerKeepLocalCopy", p->keep_local_copy);
  p->tls_cert_file = r.String("peerTlsCertFile", p->tls_cert_file);
  p->tls_key_file = r.String("peerTlsKeyFile", p->tls_key_file);
  p->tls_ca_file = r.String("peerTlsCaFile", p->tls_ca_file);
  p->tls_server_name = r.String("peerTlsServerName", p->tls_server_name);
  p->tls_identity = r.String("peerTlsIdentity", p->tls_identity);
  if (p->tls_identity != "name" && p->tls_identity != "address") {
    r.Reject("peerTlsIdentity",
             "want name (one certificate naming peerTlsServerName, shared) or "
             "address (a certificate per agent naming its address), got '" +
                 p->tls_identity + "'");
  }
  p->plaintext = r.Bool("peerPlaintext", p->plaintext);
  if (p->enabled()) {
    if (p->peers.empty() && p->service.empty()) {
      r.Reject("peerListenAddress",
               "is set ('" + p->listen_address +
                   "'), so peers are on, but neither peers (a list of host:port) nor peerService "
                   "(name.namespace.svc:port) names the other agents");
    }
    if (p->token_file.empty() || p->token_file.front() != '/') {
      r.Reject("peerTokenFile", "must be an absolute path when peerListenAddress is set, got '" +
                                    p->token_file + "'");
    }
    const bool any_tls =
        !p->tls_cert_file.empty() || !p->tls_key_file.empty() || !p->tls_ca_file.empty();
    if (p->plaintext && any_tls) {
      r.Reject("peerPlaintext", "is true, but peerTls* files are set too: choose one");
    } else if (!p->plaintext) {
      for (auto [key, value] : {std::pair{"peerTlsCertFile", &p->tls_cert_file},
                                std::pair{"peerTlsKeyFile", &p->tls_key_file},
                                std::pair{"peerTlsCaFile", &p->tls_ca_file}}) {
        if (value->empty() || value->front() != '/') {
          r.Reject(key,
                   "must be an absolute path when peerListenAddress is set (mutual TLS "
                   "between agents; peerPlaintext: true is for tests only), got '" +
                       *value + "'");
        }
      }
      if (p->tls_identity == "name" && p->tls_server_name.empty())
        r.Reject("peerTlsServerName", "must not be empty when peerTlsIdentity is name");
    }
  } else if (!p->peers.empty() || !p->service.empty()) {
    r.Reject(p->peers.empty() ? "peerService" : "peers",
             "needs peerListenAddress (host:port this agent listens on as a peer, e.g. "
             "${POD_IP}:7311) to use peers");
  }
}

}  // namespace

Result<std::string> ExpandMetricsAddress(std::string_view text,
                                         const char* (*getenv_fn)(const char*)) {
  constexpr std::string_view kVar = "${POD_IP}";
  size_t pos = text.find(kVar);
  if (pos == std::string_view::npos) return std::string(text);
  const char* ip = getenv_fn("POD_IP");
  if (ip == nullptr || *ip == '\0') {
    return Fail(Code::kInvalidArgument, "uses ${POD_IP} but the environment has no POD_IP");
  }
  std::string host = ip;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";  // IPv6 pod
  return std::string(text.substr(0, pos)) + host + std::string(text.substr(pos + kVar.size()));
}

Status ParseHostPort(std::string_view text, std::string_view field, std::string* host, int* port) {
  auto bad = [&](std::string why) {
    return Fail(Code::kInvalidArgument, std::string(field) + ": " + why);
  };
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return bad("expected host:port (e.g. 127.0.0.1:9810), got '" + std::string(text) + "'");
  }
  std::string_view h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']' || h.size() < 3)
      return bad("bad IPv6 address in '" + std::string(text) + "'");
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string_view::npos) {
    return bad("write an IPv6 address as [addr]:port, got '" + std::string(text) + "'");
  }
  auto p = ParseInt(text.substr(colon + 1), 1, 65535);
  if (!p) return bad("port: " + p.error().message());
  if (host) *host = std::string(h);
  if (port) *port = static_cast<int>(*p);
  return Ok();
}

std::string AgentConfig::MetricsHost() const {
  std::string host;
  (void)ParseHostPort(metrics_address, "metricsAddress", &host, nullptr);
  return host;
}

int AgentConfig::MetricsPort() const {
  int port = 0;
  (void)ParseHostPort(metrics_address, "metricsAddress", nullptr, &port);
  return port;
}

uint64_t DefaultReadAheadMaxBytes(uint64_t cache_size_bytes, uint32_t block_size_bytes) {
  const uint64_t block = std::max<uint64_t>(block_size_bytes, 1);
  const uint64_t half = cache_size_bytes / 2 / block * block;
  return std::max<uint64_t>(std::min(kDefaultReadAheadMaxBytes, half), block);
}

uint64_t DefaultPrefetchBytesMax(uint64_t cache_size_bytes, uint64_t read_ahead_max_bytes) {
  return std::min(kDefaultPrefetchBytesMax, std::max(cache_size_bytes / 4, read_ahead_max_bytes));
}

namespace {

std::string AbsolutePath(ConfigReader& r, std::string_view key, std::string def) {
  std::string v = r.String(key, std::move(def));
  if (v.empty() || v.front() != '/') {
    r.Reject(key, "must be an absolute path, got '" + v + "'");
  }
  return v;
}

void CheckSocketPathLength(ConfigReader& r, std::string_view key, const std::string& path) {
  if (path.size() >= 108) {
    r.Reject(key, "must be at most 107 characters (a unix socket path), got " +
                      std::to_string(path.size()) + ": '" + path + "'");
  }
}

void ParseDirectories(ConfigReader& r, AgentConfig& c) {
  c.socket = AbsolutePath(r, "socket", c.socket);
  CheckSocketPathLength(r, "socket", c.socket);
  c.cache_dir = AbsolutePath(r, "cacheDir", c.cache_dir);
  c.state_dir = AbsolutePath(r, "stateDir", c.state_dir);
}

void ParseCacheSize(ConfigReader& r, AgentConfig& c) {
  // The cache's lower bound; the upper one is libnfs' largest NFSv3 read (one request/block).
  c.block_size_bytes = static_cast<uint32_t>(
      r.Size("blockSizeBytes", c.block_size_bytes, BlockCache::Config::kMinBlockSize, 1u << 20));
  if (!IsPowerOfTwo(c.block_size_bytes)) {
    r.Reject("blockSizeBytes",
             "must be a power of two between 64KiB and 1MiB (64KiB, 128KiB, 256KiB, 512KiB, "
             "1MiB), got " +
                 FormatSize(c.block_size_bytes));
  }
  c.cache_size_bytes = r.Size("cacheSizeBytes", c.cache_size_bytes, 1, UINT64_MAX);
  // Fewer than 64 blocks cannot hold the read-ahead of even one reader.
  if (c.cache_size_bytes < kMinCacheBlocks * c.block_size_bytes) {
    r.Reject("cacheSizeBytes", "must hold at least " + std::to_string(kMinCacheBlocks) +
                                   " blocks of blockSizeBytes, " +
                                   FormatSize(kMinCacheBlocks * c.block_size_bytes) + "; got " +
                                   FormatSize(c.cache_size_bytes));
  }
}

void ParseMetricsAddress(ConfigReader& r, AgentConfig& c) {
  c.metrics_address = r.String("metricsAddress", c.metrics_address);
  if (auto expanded = ExpandMetricsAddress(
          c.metrics_address, [](const char* n) -> const char* { return std::getenv(n); });
      !expanded) {
    r.Reject("metricsAddress", expanded.error().message());
  } else {
    c.metrics_address = *expanded;
  }
  if (!c.metrics_address.empty()) CheckHostPort(r, "metricsAddress", c.metrics_address);
}

void ParseHubPool(ConfigReader& r, HubPoolConfig& hub_config) {
  ConfigReader hub = r.Child("hub");
  hub_config.connections = static_cast<int>(hub.Int("connections", hub_config.connections, 1, 64));
  hub_config.inflight_per_connection = static_cast<int>(
      hub.Int("inflightPerConnection", hub_config.inflight_per_connection, 1, 1024));
  hub_config.request_timeout_seconds =
      hub.Seconds("requestTimeoutSeconds", hub_config.request_timeout_seconds, 1, 600);
  hub_config.retries = static_cast<int>(
      hub.Int("retries", hub_config.retries, 0, LibnfsRemote::Config::kMaxRetries));
  (void)hub.Finish();
}

void ParseReadAhead(ConfigReader& r, AgentConfig& c) {
  // Unset, the window follows the cache (at most half of it), so that a small cache starts;
  // a value set is checked against the same bound and refused when it breaks it.
  c.read_ahead_max_bytes =
      r.Size("readAheadMaxBytes", DefaultReadAheadMaxBytes(c.cache_size_bytes, c.block_size_bytes),
             0, 16ull << 30);
  // Read-ahead is switched off per volume (StorageClass `prefetch: off`); here it is only
  // bounded, and the window needs room for one block.
  const uint64_t read_ahead_cap = c.cache_size_bytes / 2;
  if (c.read_ahead_max_bytes < c.block_size_bytes) {
    r.Reject("readAheadMaxBytes", "must be at least one block of blockSizeBytes, " +
                                      FormatSize(c.block_size_bytes) + "; got " +
                                      FormatSize(c.read_ahead_max_bytes));
  } else if (c.read_ahead_max_bytes > read_ahead_cap) {
    r.Reject("readAheadMaxBytes", "must be at most half of cacheSizeBytes, " +
                                      FormatSize(read_ahead_cap) + "; got " +
                                      FormatSize(c.read_ahead_max_bytes) +
                                      "; leave it unset to derive it from the cache size");
  }
  if (r.Has("writeBackBytesPerVolume")) {
    c.write_back_bytes_per_volume = r.Size("writeBackBytesPerVolume", 0, 1ull << 20, 16ull << 30);
  }
  if (r.Has("kernelReadAheadBytes")) {
    c.kernel_read_ahead_bytes = r.Size("kernelReadAheadBytes", 0, 0, 1ull << 30);
    if (*c.kernel_read_ahead_bytes % 4096 != 0) {
      r.Reject("kernelReadAheadBytes",
               "must be a multiple of 4096 (the kernel counts pages), e.g. 4KiB, 128KiB, 16MiB; "
               "got " +
                   FormatSize(*c.kernel_read_ahead_bytes));
    }
  }
}

void ParseFuseKeeper(ConfigReader& r, AgentConfig& c) {
  c.fuse_keeper_socket = r.String("fuseKeeperSocket", c.fuse_keeper_socket);
  if (!c.fuse_keeper_socket.empty() && c.fuse_keeper_socket.front() != '/') {
    r.Reject("fuseKeeperSocket",
             "must be an absolute path or \"\" (no keeper), got '" + c.fuse_keeper_socket + "'");
  }
  CheckSocketPathLength(r, "fuseKeeperSocket", c.fuse_keeper_socket);
  c.fuse_keeper_start = r.Bool("fuseKeeperStart", c.fuse_keeper_start);
  c.handover_timeout_seconds =
      r.Seconds("handoverTimeoutSeconds", c.handover_timeout_seconds, 0, 600);
  c.keeper_wait_seconds = r.Seconds("keeperWaitSeconds", c.keeper_wait_seconds, 0, 600);
}

void ParseMemoryBudget(ConfigReader& r, AgentConfig& c) {
  c.memory_budget_bytes = r.Size("memoryBudgetBytes", c.memory_budget_bytes, 0, UINT64_MAX);
  // Room for a few blocks in flight, queued for the cache and kept for readers.
  if (c.memory_budget_bytes != 0 &&
      c.memory_budget_bytes < kMinMemoryBudgetBlocks * c.block_size_bytes) {
    r.Reject("memoryBudgetBytes", "must be 0 (derive from the memory limit) or at least " +
                                      std::to_string(kMinMemoryBudgetBlocks) +
                                      " blocks of blockSizeBytes, " +
                                      FormatSize(kMinMemoryBudgetBlocks * c.block_size_bytes) +
                                      "; got " + FormatSize(c.memory_budget_bytes));
  }
}

}  // namespace

// The order of the steps is the order of the checks: Finish() reports the first error seen.
Result<AgentConfig> ParseAgentConfig(std::string_view yaml, const std::string& source) {
  SPOKE_TRY(ConfigReader r, ConfigReader::LoadString(yaml, source));
  AgentConfig c;
  ParseDirectories(r, c);
  ParseCacheSize(r, c);
  ParseMetricsAddress(r, c);
  std::string level = r.Enum("logLevel", "info", {"debug", "info", "warn", "error"});
  c.log_level = log::ParseLevel(level).value_or(log::Level::kInfo);
  ParseHubPool(r, c.hub);
  ParseReadAhead(r, c);
  c.eviction_policy = r.Enum("evictionPolicy", c.eviction_policy, EvictionPolicyNames());
  c.mount_roots = ParseMountRoots(r);
  ParseFuseKeeper(r, c);
  ParseMemoryBudget(r, c);
  ParsePeerConfig(r, &c.peer);
  SPOKE_RETURN_IF_ERROR(r.Finish());
  return c;
}

Result<AgentConfig> LoadAgentConfig(const std::string& path) {
  SPOKE_RETURN_IF_ERROR(ConfigReader::LoadFile(path));
  // LoadFile only checks the file exists and parses; re-read as text for one code path.
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return Fail(Code::kNotFound, "cannot open config file " + path);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return ParseAgentConfig(text, path);
}

}  // namespace spoke::agent
