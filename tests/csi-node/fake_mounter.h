// An in-memory mount table standing in for the kernel in node server tests. Directories are
// real (tests use a temporary dir); mounts are entries in a list. A stale mount (FUSE daemon
// gone) can only be removed lazily, as with the kernel when anything still holds it.
#pragma once

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "csi-node/mounter.h"

namespace spoke::node::testing {

class FakeMounter final : public Mounter {
 public:
  // What the cache agent does: a new FUSE file system at `path`.
  void AddFuseMount(const std::string& path, bool read_only) {
    std::lock_guard<std::mutex> l(mu_);
    MountEntry e;
    e.id = next_id_++;
    e.parent_id = 1;
    e.major = 0;
    e.minor = next_minor_++;
    e.root = "/";
    e.mount_point = CleanPath(path);
    e.options = {read_only ? "ro" : "rw", "nosuid", "nodev", "relatime"};
    e.fstype = "fuse.spoke";
    e.source = "spoke";
    mounts_.push_back(e);
  }
  void MarkStale(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    stale_.insert(CleanPath(path));
  }
  int CountMountsAt(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(std::count_if(mounts_.begin(), mounts_.end(), [&](const auto& m) {
      return m.mount_point == CleanPath(path);
    }));
  }
  std::optional<MountEntry> Top(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return FindMount(mounts_, CleanPath(path));
  }

  int binds = 0;
  int remounts = 0;
  int lazy_unmounts = 0;
  bool fail_remount = false;

  Status BindMount(const std::string& source, const std::string& target) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!std::filesystem::is_directory(target)) {
      return Fail(Code::kNotFound, "bind target " + target + " is not a directory");
    }
    auto src = FindMount(mounts_, CleanPath(source));
    MountEntry e;
    if (src) {
      e = *src;
    } else {
      e.minor = 999;
      e.root = CleanPath(source);
      e.fstype = "ext4";
      e.source = "/dev/fake";
    }
    e.id = next_id_++;
    e.mount_point = CleanPath(target);
    e.options = {"rw", "nosuid", "nodev", "relatime"};
    mounts_.push_back(e);
    ++binds;
    return Ok();
  }
  Status RemountReadOnly(const std::string& target) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_remount) return Fail(Code::kIo, "remount read-only " + target + ": injected failure");
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (it->mount_point == CleanPath(target)) {
        it->options[0] = "ro";
        ++remounts;
        return Ok();
      }
    }
    return Fail(Code::kNotFound, "nothing mounted at " + target);
  }
  Status Unmount(const std::string& target, bool lazy) override {
    std::lock_guard<std::mutex> l(mu_);
    std::string p = CleanPath(target);
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (it->mount_point != p) continue;
      if (stale_.contains(p) && !lazy) {
        return Fail(Code::kIo, "unmount " + target + ": Device or resource busy");
      }
      mounts_.erase(std::next(it).base());
      if (lazy) ++lazy_unmounts;
      if (!FindMount(mounts_, p)) stale_.erase(p);
      return Ok();
    }
    return Ok();
  }
  Result<bool> IsMountPoint(const std::string& path) override {
    std::lock_guard<std::mutex> l(mu_);
    return FindMount(mounts_, CleanPath(path)).has_value();
  }
  bool IsStale(const std::string& path) override {
    std::lock_guard<std::mutex> l(mu_);
    return stale_.contains(CleanPath(path));
  }
  Result<std::vector<MountEntry>> ListMounts() override {
    std::lock_guard<std::mutex> l(mu_);
    return mounts_;
  }
  std::string CanonicalPath(const std::string& path) override { return CleanPath(path); }

 private:
  std::mutex mu_;
  std::vector<MountEntry> mounts_;
  std::set<std::string> stale_;
  int next_id_ = 100;
  uint32_t next_minor_ = 50;
};

}  // namespace spoke::node::testing
