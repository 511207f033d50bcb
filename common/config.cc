#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace spoke {

Result<int64_t> ParseInt(std::string_view text, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return Fail(Code::kInvalidArgument, "expected an integer, got '" + std::string(text) + "'");
  }
  if (v < min || v > max) {
    return Fail(Code::kInvalidArgument, "must be in " + std::to_string(min) + ".." +
                                            std::to_string(max) + ", got " + std::to_string(v));
  }
  return v;
}

Result<uint64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) {
    return Fail(Code::kInvalidArgument, "expected a size like 1048576, 64Ki, 1Mi or 200Gi, got '" +
                                            std::string(text) + "'");
  }
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, n);
  if (ec != std::errc())
    return Fail(Code::kInvalidArgument, "size out of range: " + std::string(text));
  std::string_view unit = text.substr(digits);
  struct Unit {
    std::string_view name;
    uint64_t mult;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"B", 1},
                                    {"Ki", 1ull << 10},
                                    {"Mi", 1ull << 20},
                                    {"Gi", 1ull << 30},
                                    {"Ti", 1ull << 40},
                                    {"K", 1000},
                                    {"k", 1000},
                                    {"M", 1000000},
                                    {"G", 1000000000},
                                    {"T", 1000000000000ull}};
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      if (n > UINT64_MAX / u.mult)
        return Fail(Code::kInvalidArgument, "size out of range: " + std::string(text));
      return n * u.mult;
    }
  }
  return Fail(Code::kInvalidArgument, "unknown size unit '" + std::string(unit) + "' in '" +
                                          std::string(text) + "' (use Ki, Mi, Gi, Ti, K, M, G, T)");
}

Result<double> ParseDurationSeconds(std::string_view text) {
  size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  if (end == 0) {
    return Fail(Code::kInvalidArgument,
                "expected a duration like 30, 30s, 500ms or 2m, got '" + std::string(text) + "'");
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + end, v);
  if (ec != std::errc() || ptr != text.data() + end) {
    return Fail(Code::kInvalidArgument, "bad duration '" + std::string(text) + "'");
  }
  std::string_view unit = text.substr(end);
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v / 1000.0;
  if (unit == "m") return v * 60.0;
  if (unit == "h") return v * 3600.0;
  return Fail(Code::kInvalidArgument,
              "unknown duration unit '" + std::string(unit) + "' (use ms, s, m, h)");
}

struct ConfigReader::Shared {
  std::string source;
  std::optional<Error> first_error;
  void Record(Error e) {
    if (!first_error) first_error = std::move(e);
  }
};

ConfigReader::ConfigReader(std::shared_ptr<Shared> shared, std::unique_ptr<YAML::Node> node,
                           std::string prefix)
    : shared_(std::move(shared)), node_(std::move(node)), prefix_(std::move(prefix)) {}
ConfigReader::ConfigReader(ConfigReader&&) noexcept = default;
ConfigReader& ConfigReader::operator=(ConfigReader&&) noexcept = default;
ConfigReader::~ConfigReader() = default;

Result<ConfigReader> ConfigReader::LoadString(std::string_view yaml, std::string source) {
  auto shared = std::make_shared<Shared>();
  shared->source = source;
  try {
    auto node = std::make_unique<YAML::Node>(YAML::Load(std::string(yaml)));
    if (node->IsNull()) *node = YAML::Node(YAML::NodeType::Map);
    if (!node->IsMap()) {
      return Fail(Code::kInvalidArgument, source + ": the top level must be a map of settings");
    }
    return ConfigReader(shared, std::move(node), "");
  } catch (const YAML::Exception& e) {
    return Fail(Code::kInvalidArgument, source + ": YAML syntax error: " + e.what());
  }
}

Result<ConfigReader> ConfigReader::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Fail(Code::kNotFound, "cannot open config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadString(ss.str(), path);
}

std::string ConfigReader::Path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

void ConfigReader::Reject(std::string_view key, std::string_view why) {
  shared_->Record(
      Error(Code::kInvalidArgument, shared_->source + ": " + Path(key) + ": " + std::string(why)));
}

bool ConfigReader::Has(std::string_view key) const {
  return (*node_)[std::string(key)].IsDefined() && !(*node_)[std::string(key)].IsNull();
}

