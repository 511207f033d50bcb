// spoke-cache-agent's configuration file (YAML), read and validated once at start-up.
// The keys are the ones the Helm chart writes (charts/spoke: agent.config); an unknown key
// or a bad value is an error naming the field ("hub.connections: must be in 1..64, got 0").
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace spoke::agent {

// The WAN client pool towards the hub (one pool per mounted volume).
struct HubPoolConfig {
  // TCP connections per volume: each has its own libnfs context and event-loop thread.
  int connections = 4;
  // Reads in flight per connection. Large files need few (each is a 1 MiB READ); small files
  // (one short READ after a few LOOKUPs each) need many in flight to fill the link. Prefetch
  // bytes stay bounded by the fetcher's prefetch_bytes_max, not by this.
  int inflight_per_connection = 128;
  // Bound on every hub call; a dead hub gives an error after this, never a hang.
  double request_timeout_seconds = 10;
  // Retries of a failed idempotent hub call (reads, lookups) before the error reaches the
  // reader.
  int retries = 3;
};

// Cache sharing with the other agents of the cluster (keys peers*, docs/peers.md).
struct PeerConfig {
  // "host:port" the peer server listens on ("${POD_IP}:port" in Kubernetes); "" = no peers.
  std::string listen_address;
  std::vector<std::string> peers;  // static members, "host:port" each (self may be listed)
  // A headless Service "name.namespace.svc:port" resolved every few seconds; "" = none.
  std::string service;
  std::string token_file;  // the cluster token (a mounted Secret)
  // Mutual TLS on the peer channel (PEM files): this agent's certificate and key, and the
  // cluster CA. A peer's certificate must name tls_server_name (tls_identity "name": one
  // certificate shared by every agent) or its own address ("address": a certificate per
  // agent, as the chart mints them).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  std::string tls_server_name = "spoke-peer";
  std::string tls_identity = "name";
  bool plaintext = false;  // tests only: no TLS (then no tls_* file may be set)
  int timeout_ms = 2000;   // bound on one ask of a peer; then the hub
  // Store blocks got from peers in the local cache too (the admission policy decides).
  bool keep_local_copy = true;
  bool enabled() const { return !listen_address.empty(); }
};

// The eviction policies `evictionPolicy` accepts. Each has a factory in exe/wiring.cc
// (MakeEvictionPolicy); tests/cache-agent/exe/wiring_test.cc checks that none is missing.
const std::vector<std::string>& EvictionPolicyNames();

// The smallest memoryBudgetBytes, in blocks.
inline constexpr uint64_t kMinMemoryBudgetBlocks = 16;

// readAheadMaxBytes when unset: 64 MiB, or half of the cache when that is less (the bound a
// value set must keep), in whole blocks. Any cache the agent accepts (64 blocks or more)
// starts with no other key set.
inline constexpr uint64_t kDefaultReadAheadMaxBytes = 64ull << 20;
uint64_t DefaultReadAheadMaxBytes(uint64_t cache_size_bytes, uint32_t block_size_bytes);
// The bytes of prefetch a volume may have in flight (not a key): 256 MiB, or a quarter of the
// cache (a volume's share of it for prefetches) when that is less, at least the read-ahead
// window: prefetching more than the cache can keep only evicts it again.
inline constexpr uint64_t kDefaultPrefetchBytesMax = 256ull << 20;
uint64_t DefaultPrefetchBytesMax(uint64_t cache_size_bytes, uint64_t read_ahead_max_bytes);
// fuseKeeperSocket when unset.
inline constexpr char kDefaultFuseKeeperSocket[] = "/run/spoke/fuse-keeper.sock";

struct AgentConfig {
  std::string socket = "/run/spoke/agent.sock";    // agent API, root only (0600)
  std::string cache_dir = "/var/cache/spoke";      // NVMe hostPath in production
  uint64_t cache_size_bytes = 10ull << 30;         // block data quota
  uint32_t block_size_bytes = 1u << 20;            // = NFS rsize: one hub request per block
  std::string metrics_address = "127.0.0.1:9810";  // /metrics and /healthz; "" disables
  std::string state_dir = "/var/lib/spoke";        // mounts.json survives agent restarts
  log::Level log_level = log::Level::kInfo;
  HubPoolConfig hub;
  // Upper bound of the per-file sequential read-ahead window; unset = derived from the cache
  // size (DefaultReadAheadMaxBytes).
  uint64_t read_ahead_max_bytes = kDefaultReadAheadMaxBytes;
  // The kernel's read-ahead window on each FUSE mount (its bdi's read_ahead_kb). The kernel
  // starts FUSE mounts at 128 KiB: a sequential reader then has one or two 1 MiB requests out
  // at a time, each waiting for a cache-disk read; a wider window lets it send more at once,
  // which the agent's workers serve in parallel. Each request out holds a block in the agent,
  // so unset = a 64th of the memory budget, within 128 KiB..16 MiB (16 MiB from a 1 GiB
  // budget). 0 = leave the kernel's default.
  std::optional<uint64_t> kernel_read_ahead_bytes;
  // A scratch volume's writes answered before the hub has them stably (write-back), at most;
  // all volumes' together draw on memoryBudgetBytes too. Unset = a quarter of the budget's
  // background share, within 16..128 MiB (128 MiB from the default budget): an UNSTABLE
  // write is held for two round trips and its COMMIT, so the window is wider than the link's
  // bandwidth-delay product.
  std::optional<uint64_t> write_back_bytes_per_volume;
  // One of EvictionPolicyNames(); exe/wiring.cc makes the policy.
  std::string eviction_policy = "lru";
  // The only directories the agent mounts under (kubelet's, and one for spokectl): a request
  // to mount elsewhere is refused, whoever sends it.
  std::vector<std::string> mount_roots = {"/var/lib/kubelet", "/mnt/spoke"};
  // The fd keeper that holds a duplicate of each mount's /dev/fuse fd, so that mounts outlive
  // this process (docs/agent-restarts.md). Default /run/spoke/fuse-keeper.sock: with
  // fuse_keeper_start, a `spokectl mount` outside Kubernetes survives an agent crash. "" (set
  // explicitly: `fuseKeeperSocket: ""`) = none: SIGTERM ends the sessions, a restart
  // re-creates the mounts and open files break. In Kubernetes: the node plugin's socket on a
  // shared hostPath (the chart sets it, with fuseKeeperStart: false).
  std::string fuse_keeper_socket = kDefaultFuseKeeperSocket;
  // Start a detached spoke-fuse-keeper at fuse_keeper_socket when none answers (spokectl use
  // outside Kubernetes). Off in the chart: the node plugin is the keeper there.
  bool fuse_keeper_start = true;
  // How long SIGTERM waits for requests already read to be answered before handing over.
  double handover_timeout_seconds = 5;
  // How long SIGTERM keeps offering the FUSE connections to the keeper while none takes
  // them (the node plugin restarting beside the agent); the pod's grace period covers it.
  double keeper_wait_seconds = 20;
  // The agent's memory budget (prefetch buffers, store queue, hints, metadata), shared by
  // every volume. 0 = derived at start: 75% of the cgroup's memory limit, else 1.5 GiB.
  uint64_t memory_budget_bytes = 0;
  // Cache sharing between the agents of a cluster (docs/peers.md). Off unless
  // peer_listen_address is set; then peer_token_file and peers and/or peer_service are needed.
  PeerConfig peer;

  // Host and port of metrics_address (valid only when it is not empty).
  std::string MetricsHost() const;
  int MetricsPort() const;
};

// Parses and validates. kInvalidArgument naming "<source>: <field>: why"; kNotFound when
// the file does not exist.
Result<AgentConfig> LoadAgentConfig(const std::string& path);
Result<AgentConfig> ParseAgentConfig(std::string_view yaml, const std::string& source);

// metricsAddress with "${POD_IP}" replaced by the environment's POD_IP (the chart sets it
// from the downward API), so the agent listens on one address and not on every interface.
// kInvalidArgument when POD_IP is used but not set.
Result<std::string> ExpandMetricsAddress(std::string_view text,
                                         const char* (*getenv_fn)(const char*));

// "host:port" with a port in 1..65535 (IPv6 as [addr]:port). `field` names the setting.
Status ParseHostPort(std::string_view text, std::string_view field, std::string* host, int* port);

}  // namespace spoke::agent
