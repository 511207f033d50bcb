// The controller's only access to a hub: administrative operations on one NFS export
// (mkdir -p, stat, rename, rm -r, small record files, fsstat). The real implementation is
// LibnfsExportAdmin (userspace NFSv3, no kernel mount, no privilege); unit tests use a fake.
//
// Paths are relative to the share ("" = the share root) and already validated by
// common/volume.h (no "..", no absolute paths).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/volume.h"

namespace spoke::controller {

struct EntryInfo {
  bool is_dir = false;
  uint64_t size = 0;
};

struct FsUsage {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t available_bytes = 0;  // what an unprivileged writer can still use
};

// One connection to one share. Not thread-safe: one session per request.
// Every method returns kUnavailable when the hub does not answer within the session's
// bound, and kIo / kPermissionDenied / kNoSpace for what the server reports.
class ExportSession {
 public:
  virtual ~ExportSession() = default;

  // kNotFound when absent. Does not follow a symlink in the last component.
  virtual Result<EntryInfo> Stat(const std::string& path) = 0;
  // Names in a directory, without "." and "..". kNotFound when absent.
  virtual Result<std::vector<std::string>> List(const std::string& path) = 0;
  // Creates one directory with `mode`. kAlreadyExists when something is there.
  virtual Status MakeDir(const std::string& path, uint32_t mode) = 0;
  // mkdir -p: creates the missing components of `path` with `mode`; OK when it exists as a
  // directory; kAlreadyExists when a component is not a directory.
  virtual Status MakeDirs(const std::string& path, uint32_t mode) = 0;
  // kNotFound when `from` is absent, kAlreadyExists when `to` exists (never overwrites).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a file, symlink or empty directory. kNotFound when absent, kNotEmpty.
  virtual Status Remove(const std::string& path) = 0;
  // rm -r: removes `path` and everything under it; never follows a symlink (symlinks are
  // unlinked, only real directories are descended into). OK when already absent.
  virtual Status RemoveTree(const std::string& path) = 0;
  // Reads a small file whole. kNotFound when absent; kInvalidArgument when larger than
  // `max_bytes`.
  virtual Result<std::string> ReadFile(const std::string& path, size_t max_bytes) = 0;
  // Replaces a small file atomically (writes `path`.tmp, then renames over `path`).
  virtual Status WriteFile(const std::string& path, const std::string& data) = 0;
  // FSSTAT of the share.
  virtual Result<FsUsage> Usage() = 0;
};

class ExportAdmin {
 public:
  virtual ~ExportAdmin() = default;
  // Connects to `hub` and mounts its share. Every call made through the session (and the
  // mount itself) is bounded by `timeout`. kUnavailable when the hub does not answer;
  // kNotFound / kPermissionDenied when the hub answers but refuses the share. Every request
  // carries identity.uid/gid (AUTH_SYS), or the process's own (root) when allow_root.
  virtual Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub,
                                                      std::chrono::seconds timeout,
                                                      const HubIdentityParams& identity) = 0;
};

}  // namespace spoke::controller
