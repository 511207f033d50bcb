// The cache directory's own small files, besides the data files and the index: `lock` (one
// cache per directory: two agents sharing the data files would corrupt each other) and
// `clean` (present only while the saved index matches the data files), and the durable-write
// helpers they and the index file need.
//
// Locking: none of its own; called at open and close, without the cache's mutex.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <string>

#include "common/status.h"

namespace spoke::agent {

// An exclusive flock on <dir>/lock, held until Release() or destruction.
class CacheDirLock {
 public:
  // kUnavailable when another cache holds it; kIo (errno's code) when it cannot be created.
  static Result<CacheDirLock> Acquire(const std::string& dir);
  CacheDirLock() = default;
  CacheDirLock(CacheDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CacheDirLock& operator=(CacheDirLock&& other) noexcept;
  ~CacheDirLock() { Release(); }
  void Release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Whether <dir>/clean was there; removes it (durably) so that a crash from now on rescans.
Result<bool> ConsumeCleanMarker(const std::string& dir);
// Creates <dir>/clean durably (after the index was written).
Status WriteCleanMarker(const std::string& dir);

// Creates or truncates `path` with `bytes` and fsyncs it. errno's code on failure.
Status WriteFileDurably(const std::string& path, const std::string& bytes);
// fsync of a directory, so a create/rename/unlink in it is durable.
Status FsyncDir(const std::string& dir);

}  // namespace spoke::agent
