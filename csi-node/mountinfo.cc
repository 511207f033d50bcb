#include "csi-node/mountinfo.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace spoke::node {
namespace {

std::vector<std::string_view> SplitSpaces(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::vector<std::string> SplitCommas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

Error Malformed(std::string_view field, std::string_view line) {
  return Error(Code::kInvalidArgument,
               "mountinfo: bad " + std::string(field) + " in line '" + std::string(line) + "'");
}

}  // namespace

bool MountEntry::HasOption(std::string_view option) const {
  for (const auto& o : options) {
    if (o == option) return true;
  }
  return false;
}

bool MountEntry::read_only() const { return HasOption("ro"); }

std::string UnescapeMountPath(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      // Exactly three octal digits follow.
      bool octal = true;
      int v = 0;
      for (size_t k = 1; k <= 3; ++k) {
        if (s[i + k] < '0' || s[i + k] > '7') {
          octal = false;
          break;
        }
        v = v * 8 + (s[i + k] - '0');
      }
      if (octal && v < 256) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

Result<MountEntry> ParseMountInfoLine(std::string_view line) {
  std::vector<std::string_view> f = SplitSpaces(line);
  // At least 6 fixed fields, the "-" separator, fstype and source.
  if (f.size() < 9) return std::unexpected(Malformed("field count", line));
  MountEntry e;
  if (!ParseNumber(f[0], &e.id)) return std::unexpected(Malformed("mount id", line));
  if (!ParseNumber(f[1], &e.parent_id)) return std::unexpected(Malformed("parent id", line));
  size_t colon = f[2].find(':');
  if (colon == std::string_view::npos || !ParseNumber(f[2].substr(0, colon), &e.major) ||
      !ParseNumber(f[2].substr(colon + 1), &e.minor)) {
    return std::unexpected(Malformed("major:minor", line));
  }
  e.root = UnescapeMountPath(f[3]);
  e.mount_point = UnescapeMountPath(f[4]);
  if (e.mount_point.empty() || e.mount_point.front() != '/') {
    return std::unexpected(Malformed("mount point", line));
  }
  e.options = SplitCommas(f[5]);
  size_t i = 6;
  while (i < f.size() && f[i] != "-") e.optional_fields.emplace_back(f[i++]);
  if (i >= f.size()) return std::unexpected(Malformed("separator '-'", line));
  ++i;
  // fstype and source are required; super options may be absent on odd file systems.
  if (f.size() - i < 2) return std::unexpected(Malformed("fields after '-'", line));
  e.fstype = UnescapeMountPath(f[i]);
  e.source = UnescapeMountPath(f[i + 1]);
  if (i + 2 < f.size()) e.super_options = std::string(f[i + 2]);
  return e;
}

Result<std::vector<MountEntry>> ParseMountInfo(std::string_view text) {
  std::vector<MountEntry> out;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    ++line_no;
    start = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    SPOKE_TRY_WRAP(auto e, ParseMountInfoLine(line), "line " + std::to_string(line_no));
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<MountEntry>> ReadMountInfo(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Fail(Code::kIo, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseMountInfo(ss.str());
}

std::optional<MountEntry> FindMount(const std::vector<MountEntry>& mounts,
                                    std::string_view mount_point) {
  std::optional<MountEntry> found;
  for (const auto& m : mounts) {
    if (m.mount_point == mount_point) found = m;
  }
  return found;
}

}  // namespace spoke::node
