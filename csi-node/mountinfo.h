// /proc/self/mountinfo, parsed. The kernel's format (proc(5)):
//   36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//   (1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
// Paths escape space, tab, newline and backslash as \040 \011 \012 \134.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace spoke::node {

struct MountEntry {
  int id = 0;
  int parent_id = 0;
  uint32_t major = 0;
  uint32_t minor = 0;
  std::string root;                          // path inside the file system that is mounted here
  std::string mount_point;                   // unescaped, absolute
  std::vector<std::string> options;          // per-mount options: rw|ro, nosuid, nodev, ...
  std::vector<std::string> optional_fields;  // shared:N, master:N, ...
  std::string fstype;                        // "fuse.spoke", "ext4", ...
  std::string source;
  std::string super_options;

  bool read_only() const;
  bool HasOption(std::string_view option) const;
  // Same file system and same directory inside it (a bind mount of the other).
  bool SameTree(const MountEntry& other) const {
    return major == other.major && minor == other.minor && root == other.root;
  }
};

// Decodes the kernel's octal escapes (\040 -> ' '). Unknown escapes are kept verbatim.
std::string UnescapeMountPath(std::string_view s);

// Parses one line. kInvalidArgument naming the field when the line is malformed.
Result<MountEntry> ParseMountInfoLine(std::string_view line);

// Parses a whole file's text; blank lines are skipped, a malformed line is an error
// (kInvalidArgument with its line number).
Result<std::vector<MountEntry>> ParseMountInfo(std::string_view text);

// Reads and parses /proc/self/mountinfo (or `path`). kIo when it cannot be read.
Result<std::vector<MountEntry>> ReadMountInfo(const std::string& path = "/proc/self/mountinfo");

// The last (top-most) entry mounted at `mount_point`, if any. Several mounts can stack on
// one directory; the last one listed is the one a path lookup sees.
std::optional<MountEntry> FindMount(const std::vector<MountEntry>& mounts,
                                    std::string_view mount_point);

}  // namespace spoke::node
