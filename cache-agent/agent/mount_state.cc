#include "cache-agent/agent/mount_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace spoke::agent {
namespace {

constexpr int kFormatVersion = 1;

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(Code::kIo, "write " + path + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return Ok();
}

}  // namespace

Result<std::vector<MountRecord>> ReadMountState(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return std::vector<MountRecord>{};
  std::ifstream in(path);
  if (!in) {
    return Fail(Code::kIo, "cannot read " + path + ": " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return Fail(Code::kInvalidArgument, path + ": " + why);
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  if (!j.contains("version") || j["version"] != kFormatVersion) {
    return bad("unknown format version (expected " + std::to_string(kFormatVersion) + ")");
  }
  if (!j.contains("mounts") || !j["mounts"].is_array()) return bad("mounts: expected a list");
  std::vector<MountRecord> out;
  for (size_t i = 0; i < j["mounts"].size(); ++i) {
    const auto& m = j["mounts"][i];
    std::string where = "mounts[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where + ": expected an object");
    MountRecord r;
    if (!m.contains("volumeId") || !m["volumeId"].is_string())
      return bad(where + ".volumeId: expected a string");
    if (!m.contains("targetPath") || !m["targetPath"].is_string())
      return bad(where + ".targetPath: expected a string");
    r.volume_id = m["volumeId"].get<std::string>();
    r.target_path = m["targetPath"].get<std::string>();
    if (m.contains("readOnly")) {
      if (!m["readOnly"].is_boolean()) return bad(where + ".readOnly: expected true or false");
      r.read_only = m["readOnly"].get<bool>();
    }
    if (m.contains("volumeContext")) {
      if (!m["volumeContext"].is_object()) return bad(where + ".volumeContext: expected a map");
      for (const auto& [k, v] : m["volumeContext"].items()) {
        if (!v.is_string()) return bad(where + ".volumeContext." + k + ": expected a string");
        r.volume_context[k] = v.get<std::string>();
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

Status WriteMountState(const std::string& path, const std::vector<MountRecord>& records) {
  nlohmann::json j;
  j["version"] = kFormatVersion;
  j["mounts"] = nlohmann::json::array();
  for (const auto& r : records) {
    nlohmann::json m;
    m["volumeId"] = r.volume_id;
    m["targetPath"] = r.target_path;
    m["readOnly"] = r.read_only;
    m["volumeContext"] = r.volume_context;
    j["mounts"].push_back(std::move(m));
  }
  std::string text = j.dump(2) + "\n";
  std::filesystem::path p(path);
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(Code::kIo, "cannot create " + tmp + ": " + std::strerror(errno));
  Status s = WriteAll(fd, text, tmp);
  if (s && ::fsync(fd) != 0) s = Fail(Code::kIo, "fsync " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  if (!s) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Fail(Code::kIo, "rename " + tmp + " -> " + path + ": " + std::strerror(err));
  }
  // The rename is durable only once the directory is synced.
  int dfd = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Ok();
}

}  // namespace spoke::agent
