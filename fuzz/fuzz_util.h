// Helpers shared by the libFuzzer harnesses: turning bytes into the inputs the parsers take,
// and a check that aborts (a finding) when a property does not hold.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/volume.h"

namespace spoke::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// "key=value" lines -> map (a parameter map as the CO sends it; values may hold anything).
inline StringMap AsMap(std::string_view text) {
  StringMap m;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    size_t eq = line.find('=');
    if (eq != std::string_view::npos) m[std::string(line.substr(0, eq))] = line.substr(eq + 1);
    start = end + 1;
  }
  return m;
}

[[noreturn]] inline void Finding(const char* what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  std::abort();
}

#define SPOKE_FUZZ_CHECK(cond)                  \
  do {                                          \
    if (!(cond)) ::spoke::fuzz::Finding(#cond); \
  } while (0)

// Nothing a parser accepted may reach a libnfs URL with a character that starts an option.
inline void CheckUrlSafeFields(const HubAddress& h) {
  SPOKE_FUZZ_CHECK(CheckUrlSafe(h.share, "share").has_value());
  SPOKE_FUZZ_CHECK(h.Validate().has_value());
}

}  // namespace spoke::fuzz
