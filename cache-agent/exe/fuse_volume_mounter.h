// FuseVolumeMounter: the real VolumeMounter, where the concrete classes meet. One Mount()
// connects a LibnfsRemote (connection pool to the hub), opens a Volume over it (metadata,
// fetcher over the agent's shared BlockCache, prefetcher, VolumeFs) and serves it to the
// kernel with a FuseAdapter at the target path.
#pragma once

#if !__has_include("spoke_layer/exe.h")
#error "wrong-way include: cache-agent/exe/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cache-agent/agent/agent_config.h"
#include "cache-agent/agent/mounted_volume.h"
#include "cache-agent/cache/block_cache.h"
#include "cache-agent/fs/prefetch_driver.h"
#include "cache-agent/peer/peer_node.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "cache-agent/volume/volume.h"
#include "common/metrics.h"
#include "common/status.h"

namespace spoke::agent {

class FuseVolumeMounter final : public VolumeMounter {
 public:
  struct Config {
    // The hub pool of each volume. request_timeout_seconds is the agent's default; a
    // volume's own hubTimeoutSeconds (VolumeContext::hub_timeout_seconds) takes precedence.
    LibnfsRemote::Config hub;
    // Upper bound of the per-file sequential read-ahead window.
    uint64_t read_ahead_max_bytes = 64ull << 20;
    uint64_t kernel_read_ahead_bytes = 16ull << 20;  // AgentConfig::kernel_read_ahead_bytes
    // Prefetch bytes queued or in flight per volume (the rest of the pipe is for demand).
    uint64_t prefetch_bytes_max = 256ull << 20;
    // Reads paced to the WAN link (Volume::Config::link_queue_target; 0 = off) and the
    // first window (Volume::Config::link_initial_window).
    std::chrono::milliseconds link_queue_target{200};
    uint64_t link_initial_window = 16ull << 20;
    // Directories listed at once by the mount-time metadata walk.
    int walk_concurrency = 16;  // directories listed at once: each listing is a WAN wait
    // FUSE allow_other: pods run as other users than the agent.
    bool allow_other = true;
    // Block size when no cache is given (cache disabled); otherwise the cache's.
    uint32_t block_size = 1 << 20;
    // The agent's memory budget, shared by every volume (optional; must outlive the mounter).
    MemoryBudget* memory = nullptr;
    // Each scratch volume's write-back bound (Volume::Config::write_back_bytes).
    uint64_t write_back_bytes = 64ull << 20;
    // Each volume's hint queue bounds (lines, accounted bytes).
    size_t hints_max_lines = 1 << 20;
    uint64_t hints_max_bytes = 64ull << 20;
    // The agent's state directory (AgentConfig::state_dir): each mount keeps the openers of
    // its writable handles under open-files/ there. "" = not kept.
    std::string state_dir;
    Status Validate() const;
  };

  // `cache` may be null (every read passes through to the hub). `cache` and `registry`
  // must outlive the mounter and every volume it mounted.
  // Registers itself (a CacheListenerFanout) as the cache's listener: prefetch verdicts
  // reach each volume's scheduler.
  // `peers` (may be null: no cache sharing) must outlive the mounter and its volumes.
  FuseVolumeMounter(const Config& config, BlockCache* cache, metrics::Registry* registry,
                    PeerNode* peers = nullptr);
  ~FuseVolumeMounter() override;

  // kInvalidArgument (bad context or target), kUnavailable (hub not reachable within the
  // volume's hub timeout), kIo (FUSE mount failed).
  Result<std::unique_ptr<MountedVolume>> Mount(const std::string& volume_id,
                                               const VolumeContext& context,
                                               const std::string& target_path,
                                               bool read_only) override;
  // The same stack, serving a connection an earlier agent mounted (docs/agent-restarts.md).
  Result<std::unique_ptr<MountedVolume>> Adopt(const std::string& volume_id,
                                               const VolumeContext& context,
                                               const std::string& target_path, bool read_only,
                                               UniqueFd fuse_fd,
                                               const std::string& takeover_json) override;

 private:
  // Opens the volume's stack and serves it: a new mount, or a takeover when `fuse_fd` is valid.
  Result<std::unique_ptr<MountedVolume>> MountOrAdopt(const std::string& volume_id,
                                                      const VolumeContext& context,
                                                      const std::string& target_path,
                                                      bool read_only, UniqueFd fuse_fd,
                                                      const std::string& takeover_json);
  // The volume settings the mounter's config and the volume's hub pool give.
  Volume::Config VolumeSettings(const LibnfsRemote::Config& hub) const;
  // The volume's side in the peer node; null without cache sharing.
  std::unique_ptr<PeerVolume> AttachPeer(const VolumeContext& context, const std::string& path,
                                         bool read_only);

  Config config_;
  BlockCache* cache_;
  metrics::Registry* registry_;
  PeerNode* peers_;
  // Shared with the mounted volumes (each removes its scheduler when it goes).
  std::shared_ptr<CacheListenerFanout> listeners_;
};

// The agent's mounter from its configuration (hub pool, read-ahead); called by
// exe/wiring.cc. kInvalidArgument when the derived Config does not validate.
Result<std::unique_ptr<VolumeMounter>> MakeFuseVolumeMounter(const AgentConfig& config,
                                                             BlockCache& cache,
                                                             metrics::Registry& registry,
                                                             MemoryBudget& memory,
                                                             PeerNode* peers = nullptr);

}  // namespace spoke::agent
