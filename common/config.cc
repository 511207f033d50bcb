#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace spoke {

Result<int64_t> ParseInt(std::string_view text, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return Fail(Code::kInvalidArgument, "expected an integer in " + std::to_string(min) + ".." +
                                            std::to_string(max) + ", got '" + std::string(text) +
                                            "'");
  }
  if (v < min || v > max) {
    return Fail(Code::kInvalidArgument, "must be in " + std::to_string(min) + ".." +
                                            std::to_string(max) + ", got " + std::to_string(v));
  }
  return v;
}

namespace {

constexpr std::string_view kSizeHelp =
    "bytes (1048576) or a number and a unit: KiB/Ki, MiB/Mi, GiB/Gi, TiB/Ti (1024^n); "
    "KB/K/k, MB/M, GB/G, TB/T (1000^n); e.g. 64KiB, 1.5GiB, 98M, 200Gi";

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// The multiplier of a size unit, matched without regard to case; 0 when unknown.
uint64_t SizeUnit(std::string_view unit) {
  std::string u;
  for (char c : unit) u.push_back(Lower(c));
  if (u.empty() || u == "b") return 1;
  static constexpr std::string_view kLetters = "kmgtp";
  if (u.size() > 3) return 0;
  size_t power = kLetters.find(u[0]);
  if (power == std::string_view::npos) return 0;
  std::string_view rest = std::string_view(u).substr(1);
  bool binary = rest == "i" || rest == "ib";
  if (!binary && !rest.empty() && rest != "b") return 0;
  uint64_t mult = 1;
  for (size_t i = 0; i <= power; ++i) mult *= binary ? 1024 : 1000;
  return mult;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  std::string_view t = text;
  while (!t.empty() && IsSpace(t.front())) t.remove_prefix(1);
  while (!t.empty() && IsSpace(t.back())) t.remove_suffix(1);
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  if (digits == 0) {
    return Fail(Code::kInvalidArgument,
                "expected a size: " + std::string(kSizeHelp) + "; got " + quoted);
  }
  std::string_view whole = t.substr(0, digits);
  std::string_view fraction;
  size_t end = digits;
  if (end < t.size() && t[end] == '.') {
    size_t f = end + 1;
    while (f < t.size() && t[f] >= '0' && t[f] <= '9') ++f;
    fraction = t.substr(end + 1, f - end - 1);
    if (fraction.empty()) {
      return Fail(Code::kInvalidArgument, "expected digits after the '.' in " + quoted);
    }
    end = f;
  }
  std::string_view unit = t.substr(end);
  while (!unit.empty() && IsSpace(unit.front())) unit.remove_prefix(1);
  const uint64_t mult = SizeUnit(unit);
  if (mult == 0) {
    return Fail(Code::kInvalidArgument, "unknown size unit '" + std::string(unit) + "' in " +
                                            quoted + " (use " + std::string(kSizeHelp) + ")");
  }
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), n);
  if (ec != std::errc() || n > UINT64_MAX / mult) {
    return Fail(Code::kInvalidArgument, "size out of range (at most 16 EiB): " + quoted);
  }
  uint64_t bytes = n * mult;
  if (!fraction.empty()) {
    if (mult == 1) {
      return Fail(Code::kInvalidArgument, "a size in bytes must be a whole number, got " + quoted +
                                              " (a fraction needs a unit, e.g. 1.5GiB)");
    }
    // fraction * mult / 10^digits, rounded up to a whole byte (as Kubernetes does). 18
    // digits are exact in 64 bits; any further non-zero digit only rounds up.
    const bool more = fraction.size() > 18 &&
                      fraction.substr(18).find_first_not_of('0') != std::string_view::npos;
    if (fraction.size() > 18) fraction = fraction.substr(0, 18);
    uint64_t f = 0;
    std::from_chars(fraction.data(), fraction.data() + fraction.size(), f);
    unsigned __int128 scale = 1;
    for (size_t i = 0; i < fraction.size(); ++i) scale *= 10;
    const unsigned __int128 num = static_cast<unsigned __int128>(f) * mult;
    const unsigned __int128 part = num / scale + (num % scale != 0 || more ? 1 : 0);
    if (part > UINT64_MAX - bytes) {
      return Fail(Code::kInvalidArgument, "size out of range (at most 16 EiB): " + quoted);
    }
    bytes += static_cast<uint64_t>(part);
  }
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr std::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  std::string out = std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  int unit = -1;
  uint64_t v = bytes;
  while (v != 0 && v % 1024 == 0 && unit + 1 < 5) {
    v /= 1024;
    ++unit;
  }
  if (unit >= 0) out += " (" + std::to_string(v) + " " + std::string(kUnits[unit]) + ")";
  return out;
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

namespace {

// Levenshtein distance, case-insensitive: "did you mean" for a mistyped key.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (Lower(a[i - 1]) == Lower(b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown setting; did you mean cacheSizeBytes? (known here: a, b, c)".
std::string UnknownKeyMessage(const std::string& key, const std::set<std::string>& known) {
  std::string msg = "unknown setting";
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const std::string& k : known) {
    size_t d = EditDistance(key, k);
    // A prefix ("cacheSize" for "cacheSizeBytes") or a few typos away.
    if (k.size() > key.size() && Lower(k[0]) == Lower(key[0]) &&
        EditDistance(key, k.substr(0, key.size())) == 0) {
      d = std::min<size_t>(d, 1);
    }
    if (d <= std::max<size_t>(2, key.size() / 4) && (best == nullptr || d < best_distance)) {
      best = &k;
      best_distance = d;
    }
  }
  if (best != nullptr) msg += "; did you mean " + *best + "?";
  if (!known.empty()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    msg += " (known here: " + list + ")";
  }
  return msg;
}

}  // namespace

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

bool ConfigReader::Has(std::string_view key) {
  used_.insert(std::string(key));
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
    std::string range = max == UINT64_MAX
                            ? "at least " + FormatSize(min)
                            : "between " + FormatSize(min) + " and " + FormatSize(max);
    Reject(key, "must be " + range + ", got '" + *v + "' = " + FormatSize(*r));
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
    if (!used_.contains(k)) Reject(k, UnknownKeyMessage(k, used_));
  }
  if (shared_->first_error) return std::unexpected(*shared_->first_error);
  return {};
}

}  // namespace spoke
