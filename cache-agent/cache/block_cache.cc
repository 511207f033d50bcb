// BlockCache::Config validation and OpenBlockCache: the production cache is a
// SlotFileBlockCache on io_uring slot files.
#include "cache-agent/cache/block_cache.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "cache-agent/cache/slot_file_block_cache.h"

namespace spoke::agent {

Status BlockCache::Config::Validate() const {
  if (dir.empty()) return Fail(Code::kInvalidArgument, "cache dir: must be set");
  if (block_size < kMinBlockSize || block_size > kMaxBlockSize ||
      (block_size & (block_size - 1)) != 0) {
    return Fail(Code::kInvalidArgument,
                "cache block_size: must be a power of two between 64 KiB and 16 MiB, got " +
                    std::to_string(block_size));
  }
  if (capacity_bytes < 2ull * block_size) {
    return Fail(Code::kInvalidArgument, "cache capacity_bytes: must hold at least 2 blocks (" +
                                            std::to_string(2ull * block_size) + " bytes), got " +
                                            std::to_string(capacity_bytes));
  }
  if (io_depth == 0 || io_depth > 4096) {
    return Fail(Code::kInvalidArgument, "cache io_depth: must be between 1 and 4096");
  }
  return Ok();
}

Result<std::unique_ptr<BlockCache>> OpenBlockCache(const BlockCache::Config& config,
                                                   std::unique_ptr<EvictionPolicy> policy,
                                                   metrics::Registry* metrics) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  std::error_code ec;
  std::filesystem::create_directories(config.dir, ec);
  if (ec) {
    return Fail(Code::kInvalidArgument,
                "cache dir: cannot create " + config.dir + ": " + ec.message());
  }
  if (access(config.dir.c_str(), W_OK | X_OK) != 0) {
    return Fail(Code::kInvalidArgument, "cache dir: " + config.dir + " is not writable");
  }
  UringBlockStore::Options store_options;
  // io_depth bounds device requests in flight: rings x chunks per transfer.
  store_options.rings = std::max(1u, config.io_depth / 8);
  store_options.ring_entries = 16;
  SPOKE_TRY(auto cache,
            SlotFileBlockCache::Open(config, SlotFileBlockCache::UringStore(store_options),
                                     std::move(policy), metrics));
  return std::unique_ptr<BlockCache>(std::move(cache));
}

}  // namespace spoke::agent
