// Reading what tests and the processes they run wrote. Header-only, so that unit tests use it
// without linking spoke_test_support.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace spoke::testing {

// The whole file; "" when it cannot be read (then *ok, when given, is false).
inline std::string ReadWholeFile(const std::string& path, bool* ok = nullptr) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ok != nullptr) *ok = static_cast<bool>(in) && !in.bad();
  return ss.str();
}

// The last `max_bytes` of a file (a log, for a failure message), "..." in front when cut.
inline std::string ReadFileTail(const std::string& path, size_t max_bytes) {
  std::string s = ReadWholeFile(path);
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

// `n` bytes of a fixed pseudo-random pattern: the same `seed` gives the same bytes.
inline std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2166136261u ^ static_cast<uint32_t>(seed);
  for (size_t i = 0; i < n; ++i) {
    x = x * 16777619u + 7;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

// Writes `data` to `path`, making its directories.
inline void WriteFileWithDirs(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

// Up to `n` bytes from `fd`: fewer at end of file or on an error.
inline std::string ReadUpTo(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::read(fd, out.data() + got, n - got);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  out.resize(got);
  return out;
}

}  // namespace spoke::testing
