// RemoteFs: the hub's export as the agent sees it. Paths are relative to the volume root
// ("" is the root, "a/b.jpg" a file), already validated (no "..", no leading '/').
// Every call is bounded by the implementation's request timeout: a dead hub gives
// kTimeout or kUnavailable, never a hang.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace spoke::agent {

struct FileAttr {
  uint64_t file_id = 0;  // NFS fileid (inode number on the hub)
  uint32_t mode = 0;     // st_mode: type + permissions
  uint32_t nlink = 1;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t used = 0;  // bytes allocated on the hub
  struct timespec atime {};
  struct timespec mtime {};
  struct timespec ctime {};

  bool is_dir() const { return (mode & 0170000) == 0040000; }
  bool is_reg() const { return (mode & 0170000) == 0100000; }
  bool is_symlink() const { return (mode & 0170000) == 0120000; }
  // The content version a cached block is valid for: changes when the file changes.
  uint64_t ContentVersion() const;
};

struct DirEntry {
  std::string name;
  FileAttr attr;  // filled by READDIRPLUS
};

struct FsStat {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t avail_bytes = 0;
  uint64_t total_files = 0;
  uint64_t free_files = 0;
};

// Which attributes SetAttr changes.
struct SetAttrRequest {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;  // truncate
  std::optional<struct timespec> atime;
  std::optional<struct timespec> mtime;
};

class RemoteFs {
 public:
  using ReadDone = std::function<void(Result<std::vector<char>>)>;

  virtual ~RemoteFs() = default;

  // kNotFound, kTimeout, kUnavailable, kIo.
  virtual Result<FileAttr> Stat(const std::string& path) = 0;
  // Entries without "." and "..". kNotFound, kTimeout, kUnavailable, kIo.
  virtual Result<std::vector<DirEntry>> ReadDir(const std::string& path) = 0;
  // Starts a read of up to `length` bytes (at most 1 MiB) at `offset`; `done` runs on an
  // I/O thread with the bytes (short at end of file) or kTimeout/kUnavailable/kIo/kNotFound.
  // Never blocks for the network: many reads may be in flight at once.
  virtual void ReadAsync(const std::string& path, uint64_t offset, uint32_t length,
                         ReadDone done) = 0;
  // Blocking read built on ReadAsync.
  Result<std::vector<char>> Read(const std::string& path, uint64_t offset, uint32_t length);

  // Write path (scratch volumes). Each returns only after the hub has the data stably
  // (NFS FILE_SYNC or WRITE + COMMIT). kReadOnly, kNoSpace, kNotFound, kTimeout, kIo.
  virtual Result<size_t> Write(const std::string& path, uint64_t offset, const char* data,
                               size_t length) = 0;
  virtual Result<FileAttr> Create(const std::string& path, uint32_t mode) = 0;
  virtual Result<FileAttr> Mkdir(const std::string& path, uint32_t mode) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  virtual Status Rmdir(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Result<FileAttr> SetAttr(const std::string& path, const SetAttrRequest& request) = 0;
  virtual Status Fsync(const std::string& path) = 0;
  virtual Result<FsStat> StatFs() = 0;

  // Health as last observed: false after a request failed with kTimeout/kUnavailable and no
  // request has succeeded since. `last_error` is empty when healthy.
  virtual bool Reachable() const = 0;
  virtual std::string LastError() const = 0;
};

}  // namespace spoke::agent
