#include "cache-agent/fs/open_records.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace spoke::agent {
namespace {

// "uid gid append group..." on one line: small, and readable by an operator.
std::string Encode(const OpenRecords::Record& r) {
  std::string s =
      std::to_string(r.who.uid) + " " + std::to_string(r.who.gid) + " " + (r.append ? "1" : "0");
  // AUTH_SYS carries at most 16 groups: the hub never sees more.
  for (size_t i = 0; i < r.who.groups.size() && i < 16; ++i) {
    s += " " + std::to_string(r.who.groups[i]);
  }
  return s + "\n";
}

std::optional<OpenRecords::Record> Decode(const std::string& text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;  // not written whole
  std::istringstream in(text);
  OpenRecords::Record r;
  int append = -1;
  if (!(in >> r.who.uid >> r.who.gid >> append) || (append != 0 && append != 1)) {
    return std::nullopt;
  }
  r.append = append == 1;
  uint32_t g;
  while (in >> g) r.who.groups.push_back(g);
  if (!in.eof()) return std::nullopt;
  return r;
}

Error IoError(const std::string& what, const std::string& path) {
  return Error::FromErrno(errno, what + " " + path);
}

}  // namespace

Result<std::unique_ptr<OpenRecords>> OpenRecords::Open(const std::string& dir, bool clear) {
  if (dir.empty()) return Fail(Code::kInvalidArgument, "open records: no directory");
  // Each component: the state directory may be new.
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return std::unexpected(IoError("cannot create", part));
    }
  }
  std::unique_ptr<OpenRecords> r(new OpenRecords(dir));
  if (!clear) return r;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::unexpected(IoError("cannot list", dir));
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string p = dir + "/" + e->d_name;
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      ::closedir(d);
      errno = err;
      return std::unexpected(IoError("cannot remove", p));
    }
  }
  ::closedir(d);
  return r;
}

std::string OpenRecords::PathOf(uint64_t handle) const {
  char name[32];
  std::snprintf(name, sizeof name, "/%016" PRIx64, handle);
  return dir_ + name;
}

Status OpenRecords::Put(uint64_t handle, const Record& record) {
  std::string path = PathOf(handle);
  std::string tmp = path + ".tmp";
  std::string text = Encode(record);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(IoError("cannot create", tmp));
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());
    errno = n < 0 ? err : ENOSPC;
    return std::unexpected(IoError("cannot write", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    return std::unexpected(IoError("cannot rename into place", path));
  }
  return Ok();
}

void OpenRecords::Forget(uint64_t handle) { (void)::unlink(PathOf(handle).c_str()); }

std::optional<OpenRecords::Record> OpenRecords::Find(uint64_t handle) const {
  int fd = ::open(PathOf(handle).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return std::nullopt;
  return Decode(std::string(buf, static_cast<size_t>(n)));
}

}  // namespace spoke::agent
