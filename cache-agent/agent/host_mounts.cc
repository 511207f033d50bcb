#include "cache-agent/agent/host_mounts.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace spoke::agent {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::vector<MountEntry> ParseMountInfo(std::string_view text) {
  // 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
  // (id parent dev root mountpoint options [optional fields...] - fstype source superopts)
  std::vector<MountEntry> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    auto f = Fields(line);
    if (f.size() < 7) continue;
    size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    if (sep + 2 >= f.size()) continue;
    out.push_back(MountEntry{Unescape(f[4]), Unescape(f[sep + 1]), Unescape(f[sep + 2])});
  }
  return out;
}

bool IsSpokeFuseMount(const MountEntry& e) {
  if (e.fs_type == "fuse.spoke") return true;
  bool fuse = e.fs_type == "fuse" || e.fs_type.starts_with("fuse.");
  return fuse && e.source.starts_with("spoke");
}

const MountEntry* FindMount(const std::vector<MountEntry>& mounts, const std::string& path) {
  const MountEntry* found = nullptr;
  for (const auto& m : mounts) {
    if (m.mount_point == path) found = &m;
  }
  return found;
}

std::vector<MountEntry> LinuxHostMounts::List() {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseMountInfo(ss.str());
}

bool LinuxHostMounts::IsDisconnected(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) != 0 && errno == ENOTCONN;
}

Status LinuxHostMounts::DetachUnmount(const std::string& path) {
  if (::umount2(path.c_str(), MNT_DETACH) == 0) return Ok();
  int err = errno;
  if (err == EINVAL || err == ENOENT) {
    return Fail(Code::kNotFound, "nothing mounted at " + path);
  }
  return std::unexpected(Error::FromErrno(err, "umount2 " + path + ": " + std::strerror(err)));
}

Result<bool> CleanStaleMount(HostMounts& host, const std::string& path) {
  bool cleaned = false;
  // A stack of dead mounts is possible (a crash loop): unmount until nothing stale is left.
  for (int i = 0; i < 16; ++i) {
    const bool disconnected = host.IsDisconnected(path);
    auto mounts = host.List();
    const MountEntry* top = FindMount(mounts, path);
    const bool spoke = top != nullptr && IsSpokeFuseMount(*top);
    if (!disconnected && !spoke) return cleaned;
    log::Warn("unmounting a stale FUSE mount left by a previous agent",
              {{"target", path}, {"disconnected", disconnected}});
    auto s = host.DetachUnmount(path);
    if (!s) {
      if (s.error().code() == Code::kNotFound) return cleaned;
      return Fail(Code::kIo,
                  "cannot unmount the stale mount at " + path + ": " + s.error().message());
    }
    cleaned = true;
  }
  return Fail(Code::kIo, "still a stale mount at " + path + " after 16 unmounts");
}

}  // namespace spoke::agent
