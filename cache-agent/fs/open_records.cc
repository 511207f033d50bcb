#include "cache-agent/fs/open_records.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "common/file_io.h"

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

}  // namespace

Result<std::unique_ptr<OpenRecords>> OpenRecords::Open(const std::string& dir, bool clear) {
  namespace fs = std::filesystem;
  if (dir.empty()) return Fail(Code::kInvalidArgument, "open records: no directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) return Fail(Code::kIo, "cannot create " + dir + ": " + ec.message());
  std::unique_ptr<OpenRecords> r(new OpenRecords(dir));
  if (!clear) return r;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!fs::remove(e.path(), ec) && ec) {
      return Fail(Code::kIo, "cannot remove " + e.path().string() + ": " + ec.message());
    }
  }
  if (ec) return Fail(Code::kIo, "cannot list " + dir + ": " + ec.message());
  return r;
}

std::string OpenRecords::PathOf(uint64_t handle) const {
  char name[32];
  std::snprintf(name, sizeof name, "/%016" PRIx64, handle);
  return dir_ + name;
}

Status OpenRecords::Put(uint64_t handle, const Record& record) {
  return ReplaceFile(PathOf(handle), Encode(record));
}

Status OpenRecords::PutShared(uint64_t handle, const Record& record) {
  const std::string text = Encode(record);
  std::string shared;
  {
    // Named by a count, not a hash of the text: two identities never share a file. An
    // earlier agent's file of the same name is replaced (a new inode): its links keep theirs.
    MutexLock lock(shared_mu_);
    auto it = shared_files_.find(text);
    if (it == shared_files_.end()) {
      shared = dir_ + "/id-" + std::to_string(shared_files_.size());
      SPOKE_RETURN_IF_ERROR(ReplaceFile(shared, text));
      it = shared_files_.emplace(text, shared).first;
    }
    shared = it->second;
  }
  if (::link(shared.c_str(), PathOf(handle).c_str()) == 0) return Ok();
  // Removed under us (or a link limit): the record in a file of its own.
  return Put(handle, record);
}

void OpenRecords::Forget(uint64_t handle) {
  (void)::unlink(PathOf(handle).c_str());
  MarkSettled(handle);
}

void OpenRecords::ForgetShared(uint64_t handle) { (void)::unlink(PathOf(handle).c_str()); }

Status OpenRecords::MarkHeld(uint64_t handle) {
  std::string path = PathOf(handle) + ".held";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "cannot create " + path));
  ::close(fd);
  return Ok();
}

void OpenRecords::MarkSettled(uint64_t handle) {
  (void)::unlink((PathOf(handle) + ".held").c_str());
}

bool OpenRecords::Held(uint64_t handle) const {
  return ::access((PathOf(handle) + ".held").c_str(), F_OK) == 0;
}

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
