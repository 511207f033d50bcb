// HostMounts: what the agent asks the kernel about mounts (the mount table, a dead FUSE
// endpoint, a lazy unmount), behind an interface so MountManager's restore logic is tested
// without root. LinuxHostMounts is the real one (/proc/self/mountinfo, stat, umount2).
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace spoke::agent {

// One line of /proc/self/mountinfo (the fields the agent needs).
struct MountEntry {
  std::string mount_point;  // unescaped (\040 -> ' ')
  std::string fs_type;      // e.g. "fuse.spoke"
  std::string source;       // e.g. "spoke"
};

// Parses mountinfo text; malformed lines are skipped.
std::vector<MountEntry> ParseMountInfo(std::string_view text);

// A FUSE mount made by a Spoke agent: fstype "fuse.spoke", or "fuse"/"fuse.*" with a source
// starting with "spoke".
bool IsSpokeFuseMount(const MountEntry& entry);

class HostMounts {
 public:
  virtual ~HostMounts() = default;
  virtual std::vector<MountEntry> List() = 0;
  // True when `path` is a FUSE mount whose daemon is gone (stat fails with ENOTCONN).
  virtual bool IsDisconnected(const std::string& path) = 0;
  // umount2(path, MNT_DETACH). kNotFound when nothing is mounted there.
  virtual Status DetachUnmount(const std::string& path) = 0;
};

class LinuxHostMounts : public HostMounts {
 public:
  std::vector<MountEntry> List() override;
  bool IsDisconnected(const std::string& path) override;
  Status DetachUnmount(const std::string& path) override;
};

// What is mounted at `path` (the last, i.e. top, entry), if anything.
const MountEntry* FindMount(const std::vector<MountEntry>& mounts, const std::string& path);

// Cleans a mount left by a dead agent at `path`: a disconnected FUSE endpoint, or a Spoke
// FUSE mount in the table. Returns true when something was unmounted. Errors are kIo.
Result<bool> CleanStaleMount(HostMounts& host, const std::string& path);

}  // namespace spoke::agent
