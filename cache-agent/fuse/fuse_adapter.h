// FuseAdapter: a libfuse3 low-level session serving one VolumeFs at a mount point. It only
// translates callbacks to VolumeFs calls and Results to errno; semantics live in VolumeFs.
//
// Mounted with fsname=spoke,subtype=spoke,allow_other,default_permissions,max_read=1 MiB.
// Read-only volumes are mounted read-write at the kernel level so that the hint control
// file stays writable; VolumeFs refuses every other change with EROFS. Immutable volumes keep the
// kernel page cache and long attribute/entry timeouts; ttl volumes use the ttl; strict volumes use
// direct I/O and no kernel attribute caching.
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cache-agent/fs/volume_fs.h"
#include "cache-agent/fuse/fuse_op_errors.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

struct fuse_session;

namespace spoke::agent {

class FuseAdapter {
 public:
  struct Options {
    std::string mountpoint;
    bool read_only = true;
    Consistency consistency = Consistency::kImmutable;
    uint32_t ttl_seconds = 30;
    bool allow_other = true;    // pods run as other users
    int max_idle_threads = 32;  // libfuse worker threads kept around
    // Where spoke_fuse_op_errors_total{op,errno} is counted (null: not counted). Must
    // outlive the session.
    metrics::Registry* registry = nullptr;
  };

  // Mounts and starts the session loop on its own thread. kInvalidArgument (bad mount
  // point), kIo (mount failed; message says why).
  static Result<std::unique_ptr<FuseAdapter>> Mount(VolumeFs& fs, const Options& options);
  ~FuseAdapter();  // Unmount()
  FuseAdapter(const FuseAdapter&) = delete;
  FuseAdapter& operator=(const FuseAdapter&) = delete;

  // Ends the session and unmounts (lazily when busy; a busy connection is aborted so the
  // session thread can end). Idempotent.
  Status Unmount();

  VolumeFs& fs() { return fs_; }
  const Options& options() const { return options_; }
  double entry_timeout() const { return entry_timeout_; }
  FuseOpErrors& op_errors() { return op_errors_; }

 private:
  FuseAdapter(VolumeFs& fs, const Options& options);

  VolumeFs& fs_;
  Options options_;
  double entry_timeout_ = 0;
  FuseOpErrors op_errors_;
  fuse_session* session_ = nullptr;
  std::thread loop_;
  std::atomic<bool> loop_done_{false};
  Mutex mu_;
  bool unmounted_ GUARDED_BY(mu_) = false;
  dev_t dev_ = 0;  // the mount's device: names its /sys/fs/fuse/connections entry
};

}  // namespace spoke::agent
