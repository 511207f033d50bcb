// MountManager: the agent's table of FUSE mounts, keyed by target path. Mount and Unmount
// are idempotent (the CSI node plugin retries them), every change is persisted to
// stateDir/mounts.json, and on start the mounts of the previous run are restored: a stale
// FUSE mount left by a dead agent is detached first, then the volume is mounted again. A
// restore that fails (hub down) is retried in the background with exponential backoff, so
// start-up never waits on the WAN.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/agent/host_mounts.h"
#include "cache-agent/agent/mount_state.h"
#include "cache-agent/agent/mounted_volume.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

namespace spoke::agent {

// Volume ids the agent accepts: an id from the CSI controller (VolumeId::Decode), a spokectl
// id (the same format, also for a scratch volume at a share root), or an opaque id (1..2048
// printable bytes, not starting with "spoke1|"). kInvalidArgument naming volume_id.
Status ValidateVolumeId(const std::string& volume_id);
// Absolute, normalised (no ".", "..", "//" or trailing '/'), not "/". kInvalidArgument naming
// target_path.
Status ValidateTargetPath(const std::string& target_path);
// Lexically normalises a path given by a client ("/a/b/" -> "/a/b").
std::string NormalizeTarget(const std::string& path);

struct MountStatus {
  MountRecord record;
  bool mounted = false;  // false: restore pending (retried in the background)
  bool hub_reachable = true;
  std::string last_error;  // last restore or hub error
  int restore_attempts = 0;
};

class MountManager {
 public:
  struct Options {
    std::string state_file;                            // stateDir/mounts.json
    std::chrono::milliseconds retry_initial{1000};     // first restore retry
    std::chrono::milliseconds retry_max{60000};        // backoff cap
    std::chrono::milliseconds health_interval{10000};  // hub reachability refresh
  };

  // `mounter`, `host` and `registry` must outlive the manager.
  MountManager(VolumeMounter& mounter, HostMounts& host, metrics::Registry& registry,
               Options options);
  ~MountManager();
  MountManager(const MountManager&) = delete;
  MountManager& operator=(const MountManager&) = delete;

  // Reads the state file, detaches stale mounts at its targets, and starts the background
  // thread that mounts them again. kInvalidArgument/kIo when the state file is unreadable
  // (it is moved aside to mounts.json.bad so the next start is clean).
  Status Start();

  // kInvalidArgument (names the field), kAlreadyExists (another volume at the target, or
  // something else mounted there), kUnavailable (hub), kIo (state file, mkdir).
  Status Mount(const std::string& volume_id, const StringMap& volume_context,
               const std::string& target_path, bool read_only);
  // Succeeds when nothing is mounted at the target. kInvalidArgument, kIo.
  Status Unmount(const std::string& target_path);

  std::vector<MountStatus> List() const;
  size_t mounted_count() const;
  // Null when not mounted (or its restore is pending).
  std::shared_ptr<MountedVolume> FindByVolume(const std::string& volume_id) const;
  std::shared_ptr<MountedVolume> FindByTarget(const std::string& target_path) const;

  // Agent shutdown: stops the background thread and ends every FUSE session (lazy unmount);
  // keeps mounts.json so the next start restores them. Idempotent.
  void Shutdown();

  // Runs one round of background work now (restores due, hub health). For tests.
  void RunBackgroundOnce(bool force_retry);

 private:
  struct Entry {
    MountRecord record;
    std::shared_ptr<MountedVolume> volume;  // null: restore pending
    int attempts = 0;
    std::chrono::milliseconds backoff{0};
    std::chrono::steady_clock::time_point next_retry{};
    bool hub_reachable = true;
    std::string last_error;
  };

  // The per-target lock (a plain std::mutex: it guards no member, only the order of
  // operations on one target). Taken before mu_.
  std::shared_ptr<std::mutex> TargetLock(const std::string& target) EXCLUDES(mu_);
  // Mounts at `target` (creating it, cleaning a stale mount). Caller holds the target lock.
  Result<std::unique_ptr<MountedVolume>> DoMount(const MountRecord& record,
                                                 const VolumeContext& context);
  Status Persist() EXCLUDES(mu_);
  void UpdateGauges();
  void BackgroundLoop();
  void RetryPending(bool force);
  void RefreshHealth();

  VolumeMounter& mounter_;
  HostMounts& host_;
  metrics::Registry& registry_;
  Options options_;

  mutable Mutex mu_;
  std::map<std::string, Entry> entries_ GUARDED_BY(mu_);  // by target path
  std::map<std::string, std::shared_ptr<std::mutex>> target_locks_ GUARDED_BY(mu_);
  Mutex persist_mu_ ACQUIRED_BEFORE(mu_);  // serialises state-file writes

  Mutex bg_mu_;
  CondVar bg_cv_;
  bool stop_ GUARDED_BY(bg_mu_) = false;
  std::thread bg_;
  std::atomic<bool> shut_down_{false};

  metrics::Gauge& mounts_gauge_;
  metrics::Gauge& pending_gauge_;
  metrics::Counter& restore_failures_;
  metrics::Counter& stale_cleaned_;
};

}  // namespace spoke::agent
