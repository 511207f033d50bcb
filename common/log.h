// Structured logging: one line per event, logfmt (ts=... level=... msg="..." key=value).
//   log::Info("volume mounted", {{"volume", id}, {"target", path}});
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace spoke::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLevel(Level level);
Level GetLevel();
// "debug" | "info" | "warn" | "error"
std::optional<Level> ParseLevel(std::string_view name);

struct Field {
  template <typename T>
  Field(std::string_view k, const T& v) : key(k) {
    if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      value = std::string(std::string_view(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      value = v ? "true" : "false";
    } else {
      value = std::to_string(v);
    }
  }
  std::string key;
  std::string value;
};

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields);
// Formats one line without writing it (for tests).
std::string Format(Level level, std::string_view msg, std::initializer_list<Field> fields);

inline bool Enabled(Level level) { return level >= GetLevel(); }
inline void Debug(std::string_view m, std::initializer_list<Field> f = {}) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, m, f);
}
inline void Info(std::string_view m, std::initializer_list<Field> f = {}) {
  if (Enabled(Level::kInfo)) Write(Level::kInfo, m, f);
}
inline void Warn(std::string_view m, std::initializer_list<Field> f = {}) {
  if (Enabled(Level::kWarn)) Write(Level::kWarn, m, f);
}
inline void Error(std::string_view m, std::initializer_list<Field> f = {}) {
  Write(Level::kError, m, f);
}

}  // namespace spoke::log
