// MountManager: the agent's table of FUSE mounts, keyed by target path. Mount and Unmount
// are idempotent (the CSI node plugin retries them), every change is persisted to
// stateDir/mounts.json, and on start the mounts of the previous run are restored: a stale
// FUSE mount left by a dead agent is detached first, then the volume is mounted again. A
// restore that fails (hub down) is retried in the background with exponential backoff, so
// start-up never waits on the WAN.
//
// With an fd keeper (docs/agent-restarts.md) mounts outlive the agent: each mount's /dev/fuse
// fd is PUT to the keeper once served, and a starting agent takes over every kept connection
// whose target is in mounts.json instead of re-creating the mount; HandOver() (SIGTERM) stops
// serving without unmounting. The background thread re-PUTs whatever a restarted keeper lost.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/agent/host_mounts.h"
#include "cache-agent/agent/mount_state.h"
#include "cache-agent/agent/mounted_volume.h"
#include "common/fd_passing.h"
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
// A valid target strictly inside one of `roots` (normalised absolute directories).
// kPermissionDenied naming target_path and the roots otherwise.
Status CheckTargetUnderRoots(const std::string& target_path, const std::vector<std::string>& roots);
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
    // Targets must be strictly under one of these (AgentConfig::mount_roots). Empty: any
    // valid target (unit tests of the table itself).
    std::vector<std::string> mount_roots;
    // The fd keeper's socket; "" = no keeper (mounts die with the agent).
    std::string keeper_socket;
    std::chrono::milliseconds keeper_timeout{2000};   // bound on one keeper call
    std::chrono::milliseconds keeper_interval{2000};  // check the keeper has every fd
    std::chrono::milliseconds keeper_backoff_max{30000};
    // Hand-over: how long a connection is offered to a keeper that does not answer or
    // refuses it (restarting with the node plugin) before the mount is ended instead.
    std::chrono::milliseconds keeper_handover_wait{20000};
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
  // something else mounted there), kUnavailable (hub; or another Mount/Unmount of the target
  // is in progress: the caller retries, it is not queued behind a WAN wait), kIo (state
  // file, mkdir). A mount already in the table is checked against the kernel's mount table:
  // one detached behind the agent's back (the node plugin's stale-mount cleanup, an admin's
  // umount) is mounted again. `caller_gone` (e.g. the gRPC call's IsCancelled) is asked once
  // the mount is made: when the caller has given up it cannot know the mount exists and would
  // never unmount it, so it is undone and the call fails with kCancelled.
  Status Mount(const std::string& volume_id, const StringMap& volume_context,
               const std::string& target_path, bool read_only,
               const std::function<bool()>& caller_gone = nullptr);
  // Succeeds when nothing is mounted at the target. kInvalidArgument, kIo; kUnavailable
  // while another Mount/Unmount of the target is in progress.
  Status Unmount(const std::string& target_path);

  std::vector<MountStatus> List() const;
  size_t mounted_count() const;
  // Null when not mounted (or its restore is pending).
  std::shared_ptr<MountedVolume> FindByVolume(const std::string& volume_id) const;
  std::shared_ptr<MountedVolume> FindByTarget(const std::string& target_path) const;

  // Agent shutdown: stops the background thread and ends every FUSE session (lazy unmount),
  // all at once so that a few stuck sessions do not add up past the pod's grace period;
  // keeps mounts.json so the next start restores them. Idempotent.
  void Shutdown();
  // Agent hand-over (SIGTERM with a keeper): stops the background thread, gives up the
  // keeper's lease (a keeper that is stopping too then waits for the next agent), makes sure
  // a keeper has every connection (offered again for up to keeper_handover_wait while none
  // takes it), then stops serving each mount without unmounting (waiting up to `drain` for
  // requests already read). Mounts no keeper took are unmounted as in Shutdown().
  // Idempotent; Shutdown() afterwards does nothing more.
  void HandOver(std::chrono::milliseconds drain);

  // The keeper key of the mount at `target` (a printable, bounded digest of the path).
  static std::string KeeperKey(const std::string& target);

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
    bool kept = false;  // the keeper holds this mount's fd
  };

  // The per-target operation lock: serialises Mount, Unmount and restores of one target. It
  // guards no member (mu_ does), so it is a plain std::mutex, tried rather than waited for
  // by callers that must not queue behind a WAN wait.
  std::shared_ptr<std::mutex> TargetLock(const std::string& target) EXCLUDES(mu_);
  // True when the kernel's mount table has a Spoke FUSE mount on top at `target`.
  bool KernelServes(const std::string& target);
  // Forgets the entry at `target` and, when no other target has its volume, its metrics.
  void RemoveEntryAndSeries(const std::string& target);
  // Mounts at `target` (creating it, cleaning a stale mount). Caller holds the target lock.
  Result<std::unique_ptr<MountedVolume>> DoMount(const MountRecord& record,
                                                 const VolumeContext& context);
  // Mount's steps. The volume mounted at the record's target, null when none is (or a restore
  // is pending); kAlreadyExists when another volume or another read_only is there.
  Result<std::shared_ptr<MountedVolume>> MountedAt(const MountRecord& record) EXCLUDES(mu_);
  // Forgets and unmounts `existing`, a mount the kernel's mount table no longer has.
  void DropVanishedMount(const MountRecord& record, std::shared_ptr<MountedVolume> existing)
      EXCLUDES(mu_);
  // DoMount, undone (kCancelled) when the caller gave up meanwhile.
  Result<std::unique_ptr<MountedVolume>> MountUnlessCallerGone(
      const MountRecord& record, const VolumeContext& context,
      const std::function<bool()>& caller_gone);
  void AddMounted(const MountRecord& record, std::unique_ptr<MountedVolume> volume) EXCLUDES(mu_);
  // Persists the mount table and hands the mount to the keeper; undoes the mount when the
  // table cannot be written.
  Status PersistMounted(const MountRecord& record) EXCLUDES(mu_);
  Status Persist();
  void UpdateGauges();
  void BackgroundLoop();
  void RetryPending(bool force);
  void RefreshHealth();
  // Takes over the connections the keeper holds for `records` (by target); returns the targets
  // adopted. Connections kept for targets not in `records` are aborted and forgotten.
  std::vector<std::string> AdoptKept(const std::vector<MountRecord>& records);
  // PUTs `volume`'s connection under its target's key. False when the keeper did not take it.
  bool PutToKeeper(const MountRecord& record, MountedVolume& volume);
  // Re-PUTs mounts the keeper lacks (it restarted); re-creates mounts whose connection was
  // aborted. Returns when the keeper should be checked next.
  std::chrono::steady_clock::time_point SyncKeeper();
  void ForgetInKeeper(const std::string& target);
  VolumeMounter& mounter_;
  HostMounts& host_;
  metrics::Registry& registry_;
  Options options_;

  // Lock order: a target lock, then persist_mu_, then mu_ (bg_mu_ is never held with mu_).
  std::mutex persist_mu_;  // serialises state-file writes; taken before mu_
  mutable Mutex mu_;
  std::map<std::string, Entry> entries_ GUARDED_BY(mu_);  // by target path
  std::map<std::string, std::shared_ptr<std::mutex>> target_locks_ GUARDED_BY(mu_);

  Mutex bg_mu_;
  CondVar bg_cv_;
  bool stop_ GUARDED_BY(bg_mu_) = false;
  std::thread bg_;
  std::atomic<bool> shut_down_{false};

  metrics::Gauge& mounts_gauge_;
  metrics::Gauge& pending_gauge_;
  metrics::Counter& restore_failures_;
  metrics::Counter& stale_cleaned_;
  metrics::Counter& adopted_;
  std::chrono::milliseconds keeper_backoff_{0};  // the background thread's only
  // This agent's lease on the keeper (start-up, then the bg thread only): while it is open the
  // keeper does not release the connections it holds; it closes with the process.
  UniqueFd keeper_lease_;
  void RenewKeeperLease();
};

}  // namespace spoke::agent
