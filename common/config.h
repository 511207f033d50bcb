// YAML configuration, read and validated once at start-up. A ConfigReader walks one YAML
// map, records the first error with the full field path ("hub.connections: must be 1..64,
// got 0"), and rejects unknown keys, so a typo in a config file is an error and not a
// silently ignored setting.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace YAML {
class Node;
}

namespace spoke {

// "4096", "64Ki", "1Mi", "200Gi", "1G" (SI) -> bytes. Errors name the text.
Result<uint64_t> ParseSize(std::string_view text);
// "30", "30s", "500ms", "2m", "1h" -> seconds (a bare number is seconds).
Result<double> ParseDurationSeconds(std::string_view text);
// Strict integer parse within [min, max].
Result<int64_t> ParseInt(std::string_view text, int64_t min, int64_t max);

class ConfigReader {
 public:
  // Fails with kInvalidArgument naming the file and line on a YAML syntax error, and
  // kNotFound when the file does not exist.
  static Result<ConfigReader> LoadFile(const std::string& path);
  static Result<ConfigReader> LoadString(std::string_view yaml, std::string source);

  ConfigReader(ConfigReader&&) noexcept;
  ConfigReader& operator=(ConfigReader&&) noexcept;
  ~ConfigReader();

  std::string String(std::string_view key, std::string default_value);
  // One of `allowed`.
  std::string Enum(std::string_view key, std::string default_value,
                   const std::vector<std::string>& allowed);
  int64_t Int(std::string_view key, int64_t default_value, int64_t min, int64_t max);
  uint64_t Size(std::string_view key, uint64_t default_value, uint64_t min, uint64_t max);
  double Seconds(std::string_view key, double default_value, double min, double max);
  bool Bool(std::string_view key, bool default_value);
  // A YAML list of scalars; absent -> default_value.
  std::vector<std::string> StringList(std::string_view key, std::vector<std::string> default_value);
  bool Has(std::string_view key) const;
  // A nested map; absent -> an empty map (all defaults).
  ConfigReader Child(std::string_view key);

  // Records an error for `key` found by the caller's own cross-field validation.
  void Reject(std::string_view key, std::string_view why);

  // Checks this map for unknown keys and returns the first error seen in this reader or any
  // reader sharing its file. Call it on every Child() after reading its fields, then on the
  // root last.
  Status Finish();

 private:
  struct Shared;
  ConfigReader(std::shared_ptr<Shared> shared, std::unique_ptr<YAML::Node> node,
               std::string prefix);
  std::optional<std::string> Scalar(std::string_view key);
  std::string Path(std::string_view key) const;

  std::shared_ptr<Shared> shared_;
  std::unique_ptr<YAML::Node> node_;
  std::string prefix_;
  std::set<std::string> used_;
  bool finished_children_ = false;
  std::vector<std::string> unknown_;
};

}  // namespace spoke