std::optional<std::string> ConfigReader::Scalar(std::string_view key) {
  used_.insert(std::string(key));
  YAML::Node v = (*node_)[std::string(key)];
  if (!v.IsDefined() || v.IsNull()) return std::nullopt;
  if (!v.IsScalar()) {
    Reject(key, "expected a single value, got a list or map");
    return std::nullopt;
  }
  return v.Scalar();
}

std::string ConfigReader::String(std::string_view key, std::string default_value) {
  auto v = Scalar(key);
  return v ? *v : default_value;
}

std::string ConfigReader::Enum(std::string_view key, std::string default_value,
                               const std::vector<std::string>& allowed) {
  auto v = Scalar(key);
  if (!v) return default_value;
  for (const auto& a : allowed) {
    if (*v == a) return *v;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : " | ") + a;
  Reject(key, "must be one of " + list + ", got '" + *v + "'");
  return default_value;
}

int64_t ConfigReader::Int(std::string_view key, int64_t default_value, int64_t min, int64_t max) {
  auto v = Scalar(key);
  if (!v) return default_value;
  auto r = ParseInt(*v, min, max);
  if (!r) {
    Reject(key, r.error().message());
    return default_value;
  }
  return *r;
}

uint64_t ConfigReader::Size(std::string_view key, uint64_t default_value, uint64_t min,
                            uint64_t max) {
  auto v = Scalar(key);
  if (!v) return default_value;
  auto r = ParseSize(*v);
  if (!r) {
    Reject(key, r.error().message());
    return default_value;
  }
  if (*r < min || *r > max) {
    Reject(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                    " bytes, got " + std::to_string(*r));
    return default_value;
  }
  return *r;
}

double ConfigReader::Seconds(std::string_view key, double default_value, double min, double max) {
  auto v = Scalar(key);
  if (!v) return default_value;
  auto r = ParseDurationSeconds(*v);
  if (!r) {
    Reject(key, r.error().message());
    return default_value;
  }
  if (*r < min || *r > max) {
    Reject(key, "must be between " + std::to_string(min) + "s and " + std::to_string(max) +
                    "s, got " + *v);
    return default_value;
  }
  return *r;
}

bool ConfigReader::Bool(std::string_view key, bool default_value) {
  auto v = Scalar(key);
  if (!v) return default_value;
  if (*v == "true" || *v == "yes" || *v == "on") return true;
  if (*v == "false" || *v == "no" || *v == "off") return false;
  Reject(key, "expected true or false, got '" + *v + "'");
  return default_value;
}

std::vector<std::string> ConfigReader::StringList(std::string_view key,
                                                  std::vector<std::string> default_value) {
  used_.insert(std::string(key));
  YAML::Node v = (*node_)[std::string(key)];
  if (!v.IsDefined() || v.IsNull()) return default_value;
  if (!v.IsSequence()) {
    Reject(key, "expected a list of values");
    return default_value;
  }
  std::vector<std::string> out;
  for (const YAML::Node& e : v) {
    if (!e.IsScalar()) {
      Reject(key, "expected a list of single values, got a nested list or map");
      return default_value;
    }
    out.push_back(e.Scalar());
  }
  return out;
}

ConfigReader ConfigReader::Child(std::string_view key) {
  used_.insert(std::string(key));
  YAML::Node v = (*node_)[std::string(key)];
  auto child = std::make_unique<YAML::Node>(YAML::NodeType::Map);
  if (v.IsDefined() && !v.IsNull()) {
    if (v.IsMap()) {
      *child = v;
    } else {
      Reject(key, "expected a map of settings");
    }
  }
  return ConfigReader(shared_, std::move(child), Path(key));
}

Status ConfigReader::Finish() {
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    // A key may be a list or a map in YAML (`[a]: 1`); only scalar keys name settings.
    if (!it->first.IsScalar()) {
      Reject("<key>", "a setting's name must be a plain word, not a list or map");
      continue;
    }
    const std::string& k = it->first.Scalar();
    if (!used_.contains(k)) Reject(k, "unknown setting");
  }
  if (shared_->first_error) return std::unexpected(*shared_->first_error);
  return {};
}

}  // namespace spoke
