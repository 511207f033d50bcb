// Where the agent's control plane meets the data plane: the block cache, its eviction
// policy and the FUSE volume mounter. cache-agent/agent/ only sees the interfaces
// (BlockCache, EvictionPolicy, VolumeMounter), so tests give it fakes; only the binary (and
// this library) link io_uring, libnfs and FUSE.
#pragma once

#if !__has_include("spoke_layer/exe.h")
#error "wrong-way include: cache-agent/exe/ is not among this target's dependencies"
#endif

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache-agent/agent/agent_config.h"
#include "cache-agent/agent/mounted_volume.h"
#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/eviction_policy.h"
#include "cache-agent/peer/peer_node.h"
#include "common/memory_budget.h"
#include "common/metrics.h"
#include "common/status.h"

namespace spoke::agent {

// The policy named `name` (one of EvictionPolicyNames(), agent_config.h). Adding a policy =
// its name there and one entry (name + factory) in wiring.cc's table. kInvalidArgument for
// an unknown name.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           const BlockCache::Config& cache);

// Opens (or creates) the block cache under config.cache_dir with the configured policy.
// Rebuilds the index by scanning when the last run did not close cleanly.
Result<std::unique_ptr<BlockCache>> OpenAgentCache(const AgentConfig& config,
                                                   metrics::Registry& registry);

// The memory budget when memoryBudgetBytes is 0: 75% of `memory_limit_bytes` (the cgroup's
// limit, nullopt when there is none), else kDefaultMemoryBudgetBytes; at least the
// configuration's minimum.
uint64_t DeriveMemoryBudgetBytes(std::optional<uint64_t> memory_limit_bytes,
                                 uint32_t block_size_bytes);
// This process's cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes); nullopt when
// unlimited or unknown.
std::optional<uint64_t> CgroupMemoryLimit();

// The agent's one memory budget (memoryBudgetBytes, or derived), exported to `registry`.
Result<std::unique_ptr<MemoryBudget>> MakeMemoryBudget(const AgentConfig& config,
                                                       metrics::Registry& registry);

// The real FUSE mounter, serving volumes from `cache`, the cluster's peers (`peers`, may be
// null) and the hub. `cache`, `registry`, `memory` and `peers` must outlive it.
Result<std::unique_ptr<VolumeMounter>> MakeAgentMounter(const AgentConfig& config,
                                                        BlockCache& cache,
                                                        metrics::Registry& registry,
                                                        MemoryBudget& memory,
                                                        PeerNode* peers = nullptr);

// The agent's peer node (config.peer): reads the token file, starts the peer server and the
// membership refresh. nullptr when peers are off. `fault_corrupt_served_blocks` is the
// test-only fault of PeerNode::Config.
Result<std::unique_ptr<PeerNode>> StartAgentPeers(const AgentConfig& config,
                                                  metrics::Registry& registry,
                                                  bool fault_corrupt_served_blocks = false);

}  // namespace spoke::agent
