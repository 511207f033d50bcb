// BlockFetch: one block being fetched, the record the BlockFetcher's parts share (FetchTable,
// FetchDispatcher, StoreQueue). Fields set when it is made (key, path, offset, length,
// written_here) never change; the others are guarded by the fetcher's mutex.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cache-agent/cache/block_key.h"
#include "cache-agent/fs/block_bytes.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/memory_budget.h"
#include "common/status.h"

namespace spoke::agent {

// Priority classes, most urgent first: readers, warm-up (and hints), prefetch.
enum FetchClass : int { kDemandClass = 0, kWarmClass = 1, kPrefetchClass = 2, kFetchClasses = 3 };

// Where a fetch is sent: the hub, or the BlockSource (the cluster's peers). Each has its own
// queues and window (FetchTable, FetchDispatcher).
enum FetchRoute : int { kHubRoute = 0, kSourceRoute = 1, kFetchRoutes = 2 };

struct BlockFetch {
  BlockKey key;
  std::string path;
  uint64_t offset = 0;
  uint32_t length = 0;
  int cls = kDemandClass;         // FetchClass: the most urgent one asked for
  bool stored_as_demand = false;  // asked for by a reader or warm-up: no expert to credit
  bool written_here = false;      // FileRef::written_here: no hub version to check
  // FileRef::reader of the first reader that asked before it was sent; none: the volume's
  // identity.
  std::optional<Credentials> reader;
  std::chrono::steady_clock::time_point deadline{};  // latest reader deadline (demand)
  bool warm_waiter = false;  // a warm-up waits for it: never dropped at a reader deadline
  ExpertId expert = kDemand;
  double predicted_use = kUnknownUse;
  // A set prediction's block (PrefetchRequest::within_epoch): staged without the ttl, until
  // read or given up (DropStaged).
  bool within_epoch = false;
  bool dispatched = false;
  std::chrono::steady_clock::time_point dispatched_at{};
  bool paced = false;  // sent as warm-up or prefetch: counted as background bytes on the link
  // Chosen when it is made (BlockSource::Takes); a source ask that fails is queued again for
  // the hub (a background one a busy owner refused: for the source again first, a few times).
  FetchRoute route = kHubRoute;
  int source_busy_retries = 0;  // times a busy owner refused it and it was queued again
  bool done = false;
  bool settled = false;           // done and (when it was to be cached) stored
  bool counted_prefetch = false;  // its bytes are in the fetcher's prefetch bytes
  // Bytes (length) held in the memory budget, and under which use.
  uint64_t memory_held = 0;
  MemoryBudget::Use memory_use = MemoryBudget::Use::kDemand;
  Result<BlockData> result = std::unexpected(Error(Code::kInternal, "not fetched"));
};

using BlockFetchPtr = std::shared_ptr<BlockFetch>;

}  // namespace spoke::agent
