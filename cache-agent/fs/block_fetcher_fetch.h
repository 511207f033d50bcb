// BlockFetcher::Fetch: one block being fetched, shared by the fetcher's translation units
// (block_fetcher.cc, block_fetcher_staging.cc). Internal to BlockFetcher.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <string>

#include "cache-agent/fs/block_fetcher.h"

namespace spoke::agent {

struct BlockFetcher::Fetch {
  BlockKey key;
  std::string path;
  uint64_t offset = 0;
  uint32_t length = 0;
  int cls = 0;                    // BlockFetcher::Class
  bool stored_as_demand = false;  // asked for by a reader or warm-up: no expert to credit
  bool written_here = false;      // FileRef::written_here: no hub version to check
  std::chrono::steady_clock::time_point deadline{};  // latest reader deadline (demand)
  bool warm_waiter = false;  // a warm-up waits for it: never dropped at a reader deadline
  ExpertId expert = kDemand;
  double predicted_use = kUnknownUse;
  // A set prediction's block (PrefetchRequest::within_epoch): staged without the ttl, until
  // read or given up (DropStaged).
  bool within_epoch = false;
  bool dispatched = false;
  std::chrono::steady_clock::time_point dispatched_at{};
  bool paced = false;  // sent as warm-up or prefetch: in background_on_hub_, not demand_on_hub_
  bool done = false;
  bool settled = false;           // done and (when it was to be cached) stored
  bool counted_prefetch = false;  // its bytes are in prefetch_bytes_
  // Bytes (length) held in the memory budget, and under which use; guarded by mu_.
  uint64_t memory_held = 0;
  MemoryBudget::Use memory_use = MemoryBudget::Use::kDemand;
  Result<BlockData> result = std::unexpected(Error(Code::kInternal, "not fetched"));
};

}  // namespace spoke::agent
