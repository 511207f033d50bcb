// The content of takeover_testfs's files, shared with the test that checks it.
#pragma once

#include <cstdint>

namespace spoke::testfs {

inline constexpr int64_t kFileSize = 4 << 20;

inline char Pattern(uint64_t offset) {
  return static_cast<char>((offset * 2654435761u >> 7) ^ (offset >> 12));
}

}  // namespace spoke::testfs
