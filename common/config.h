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

// A size in bytes as people write it -> bytes. Errors name the text and what is accepted.
//   plain bytes:            "4096", "4096B"
//   powers of two (1024^n): "64KiB", "64Ki", "1MiB", "1Mi", "200GiB", "200Gi", "1TiB", "1Ti"
//   powers of ten (1000^n): "64KB", "64K", "64k", "98MB", "98M", "1GB", "1G", "2TB", "2T"
//                           (the single letters have always been powers of ten, as
//                           Kubernetes' k/M/G/T quantities)
// Units are matched without regard to case ("1gib", "98mb": a size is always bytes, so "b"
// and "B" both mean bytes, and "m" is mega, never milli), with optional blanks around them
// ("1 GiB"). A decimal number takes a unit ("1.5GiB", "0.5T") and is rounded up to a whole
// byte; plain bytes are whole. PB/P/PiB/Pi are accepted too. At most 2^64-1 bytes.
Result<uint64_t> ParseSize(std::string_view text);
// "67108864 bytes (64 MiB)": bytes, with the largest exact binary unit when there is one.
std::string FormatSize(uint64_t bytes);
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
  // Whether `key` is set (not null); the key counts as known to Finish() either way.
  bool Has(std::string_view key);
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
  std::set<std::string> used_;  // keys read (or asked about): known to Finish()
  bool finished_children_ = false;
  std::vector<std::string> unknown_;
};

}  // namespace spoke
