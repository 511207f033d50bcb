// What the node plugin needs from the kernel's mount table, behind an interface so the node
// server is unit-tested with FakeMounter (tests/csi-node/fake_mounter.h) and runs with
// SyscallMounter (mount(2)/umount2(2), no shelling out).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "csi-node/mountinfo.h"

namespace spoke::node {

class Mounter {
 public:
  virtual ~Mounter() = default;

  // Binds the tree at `source` onto `target` (both existing directories).
  // kNotFound when one is missing, kPermissionDenied, kIo otherwise.
  virtual Status BindMount(const std::string& source, const std::string& target) = 0;

  // Makes the mount at `target` read-only (MS_REMOUNT|MS_BIND|MS_RDONLY) and keeps its
  // nosuid/nodev/noexec/atime flags. kNotFound when nothing is mounted there, kIo otherwise.
  virtual Status RemountReadOnly(const std::string& target) = 0;

  // Unmounts the top-most mount at `target`; `lazy` detaches it (MNT_DETACH) even when busy
  // or when its FUSE daemon is gone. Nothing mounted there, or no such path: Ok.
  // kIo (EBUSY, ...) otherwise.
  virtual Status Unmount(const std::string& target, bool lazy) = 0;

  // Whether something is mounted exactly at `path`. Answered from the mount table, never by
  // touching the mount itself, so a stale FUSE mount is reported as mounted (true).
  // kIo when the mount table cannot be read.
  virtual Result<bool> IsMountPoint(const std::string& path) = 0;

  // The mount at `path` is dead and must be detached: statfs(path) or stat(path) fails with
  // ENOTCONN (or ECONNABORTED: a FUSE mount whose daemon died). A mount that does not answer
  // within the probe's bound is slow, not dead (false): the caller does not hang with it.
  virtual bool IsStale(const std::string& path) = 0;

  // The whole mount table, top-most mounts last. kIo when it cannot be read.
  virtual Result<std::vector<MountEntry>> ListMounts() = 0;

  // The path as the mount table spells it (symlinks in the parent resolved; the last
  // component is not followed, so a stale mount point does not block the lookup).
  virtual std::string CanonicalPath(const std::string& path) = 0;
};

// mount(2) / umount2(2) and /proc/self/mountinfo. Needs CAP_SYS_ADMIN.
class SyscallMounter final : public Mounter {
 public:
  // `probe_timeout` bounds IsStale's statfs/stat on a mount whose daemon may hang.
  explicit SyscallMounter(std::chrono::milliseconds probe_timeout = std::chrono::seconds(5),
                          std::string mountinfo_path = "/proc/self/mountinfo")
      : probe_timeout_(probe_timeout), mountinfo_path_(std::move(mountinfo_path)) {}

  Status BindMount(const std::string& source, const std::string& target) override;
  Status RemountReadOnly(const std::string& target) override;
  Status Unmount(const std::string& target, bool lazy) override;
  Result<bool> IsMountPoint(const std::string& path) override;
  bool IsStale(const std::string& path) override;
  Result<std::vector<MountEntry>> ListMounts() override;
  std::string CanonicalPath(const std::string& path) override;

 private:
  std::chrono::milliseconds probe_timeout_;
  std::string mountinfo_path_;
};

// Lexically normalised absolute path: "//a/./b/" -> "/a/b". No file system access.
std::string CleanPath(const std::string& path);

}  // namespace spoke::node
