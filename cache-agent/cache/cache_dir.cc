#include "cache-agent/cache/cache_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace spoke::agent {

Result<CacheDirLock> CacheDirLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/lock";
  CacheDirLock lock;
  lock.fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock.fd_ < 0) {
    return std::unexpected(Error::FromErrno(errno, "cache dir: cannot create " + path));
  }
  if (flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    return Fail(Code::kUnavailable, "cache dir: " + dir + " is in use by another cache");
  }
  return lock;
}

CacheDirLock& CacheDirLock::operator=(CacheDirLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void CacheDirLock::Release() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Result<bool> ConsumeCleanMarker(const std::string& dir) {
  const std::string clean = dir + "/clean";
  if (access(clean.c_str(), F_OK) != 0) return false;
  if (unlink(clean.c_str()) != 0) {
    return std::unexpected(Error::FromErrno(errno, "cache: cannot remove " + clean));
  }
  SPOKE_RETURN_IF_ERROR(FsyncDir(dir));
  return true;
}

Status WriteCleanMarker(const std::string& dir) {
  if (Status s = WriteFileDurably(dir + "/clean", "clean\n"); !s) return s;
  return FsyncDir(dir);
}

Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open dir " + dir));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return std::unexpected(Error::FromErrno(err, "fsync dir " + dir));
  return Ok();
}

Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "create " + path));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      return std::unexpected(Error::FromErrno(err, "write " + path));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    int err = errno;
    close(fd);
    return std::unexpected(Error::FromErrno(err, "fsync " + path));
  }
  close(fd);
  return Ok();
}

}  // namespace spoke::agent
