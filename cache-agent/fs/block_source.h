// BlockSource: where the BlockFetcher may get a block before it asks the hub (the cluster's
// peers, cache-agent/peer/). One asynchronous call per block; any failure means "read the
// hub", so a source can cost a reader a bounded wait but never an error.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache-agent/cache/block_key.h"
#include "common/status.h"

namespace spoke::agent {

class BlockSource {
 public:
  struct Block {
    BlockKey key;      // this agent's key (volume, file id, version, index)
    std::string path;  // relative to the volume root
    uint64_t offset = 0;
    uint32_t length = 0;      // bytes of this block (short for a file's last block)
    bool background = false;  // warm-up or prefetch: no reader is waiting for it
  };
  using Done = std::function<void(Result<std::vector<char>>)>;

  virtual ~BlockSource() = default;
  // Whether FetchAsync would take `block` now: the fetcher queues a new fetch on the source's
  // route or on the hub's by it. Called under the fetcher's lock: cheap, leaf locks only.
  virtual bool Takes(const Block& block) const = 0;
  // Starts fetching `block`. false: this source does not take it (what Takes saw may have
  // changed; the hub is asked at once, `done` is never called). true: `done` is called exactly
  // once, from any thread, with the block's `length` verified bytes or with an error after
  // which the hub is asked (EBUSY: the source was over its capacity).
  virtual bool FetchAsync(const Block& block, Done done) = 0;
  // Whether blocks from this source are stored in the local cache too (subject to the
  // cache's admission policy) or only served.
  virtual bool keep_local_copy() const { return true; }
};

}  // namespace spoke::agent
