#include <limits.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>

#include "common/log.h"
#include "csi-node/mounter.h"

namespace spoke::node {
namespace {

Error ErrnoError(int err, std::string_view what) {
  return Error::FromErrno(err, std::string(what) + ": " + std::strerror(err));
}

}  // namespace

std::string CleanPath(const std::string& path) {
  std::string s = std::filesystem::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string SyscallMounter::CanonicalPath(const std::string& path) {
  std::filesystem::path p(CleanPath(path));
  std::filesystem::path parent = p.parent_path();
  if (parent.empty() || p == parent) return p.string();
  char buf[PATH_MAX];
  if (::realpath(parent.c_str(), buf) == nullptr) return p.string();
  return CleanPath((std::filesystem::path(buf) / p.filename()).string());
}

Status SyscallMounter::BindMount(const std::string& source, const std::string& target) {
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return std::unexpected(ErrnoError(errno, "bind mount " + source + " on " + target));
  }
  log::Debug("bind mounted", {{"source", source}, {"target", target}});
  return Ok();
}

Status SyscallMounter::RemountReadOnly(const std::string& target) {
  SPOKE_TRY(auto mounts, ListMounts());
  auto entry = FindMount(mounts, CanonicalPath(target));
  if (!entry) return Fail(Code::kNotFound, "remount read-only: nothing is mounted at " + target);
  // A bind remount replaces the per-mount flags: keep the ones that make it safer.
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
  if (entry->HasOption("nosuid")) flags |= MS_NOSUID;
  if (entry->HasOption("nodev")) flags |= MS_NODEV;
  if (entry->HasOption("noexec")) flags |= MS_NOEXEC;
  if (entry->HasOption("noatime")) flags |= MS_NOATIME;
  if (entry->HasOption("nodiratime")) flags |= MS_NODIRATIME;
  if (entry->HasOption("relatime")) flags |= MS_RELATIME;
  if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) {
    return std::unexpected(ErrnoError(errno, "remount read-only " + target));
  }
  return Ok();
}

Status SyscallMounter::Unmount(const std::string& target, bool lazy) {
  if (::umount2(target.c_str(), lazy ? MNT_DETACH : 0) != 0) {
    int err = errno;
    // EINVAL: not a mount point; ENOENT: gone already. Both mean "nothing to unmount".
    if (err == EINVAL || err == ENOENT) return Ok();
    return std::unexpected(ErrnoError(err, std::string(lazy ? "lazy " : "") + "unmount " + target));
  }
  log::Debug("unmounted", {{"target", target}, {"lazy", lazy}});
  return Ok();
}

Result<bool> SyscallMounter::IsMountPoint(const std::string& path) {
  SPOKE_TRY(auto mounts, ListMounts());
  return FindMount(mounts, CanonicalPath(path)).has_value();
}

bool SyscallMounter::IsStale(const std::string& path) {
  // statfs first: the kernel caches FUSE attributes (for an hour on immutable datasets), so
  // stat() on a mount whose daemon died can still succeed; statfs always asks the daemon
  // (the agent answers it from its own cache, so this costs no WAN round trip).
  // The probe runs on its own thread: a hung daemon blocks it, not the CSI call. A probe
  // stuck that way is left behind (it ends when the mount is detached or the daemon dies).
  auto result = std::make_shared<std::promise<int>>();
  std::future<int> done = result->get_future();
  std::thread([path, result] {
    int err = 0;
    struct statfs sfs;
    struct stat st;
    if (::statfs(path.c_str(), &sfs) != 0) {
      err = errno;
    } else if (::stat(path.c_str(), &st) != 0) {
      err = errno;
    }
    result->set_value(err);
  }).detach();
  if (done.wait_for(probe_timeout_) == std::future_status::timeout) {
    // Slow is not dead: a hub slower than the probe, or an agent being restarted (its
    // successor takes the connection over). Detaching would break a mount that recovers.
    log::Warn("mount does not answer yet; not treated as stale (only ENOTCONN/ECONNABORTED are)",
              {{"path", path}, {"timeout_ms", static_cast<int64_t>(probe_timeout_.count())}});
    return false;
  }
  int err = done.get();
  return err == ENOTCONN || err == ECONNABORTED;
}

Result<std::vector<MountEntry>> SyscallMounter::ListMounts() {
  return ReadMountInfo(mountinfo_path_);
}

}  // namespace spoke::node
