#include "csi-controller/volume_record.h"

#include <nlohmann/json.hpp>

namespace spoke::controller {

std::string VolumeRecord::Encode() const {
  nlohmann::json j;
  j["spokeVolumeRecord"] = 1;
  j["name"] = name;
  j["volumeId"] = volume_id;
  j["parameters"] = parameters;
  j["capacityBytes"] = capacity_bytes;
  j["createdAt"] = created_at;
  return j.dump(2) + "\n";
}

Result<VolumeRecord> VolumeRecord::Decode(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto bad = [](std::string why) {
    return Fail(Code::kInvalidArgument, "bad volume record: " + why);
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  if (!j.contains("spokeVolumeRecord") || j["spokeVolumeRecord"] != 1)
    return bad("unknown version (expected spokeVolumeRecord: 1)");
  VolumeRecord r;
  if (!j.contains("name") || !j["name"].is_string()) return bad("name missing");
  r.name = j["name"].get<std::string>();
  if (!j.contains("volumeId") || !j["volumeId"].is_string()) return bad("volumeId missing");
  r.volume_id = j["volumeId"].get<std::string>();
  if (!j.contains("parameters") || !j["parameters"].is_object()) return bad("parameters missing");
  for (const auto& [k, v] : j["parameters"].items()) {
    if (!v.is_string()) return bad("parameter " + k + " is not a string");
    r.parameters[k] = v.get<std::string>();
  }
  if (!j.contains("capacityBytes") || !j["capacityBytes"].is_number_integer())
    return bad("capacityBytes missing");
  r.capacity_bytes = j["capacityBytes"].get<int64_t>();
  if (j.contains("createdAt") && j["createdAt"].is_string())
    r.created_at = j["createdAt"].get<std::string>();
  return r;
}

StringMap CanonicalParameters(const VolumeParams& p, const std::string& path,
                              bool explicit_hub_timeout) {
  StringMap m;
  m[std::string(kParamServer)] = p.hub.server;
  m[std::string(kParamShare)] = p.hub.share;
  m[std::string(kParamNfsPort)] = std::to_string(p.hub.nfs_port);
  m[std::string(kParamMountPort)] = std::to_string(p.hub.mount_port);
  m[std::string(kParamMode)] = std::string(ToString(p.mode));
  m[std::string(kParamSubDir)] = p.sub_dir;
  m[std::string(kCtxPath)] = path;
  m[std::string(kParamOnDelete)] = std::string(ToString(p.on_delete));
  m[std::string(kParamConsistency)] = std::string(ToString(p.cache.consistency));
  m[std::string(kParamTtlSeconds)] = std::to_string(p.cache.ttl_seconds);
  m[std::string(kParamPrefetch)] = std::string(ToString(p.cache.prefetch));
  if (explicit_hub_timeout) {
    m[std::string(kParamHubTimeout)] = std::to_string(static_cast<int>(p.hub_timeout_seconds));
  }
  // Only a non-default write mode is written, so records made before it existed still match.
  if (p.write_mode != WriteMode::kWriteBack) {
    m[std::string(kParamWriteMode)] = std::string(ToString(p.write_mode));
  }
  // Only a non-default identity is written, so records made before it existed still match.
  if (p.identity != HubIdentityParams()) {
    m[std::string(kParamHubIdentity)] = std::string(ToString(p.identity.mode));
    m[std::string(kParamHubUid)] = std::to_string(p.identity.uid);
    m[std::string(kParamHubGid)] = std::to_string(p.identity.gid);
    m[std::string(kParamAllowRoot)] = p.identity.allow_root ? "true" : "false";
  }
  return m;
}

}  // namespace spoke::controller
