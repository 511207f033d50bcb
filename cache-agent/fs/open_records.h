// OpenRecords: who opened each handle of a mount, and how, kept in a directory that outlives
// the agent process (every writer; readers the hub would not see as the agent itself). An agent
// that takes a FUSE connection over reopens an earlier agent's handle exactly as it was opened (the
// caller's uid, gid and groups; O_APPEND) instead of as the agent: a non-root writer keeps writing
// after a restart, a reader keeps reading its private files, and nobody's writes go to the hub as
// root or at the kernel's idea of the end of file.
//
// One small file per handle, written whole (temp file + rename) before the open is answered:
// a crash leaves either no record or a complete one. Process crashes keep them (page cache);
// a node reboot ends the FUSE connections anyway, and a fresh mount clears the directory.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class OpenRecords {
 public:
  struct Record {
    Credentials who;
    bool append = false;  // opened with O_APPEND
    bool operator==(const Record&) const = default;
  };

  // The records of one mount in `dir` (created, mode 0700). `clear`: a new mount, whose
  // kernel holds no handle yet: records an earlier connection left are removed.
  // kIo when the directory cannot be made or read.
  static Result<std::unique_ptr<OpenRecords>> Open(const std::string& dir, bool clear);

  // An error naming the file (the record was not kept) when it cannot be written.
  Status Put(uint64_t handle, const Record& record);
  void Forget(uint64_t handle);
  // A reader's record: a hard link to one file per identity, written once, so that an open
  // costs one link() and a close one unlink() (readers are many; a file each halved the open
  // rate). Never marked held; ForgetShared removes it.
  Status PutShared(uint64_t handle, const Record& record);
  void ForgetShared(uint64_t handle);
  // nullopt when no complete record exists for `handle`.
  std::optional<Record> Find(uint64_t handle) const;

  // Write-back: the handle has writes that were answered but may not be on the hub yet. Marked
  // before such a write is answered, settled once a fsync or close saw them reach the hub;
  // an agent that takes the handle over and finds the mark tells its writer (EIO).
  Status MarkHeld(uint64_t handle);
  void MarkSettled(uint64_t handle);
  bool Held(uint64_t handle) const;

  const std::string& dir() const { return dir_; }

 private:
  explicit OpenRecords(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(uint64_t handle) const;

  std::string dir_;
  Mutex shared_mu_;
  // A record's text -> the identity file holding it.
  std::unordered_map<std::string, std::string> shared_files_ GUARDED_BY(shared_mu_);
};

}  // namespace spoke::agent
