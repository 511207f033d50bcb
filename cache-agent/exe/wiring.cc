#include "cache-agent/exe/wiring.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <utility>

#include "cache-agent/cache/block_cache_factory.h"  // OpenBlockCache, MakeLruPolicy
#include "cache-agent/cache/nothrash_policy.h"
#include "cache-agent/exe/fuse_volume_mounter.h"
#include "cache-agent/peer/peer_token.h"

namespace spoke::agent {
namespace {

using PolicyFactory = Result<std::unique_ptr<EvictionPolicy>> (*)(const BlockCache::Config&);

struct PolicyEntry {
  std::string_view name;
  PolicyFactory make;
};

Result<std::unique_ptr<EvictionPolicy>> MakeLru(const BlockCache::Config&) {
  return std::unique_ptr<EvictionPolicy>(MakeLruPolicy());
}

// The prefetcher's policy for working sets larger than the cache: keeps a stable subset and
// never lets a prefetch evict a block predicted to be needed sooner.
Result<std::unique_ptr<EvictionPolicy>> MakeNoThrash(const BlockCache::Config&) {
  NoThrashPolicy::Config c;
  SPOKE_RETURN_IF_ERROR_WRAP(c.Validate(), "evictionPolicy nothrash");
  return std::unique_ptr<EvictionPolicy>(std::make_unique<NoThrashPolicy>(c));
}

// The one place that maps evictionPolicy names to policies.
constexpr PolicyEntry kPolicies[] = {
    {"lru", &MakeLru},
    {"nothrash", &MakeNoThrash},
};

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           const BlockCache::Config& cache) {
  for (const auto& p : kPolicies) {
    if (p.name == name) return p.make(cache);
  }
  return Fail(Code::kInvalidArgument, "evictionPolicy: unknown policy '" + std::string(name) + "'");
}

Result<std::unique_ptr<BlockCache>> OpenAgentCache(const AgentConfig& config,
                                                   metrics::Registry& registry) {
  BlockCache::Config cc;
  cc.dir = config.cache_dir;
  cc.capacity_bytes = config.cache_size_bytes;
  cc.block_size = config.block_size_bytes;
  SPOKE_RETURN_IF_ERROR(cc.Validate());
  SPOKE_TRY(auto policy, MakeEvictionPolicy(config.eviction_policy, cc));
  return OpenBlockCache(cc, std::move(policy), registry);
}

uint64_t DeriveMemoryBudgetBytes(std::optional<uint64_t> memory_limit_bytes,
                                 uint32_t block_size_bytes) {
  // The rest of the limit is the baseline: code, FUSE and gRPC threads, libnfs, the heap's
  // slack (the chart derives the same 75% from the container's limit).
  uint64_t bytes = memory_limit_bytes ? *memory_limit_bytes / 4 * 3 : kDefaultMemoryBudgetBytes;
  return std::max<uint64_t>(bytes, kMinMemoryBudgetBlocks * block_size_bytes);
}

std::optional<uint64_t> CgroupMemoryLimit() {
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text)) continue;
    if (text == "max") return std::nullopt;
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) continue;
    // cgroup v1 reports "unlimited" as a number near 2^63.
    if (v >= (1ull << 60)) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

Result<std::unique_ptr<MemoryBudget>> MakeMemoryBudget(const AgentConfig& config,
                                                       metrics::Registry& registry) {
  MemoryBudget::Config mc;
  mc.total_bytes = config.memory_budget_bytes != 0
                       ? config.memory_budget_bytes
                       : DeriveMemoryBudgetBytes(CgroupMemoryLimit(), config.block_size_bytes);
  SPOKE_RETURN_IF_ERROR_WRAP(mc.Validate(), "memoryBudgetBytes");
  auto budget = std::make_unique<MemoryBudget>(mc);
  budget->ExportTo(registry);
  return budget;
}

Result<std::unique_ptr<VolumeMounter>> MakeAgentMounter(const AgentConfig& config,
                                                        BlockCache& cache,
                                                        metrics::Registry& registry,
                                                        MemoryBudget& memory, PeerNode* peers) {
  return MakeFuseVolumeMounter(config, cache, registry, memory, peers);
}

Result<std::unique_ptr<PeerNode>> StartAgentPeers(const AgentConfig& config,
                                                  metrics::Registry& registry,
                                                  bool fault_corrupt_served_blocks) {
  if (!config.peer.enabled()) return std::unique_ptr<PeerNode>();
  SPOKE_TRY(auto token, LoadPeerToken(config.peer.token_file));
  PeerNode::Config pc;
  pc.listen_address = config.peer.listen_address;
  pc.token = token;
  pc.timeout = std::chrono::milliseconds(config.peer.timeout_ms);
  pc.keep_local_copy = config.peer.keep_local_copy;
  pc.members.static_peers = config.peer.peers;
  pc.members.service = config.peer.service;
  pc.fault_corrupt_served_blocks = fault_corrupt_served_blocks;
  pc.plaintext = config.peer.plaintext;
  if (!config.peer.plaintext) {
    PeerNode::Config::Tls tls;
    SPOKE_TRY(tls.cert_pem, ReadPemFile(config.peer.tls_cert_file, "peerTlsCertFile"));
    SPOKE_TRY(tls.key_pem, ReadPemFile(config.peer.tls_key_file, "peerTlsKeyFile"));
    SPOKE_TRY(tls.ca_pem, ReadPemFile(config.peer.tls_ca_file, "peerTlsCaFile"));
    tls.server_name = config.peer.tls_server_name;
    tls.identity = config.peer.tls_identity == "address" ? PeerNode::Config::Tls::Identity::kAddress
                                                         : PeerNode::Config::Tls::Identity::kName;
    pc.tls = std::move(tls);
  }
  return PeerNode::Start(pc, registry);
}

}  // namespace spoke::agent
