#include "common/volume.h"

#include <vector>

#include "common/config.h"

namespace spoke {
namespace {

Error Invalid(std::string_view param, std::string_view why) {
  return Error(Code::kInvalidArgument, "parameter " + std::string(param) + ": " + std::string(why));
}

std::string Get(const StringMap& m, std::string_view key, std::string def = "") {
  auto it = m.find(std::string(key));
  return it == m.end() ? def : it->second;
}

Result<uint16_t> ParsePort(const StringMap& m, std::string_view key, uint16_t def,
                           bool allow_zero) {
  auto it = m.find(std::string(key));
  if (it == m.end() || it->second.empty()) return def;
  auto v = ParseInt(it->second, allow_zero ? 0 : 1, 65535);
  if (!v) return std::unexpected(Invalid(key, v.error().message()));
  return static_cast<uint16_t>(*v);
}

// Host names and IP literals only: the id codec uses '|' and URLs use '/', '?', '&'.
Status CheckServer(std::string_view server) {
  if (server.empty())
    return std::unexpected(Invalid(kParamServer, "is required (the hub's host name or IP)"));
  if (server.size() > 253)
    return std::unexpected(Invalid(
        kParamServer,
        "must be at most 253 characters (a DNS name), got " + std::to_string(server.size())));
  // An IPv6 literal is written [addr]: a bare ':' would read as a port in the libnfs URL.
  bool bracketed = server.size() > 2 && server.front() == '[' && server.back() == ']';
  std::string_view inner = bracketed ? server.substr(1, server.size() - 2) : server;
  for (char c : inner) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || (bracketed && c == ':');
    if (!ok) {
      return std::unexpected(Invalid(
          kParamServer, "'" + std::string(server) +
                            "' is not a host name or IP address (an IPv6 one is written [addr])"));
    }
  }
  return {};
}

Status CheckShare(std::string_view share) {
  if (share.empty())
    return std::unexpected(Invalid(kParamShare, "is required (the export path, e.g. /srv/data)"));
  if (share.front() != '/') {
    return std::unexpected(
        Invalid(kParamShare, "must be an absolute export path, got '" + std::string(share) + "'"));
  }
  if (auto s = CheckUrlSafe(share, kParamShare); !s) return s;
  SPOKE_TRY(auto rel, NormalizeRelativePath(share.substr(1), kParamShare));
  if ("/" + rel != share && !(share == "/" && rel.empty())) {
    return std::unexpected(Invalid(
        kParamShare,
        "must be a normalised path (no trailing or double '/'), got '" + std::string(share) + "'"));
  }
  return {};
}

template <typename E>
Result<E> ParseEnum(const StringMap& m, std::string_view key, E def,
                    std::initializer_list<std::pair<std::string_view, E>> values) {
  auto it = m.find(std::string(key));
  if (it == m.end() || it->second.empty()) return def;
  std::string list;
  for (const auto& [name, v] : values) {
    if (it->second == name) return v;
    list += (list.empty() ? "" : " | ") + std::string(name);
  }
  return std::unexpected(Invalid(key, "must be " + list + ", got '" + it->second + "'"));
}

Result<CacheParams> ParseCacheParams(const StringMap& m, Consistency default_consistency) {
  CacheParams c;
  SPOKE_TRY(c.consistency, ParseEnum<Consistency>(m, kParamConsistency, default_consistency,
                                                  {{"immutable", Consistency::kImmutable},
                                                   {"ttl", Consistency::kTtl},
                                                   {"strict", Consistency::kStrict}}));
  auto ttl = m.find(std::string(kParamTtlSeconds));
  if (ttl != m.end() && !ttl->second.empty()) {
    auto v = ParseInt(ttl->second, 1, 86400);
    if (!v) return std::unexpected(Invalid(kParamTtlSeconds, v.error().message()));
    c.ttl_seconds = static_cast<uint32_t>(*v);
  }
  SPOKE_TRY(c.prefetch, ParseEnum<PrefetchMode>(m, kParamPrefetch, PrefetchMode::kAuto,
                                                {{"off", PrefetchMode::kOff},
                                                 {"readahead", PrefetchMode::kReadAhead},
                                                 {"auto", PrefetchMode::kAuto}}));
  return c;
}

Result<HubIdentityParams> ParseIdentity(const StringMap& m) {
  HubIdentityParams id;
  SPOKE_TRY(id.mode, ParseEnum<HubIdentity>(
                         m, kParamHubIdentity, HubIdentity::kCaller,
                         {{"caller", HubIdentity::kCaller}, {"fixed", HubIdentity::kFixed}}));
  // 4294967295 is (uid_t)-1, "no change" to chown and never a real identity.
  for (auto [key, field] : {std::pair{kParamHubUid, &id.uid}, {kParamHubGid, &id.gid}}) {
    auto it = m.find(std::string(key));
    if (it == m.end() || it->second.empty()) continue;
    auto v = ParseInt(it->second, 0, 4294967294LL);
    if (!v) return std::unexpected(Invalid(key, v.error().message()));
    *field = static_cast<uint32_t>(*v);
  }
  std::string allow = Get(m, kParamAllowRoot, "false");
  if (allow != "true" && allow != "false") {
    return std::unexpected(Invalid(kParamAllowRoot, "must be true | false, got '" + allow + "'"));
  }
  id.allow_root = allow == "true";
  if (!id.allow_root && (id.uid == 0 || id.gid == 0)) {
    return std::unexpected(
        Invalid(id.uid == 0 ? kParamHubUid : kParamHubGid,
                "0 is root on the hub; set allowRoot: \"true\" as well to send requests as root"));
  }
  return id;
}

Result<double> ParseHubTimeout(const StringMap& m) {
  auto it = m.find(std::string(kParamHubTimeout));
  if (it == m.end() || it->second.empty()) return 10.0;
  auto v = ParseInt(it->second, 1, 600);
  if (!v) return std::unexpected(Invalid(kParamHubTimeout, v.error().message()));
  return static_cast<double>(*v);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

}  // namespace

std::string_view ToString(VolumeMode m) {
  return m == VolumeMode::kDataset ? "dataset" : "scratch";
}
std::string_view ToString(OnDelete d) {
  switch (d) {
    case OnDelete::kDelete:
      return "delete";
    case OnDelete::kRetain:
      return "retain";
    case OnDelete::kArchive:
      return "archive";
  }
  return "retain";
}
std::string_view ToString(Consistency c) {
  switch (c) {
    case Consistency::kImmutable:
      return "immutable";
    case Consistency::kTtl:
      return "ttl";
    case Consistency::kStrict:
      return "strict";
  }
  return "strict";
}
std::string_view ToString(PrefetchMode p) {
  switch (p) {
    case PrefetchMode::kOff:
      return "off";
    case PrefetchMode::kReadAhead:
      return "readahead";
    case PrefetchMode::kAuto:
      return "auto";
  }
  return "auto";
}

std::string_view ToString(HubIdentity i) { return i == HubIdentity::kFixed ? "fixed" : "caller"; }
std::string_view ToString(WriteMode w) {
  switch (w) {
    case WriteMode::kSync:
      return "sync";
    case WriteMode::kWriteBack:
      return "writeback";
    case WriteMode::kUnstable:
      return "unstable";
  }
  return "writeback";
}

std::string_view ToString(NfsVersion v) { return v == NfsVersion::kV41 ? "4.1" : "3"; }

namespace {
// "3" or "4.1"; `what` names the field in the error.
Result<NfsVersion> ParseNfsVersion(std::string_view v, std::string_view what) {
  if (v == "3") return NfsVersion::kV3;
  if (v == "4.1") return NfsVersion::kV41;
  std::string why = std::string(what) + ": must be 3 or 4.1, got '" + std::string(v) + "'";
  if (v == "4" || v == "4.0") {
    why +=
        " (NFSv4.0 is not supported: its writes need open state that the v4 client does "
        "not keep; Amazon EFS and current NAS speak 4.1)";
  }
  return std::unexpected(Error(Code::kInvalidArgument, why));
}
}  // namespace

std::pair<uint32_t, uint32_t> HubIdentityParams::ForCaller(uint32_t caller_uid,
                                                           uint32_t caller_gid) const {
  if (mode == HubIdentity::kFixed) return {uid, gid};
  if (caller_uid == 0 && !allow_root) return {uid, gid};
  return {caller_uid, caller_gid};
}

Status CheckUrlSafe(std::string_view value, std::string_view what) {
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == ' ') {
      // A space is shown; control characters are not echoed (logs, terminals).
      return std::unexpected(Invalid(
          what, c == ' ' ? "contains a space, which is not allowed, in '" + std::string(value) + "'"
                         : std::string("contains a control character, which is not allowed")));
    }
    if (c == '?' || c == '&' || c == '=' || c == '#' || c == '%') {
      return std::unexpected(Invalid(what, std::string("contains '") + c +
                                               "', which would be read as a URL option or "
                                               "escape; ? & = # % are not allowed"));
    }
  }
  return {};
}

Status HubAddress::Validate() const {
  if (auto s = CheckServer(server); !s) return s;
  return CheckShare(share);
}

std::string HubAddress::NfsUrl() const {
  std::string url = "nfs://" + server + share + "?version=" + std::string(ToString(nfs_version)) +
                    "&nfsport=" + std::to_string(nfs_port);
  if (mount_port != 0) url += "&mountport=" + std::to_string(mount_port);
  return url;
}

Result<std::string> NormalizeRelativePath(std::string_view path, std::string_view what) {
  if (path.empty()) return std::string();
  if (path.size() > 1024) {
    return std::unexpected(
        Invalid(what, "must be at most 1024 characters, got " + std::to_string(path.size())));
  }
  if (path.front() == '/') {
    return std::unexpected(
        Invalid(what, "must be relative to the share, got absolute '" + std::string(path) + "'"));
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') {
      return std::unexpected(Invalid(what, "contains a control character or backslash"));
    }
    // '|' separates the volume id's fields: a path holding one would give an id that no
    // longer decodes, and DeleteVolume could never find the volume again.
    if (c == '|') return std::unexpected(Invalid(what, "contains '|', which volume ids reserve"));
  }
  std::string_view trimmed = path;
  if (trimmed.back() == '/') trimmed.remove_suffix(1);
  for (std::string_view part : Split(trimmed, '/')) {
    if (part.empty() || part == ".") {
      return std::unexpected(
          Invalid(what, "has an empty or '.' path component in '" + std::string(path) + "'"));
    }
    if (part == "..") {
      return std::unexpected(
          Invalid(what, "'..' would escape the share in '" + std::string(path) + "'"));
    }
    if (part.size() > 255)
      return std::unexpected(
          Invalid(what, "each path component must be at most 255 characters, got " +
                            std::to_string(part.size())));
  }
  return std::string(trimmed);
}

Result<std::string> NormalizePathInVolume(std::string_view path, std::string_view what) {
  if (path.size() > 1024) {
    return std::unexpected(
        Invalid(what, "must be at most 1024 characters, got " + std::to_string(path.size())));
  }
  for (char c : path) {  // before any message quotes the path
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return std::unexpected(Invalid(what, "contains a control character"));
    }
  }
  const bool absolute = !path.empty() && path.front() == '/';
  std::string joined;
  for (std::string_view part : Split(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      return std::unexpected(Invalid(
          what, "'..' is not allowed (a path in the volume never goes above its root), got '" +
                    std::string(path) + "'"));
    }
    if (absolute) {
      return std::unexpected(
          Invalid(what,
                  "must be relative to the volume root (e.g. train or train/cats; \"/\" or \".\" "
                  "is the whole volume), got absolute '" +
                      std::string(path) + "'"));
    }
    if (!joined.empty()) joined.push_back('/');
    joined.append(part);
  }
  // The same checks as every relative path ("..", characters, lengths), on the tidy form.
  return NormalizeRelativePath(joined, what);
}

Result<VolumeParams> ParseVolumeParams(const StringMap& params) {
  static const std::vector<std::string_view> kKnown = {
      kParamServer,     kParamShare,       kParamNfsPort,     kParamMountPort,  kParamMode,
      kParamSubDir,     kParamOnDelete,    kParamConsistency, kParamTtlSeconds, kParamPrefetch,
      kParamHubTimeout, kParamHubIdentity, kParamHubUid,      kParamHubGid,     kParamAllowRoot,
      kParamWriteMode,  kParamNfsVersion};
  for (const auto& [k, v] : params) {
    if (k.starts_with("csi.storage.k8s.io/")) continue;
    bool known = false;
    for (auto name : kKnown) known = known || k == name;
    if (!known) {
      return std::unexpected(
          Error(Code::kInvalidArgument,
                "unknown StorageClass parameter '" + k +
                    "' (known: server, share, nfsPort, mountPort, mode, subDir, "
                    "onDelete, consistency, ttlSeconds, prefetch, hubTimeoutSeconds, "
                    "hubIdentity, hubUid, hubGid, allowRoot, writeMode, nfsVersion)"));
    }
  }
  VolumeParams p;
  p.hub.server = Get(params, kParamServer);
  SPOKE_RETURN_IF_ERROR(CheckServer(p.hub.server));
  p.hub.share = Get(params, kParamShare);
  SPOKE_RETURN_IF_ERROR(CheckShare(p.hub.share));
  SPOKE_TRY(p.hub.nfs_port, ParsePort(params, kParamNfsPort, 2049, false));
  SPOKE_TRY(p.hub.mount_port, ParsePort(params, kParamMountPort, 0, true));
  if (auto v = Get(params, kParamNfsVersion); !v.empty()) {
    SPOKE_TRY(p.hub.nfs_version, ParseNfsVersion(v, kParamNfsVersion));
  }
  if (p.hub.nfs_version != NfsVersion::kV3 && p.hub.mount_port != 0) {
    return std::unexpected(Invalid(kParamMountPort,
                                   "NFSv4 has no MOUNT protocol: give nfsPort "
                                   "only, or nfsVersion \"3\""));
  }

  SPOKE_TRY(p.mode, ParseEnum<VolumeMode>(
                        params, kParamMode, VolumeMode::kScratch,
                        {{"dataset", VolumeMode::kDataset}, {"scratch", VolumeMode::kScratch}}));

  SPOKE_TRY(p.on_delete, ParseEnum<OnDelete>(
                             params, kParamOnDelete,
                             p.mode == VolumeMode::kDataset ? OnDelete::kRetain : OnDelete::kDelete,
                             {{"delete", OnDelete::kDelete},
                              {"retain", OnDelete::kRetain},
                              {"archive", OnDelete::kArchive}}));
  if (p.mode == VolumeMode::kDataset && p.on_delete != OnDelete::kRetain) {
    return std::unexpected(Invalid(
        kParamOnDelete, "a dataset volume is never deleted or archived by Spoke; use retain"));
  }

  if (p.mode == VolumeMode::kScratch) {
    p.sub_dir = Get(params, kParamSubDir, "${pv.metadata.name}");
    SPOKE_RETURN_IF_ERROR(CheckUrlSafe(p.sub_dir, kParamSubDir));
    if (p.sub_dir.empty()) {
      return std::unexpected(
          Invalid(kParamSubDir, "a scratch volume needs a sub-directory of its own"));
    }
    // Validate the template's shape now (variables known, no escape) with sample values.
    StringMap sample = {{std::string(kMetaPvcName), "pvc"},
                        {std::string(kMetaPvcNamespace), "ns"},
                        {std::string(kMetaPvName), "pv"}};
    SPOKE_RETURN_IF_ERROR(ExpandSubDir(p.sub_dir, sample, "pv"));
  } else {
    SPOKE_RETURN_IF_ERROR(CheckUrlSafe(Get(params, kParamSubDir), kParamSubDir));
    SPOKE_TRY(auto fixed, NormalizeRelativePath(Get(params, kParamSubDir), kParamSubDir));
    if (Get(params, kParamSubDir).find("${") != std::string::npos) {
      return std::unexpected(Invalid(
          kParamSubDir, "a dataset volume names a fixed directory; templates are for scratch"));
    }
    p.sub_dir = fixed;
  }

  SPOKE_TRY(p.cache,
            ParseCacheParams(params, p.mode == VolumeMode::kDataset ? Consistency::kImmutable
                                                                    : Consistency::kStrict));
  if (p.mode == VolumeMode::kScratch && p.cache.consistency == Consistency::kImmutable) {
    return std::unexpected(Invalid(
        kParamConsistency,
        "immutable is for dataset volumes; a scratch volume is written, use ttl or strict"));
  }
  SPOKE_TRY(p.hub_timeout_seconds, ParseHubTimeout(params));
  SPOKE_TRY(p.identity, ParseIdentity(params));
  SPOKE_TRY(p.write_mode, ParseEnum<WriteMode>(params, kParamWriteMode, WriteMode::kWriteBack,
                                               {{"sync", WriteMode::kSync},
                                                {"writeback", WriteMode::kWriteBack},
                                                {"unstable", WriteMode::kUnstable}}));
  return p;
}

Result<std::string> ExpandSubDir(std::string_view tmpl, const StringMap& params,
                                 std::string_view volume_name) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl.compare(i, 2, "${") != 0) {
      out.push_back(tmpl[i++]);
      continue;
    }
    size_t end = tmpl.find('}', i);
    if (end == std::string_view::npos) {
      return std::unexpected(
          Invalid(kParamSubDir, "unterminated '${' in '" + std::string(tmpl) + "'"));
    }
    std::string_view var = tmpl.substr(i + 2, end - i - 2);
    std::string value;
    if (var == "pvc.metadata.name") {
      value = Get(params, kMetaPvcName);
    } else if (var == "pvc.metadata.namespace") {
      value = Get(params, kMetaPvcNamespace);
    } else if (var == "pv.metadata.name") {
      value = Get(params, kMetaPvName, std::string(volume_name));
    } else {
      return std::unexpected(
          Invalid(kParamSubDir, "unknown variable ${" + std::string(var) +
                                    "} (known: ${pvc.metadata.name}, "
                                    "${pvc.metadata.namespace}, ${pv.metadata.name})"));
    }
    if (value.empty()) {
      return std::unexpected(
          Invalid(kParamSubDir, "${" + std::string(var) +
                                    "} is not known for this request (run "
                                    "csi-provisioner with --extra-create-metadata)"));
    }
    if (value.find('/') != std::string::npos || value == ".." || value == ".") {
      return std::unexpected(Invalid(kParamSubDir, "${" + std::string(var) + "} expands to '" +
                                                       value + "', which is not a plain name"));
    }
    out += value;
    i = end + 1;
  }
  SPOKE_RETURN_IF_ERROR(CheckUrlSafe(out, kParamSubDir));
  SPOKE_TRY(auto norm, NormalizeRelativePath(out, kParamSubDir));
  if (norm.empty()) return std::unexpected(Invalid(kParamSubDir, "expands to the share root"));
  return norm;
}

VolumeContext MakeVolumeContext(const VolumeParams& params, std::string path) {
  VolumeContext c;
  c.hub = params.hub;
  c.mode = params.mode;
  c.path = std::move(path);
  c.cache = params.cache;
  c.hub_timeout_seconds = params.hub_timeout_seconds;
  c.identity = params.identity;
  c.write_mode = params.write_mode;
  return c;
}

StringMap VolumeContext::ToMap() const {
  StringMap m;
  m[std::string(kParamServer)] = hub.server;
  m[std::string(kParamShare)] = hub.share;
  m[std::string(kParamNfsPort)] = std::to_string(hub.nfs_port);
  m[std::string(kParamMountPort)] = std::to_string(hub.mount_port);
  m[std::string(kParamMode)] = std::string(ToString(mode));
  m[std::string(kCtxPath)] = path;
  m[std::string(kParamConsistency)] = std::string(ToString(cache.consistency));
  m[std::string(kParamTtlSeconds)] = std::to_string(cache.ttl_seconds);
  m[std::string(kParamPrefetch)] = std::string(ToString(cache.prefetch));
  m[std::string(kParamHubTimeout)] = std::to_string(static_cast<int>(hub_timeout_seconds));
  m[std::string(kParamHubIdentity)] = std::string(ToString(identity.mode));
  m[std::string(kParamHubUid)] = std::to_string(identity.uid);
  m[std::string(kParamHubGid)] = std::to_string(identity.gid);
  m[std::string(kParamAllowRoot)] = identity.allow_root ? "true" : "false";
  if (hub.nfs_version != NfsVersion::kV3) {
    m[std::string(kParamNfsVersion)] = std::string(ToString(hub.nfs_version));
  }
  m[std::string(kParamWriteMode)] = std::string(ToString(write_mode));
  if (mount_group) m[std::string(kCtxMountGroup)] = std::to_string(*mount_group);
  return m;
}

Result<VolumeContext> VolumeContext::FromMap(const StringMap& ctx) {
  // The volume context is the StorageClass parameters plus `path`, minus the template.
  StringMap params;
  std::string path;
  bool has_path = false;
  std::optional<uint32_t> mount_group;
  for (const auto& [k, v] : ctx) {
    if (k == kCtxMountGroup) {
      auto g = ParseInt(v, 0, 4294967294LL);
      if (!g) return std::unexpected(Invalid(kCtxMountGroup, g.error().message()));
      mount_group = static_cast<uint32_t>(*g);
    } else if (k == kCtxPath) {
      path = v;
      has_path = true;
    } else if (k == kParamSubDir) {
      if (!has_path) path = v;
    } else if (k == kParamOnDelete || k.starts_with("csi.storage.k8s.io/")) {
      // Provisioner / kubelet metadata (pod info on mount) is not ours to validate.
    } else if (k.find('/') != std::string::npos) {
      continue;
    } else {
      params[k] = v;
    }
  }
  // A context never carries a template: validate it as a fixed path.
  SPOKE_RETURN_IF_ERROR(CheckUrlSafe(path, has_path ? kCtxPath : kParamSubDir));
  SPOKE_TRY(auto norm, NormalizeRelativePath(path, has_path ? kCtxPath : kParamSubDir));
  params[std::string(kParamSubDir)] = norm;
  VolumeMode mode =
      Get(params, kParamMode) == "scratch" ? VolumeMode::kScratch : VolumeMode::kDataset;
  // Parse as a dataset (fixed path) so the scratch template rules do not apply.
  StringMap as_dataset = params;
  as_dataset[std::string(kParamMode)] = "dataset";
  if (mode == VolumeMode::kScratch && !as_dataset.contains(std::string(kParamConsistency))) {
    as_dataset[std::string(kParamConsistency)] = "strict";
  }
  SPOKE_TRY(auto p, ParseVolumeParams(as_dataset));
  if (Get(params, kParamMode) != "" && Get(params, kParamMode) != "dataset" &&
      Get(params, kParamMode) != "scratch") {
    return std::unexpected(
        Invalid(kParamMode, "must be dataset | scratch, got '" + Get(params, kParamMode) + "'"));
  }
  VolumeContext c = MakeVolumeContext(p, norm);
  c.mode = mode;
  c.mount_group = mount_group;
  return c;
}

namespace {

std::string IdentityField(const HubIdentityParams& id) {
  if (id.allow_root) return "|root";
  if (id.uid == HubIdentityParams().uid && id.gid == HubIdentityParams().gid) return "";
  return "|" + std::to_string(id.uid) + ":" + std::to_string(id.gid);
}

// NFSv4.1 has no MOUNT protocol: its volumes carry "nfs4.1" where v3 ones have the MOUNT
// port, so an id names the protocol DeleteVolume must speak without a field of its own.
constexpr std::string_view kNfs41MountField = "nfs4.1";
std::string MountPortField(const HubAddress& hub) {
  if (hub.nfs_version == NfsVersion::kV41) return std::string(kNfs41MountField);
  return std::to_string(hub.mount_port);
}

}  // namespace

std::string VolumeId::Encode() const {
  return "spoke1|" + std::string(ToString(mode)) + "|" + std::string(ToString(on_delete)) + "|" +
         hub.server + "|" + std::to_string(hub.nfs_port) + "|" + MountPortField(hub) + "|" +
         hub.share + "|" + path + IdentityField(identity);
}

Result<VolumeId> VolumeId::Decode(std::string_view id) {
  auto bad = [&](std::string why) {
    return std::unexpected(
        Error(Code::kInvalidArgument, "malformed volume id '" + std::string(id) + "': " + why));
  };
  if (id.size() > 2048) return bad("longer than 2048 bytes");
  auto parts = Split(id, '|');
  if (parts.size() != 8 && parts.size() != 9)
    return bad("expected 8 or 9 '|'-separated fields, got " + std::to_string(parts.size()));
  if (parts[0] != "spoke1")
    return bad("unknown version '" + std::string(parts[0]) + "' (expected spoke1)");
  VolumeId v;
  const bool nfs41 = parts[5] == kNfs41MountField;
  StringMap m = {{std::string(kParamServer), std::string(parts[3])},
                 {std::string(kParamShare), std::string(parts[6])},
                 {std::string(kParamNfsPort), std::string(parts[4])},
                 {std::string(kParamMountPort), nfs41 ? "0" : std::string(parts[5])}};
  // Ports are always written: an empty field would decode to a default and re-encode to
  // a different id.
  if (parts[4].empty() || parts[5].empty()) return bad("empty port field");
  if (auto s = CheckServer(parts[3]); !s) return bad(s.error().message());
  if (auto s = CheckShare(parts[6]); !s) return bad(s.error().message());
  auto nfs = ParsePort(m, kParamNfsPort, 2049, false);
  if (!nfs) return bad(nfs.error().message());
  auto mnt = ParsePort(m, kParamMountPort, 0, true);
  if (!mnt) return bad(mnt.error().message());
  if (parts[1] == "dataset")
    v.mode = VolumeMode::kDataset;
  else if (parts[1] == "scratch")
    v.mode = VolumeMode::kScratch;
  else
    return bad("unknown mode '" + std::string(parts[1]) + "'");
  if (parts[2] == "delete")
    v.on_delete = OnDelete::kDelete;
  else if (parts[2] == "retain")
    v.on_delete = OnDelete::kRetain;
  else if (parts[2] == "archive")
    v.on_delete = OnDelete::kArchive;
  else
    return bad("unknown onDelete '" + std::string(parts[2]) + "'");
  if (auto s = CheckUrlSafe(parts[7], "path"); !s) return bad(s.error().message());
  auto path = NormalizeRelativePath(parts[7], "path");
  if (!path) return bad(path.error().message());
  if (v.mode == VolumeMode::kScratch && path->empty())
    return bad("a scratch volume cannot be the share root");
  v.hub = HubAddress{std::string(parts[3]), *nfs, *mnt, std::string(parts[6])};
  if (nfs41) v.hub.nfs_version = NfsVersion::kV41;
  v.path = *path;
  if (parts.size() == 9) {
    if (parts[8] == "root") {
      v.identity.allow_root = true;
    } else {
      size_t colon = parts[8].find(':');
      auto uid = ParseInt(parts[8].substr(0, colon), 1, 4294967294LL);
      auto gid = colon == std::string_view::npos
                     ? uid
                     : ParseInt(parts[8].substr(colon + 1), 1, 4294967294LL);
      if (colon == std::string_view::npos || !uid || !gid)
        return bad("identity field must be root or <uid>:<gid> (not 0)");
      v.identity.uid = static_cast<uint32_t>(*uid);
      v.identity.gid = static_cast<uint32_t>(*gid);
    }
    // One spelling per id: the default identity is written as no field.
    if (IdentityField(v.identity).empty()) return bad("identity field holds the default");
  }
  return v;
}

std::string VolumeMetricsLabel(std::string_view volume_id) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64: stable across builds and restarts
  for (char c : volume_id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "v";
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(kHex[(h >> shift) & 0xf]);
  return out;
}

Result<HubAddress> ParseNfsUrl(std::string_view url) {
  auto bad = [&](std::string why) {
    return std::unexpected(
        Error(Code::kInvalidArgument, "bad NFS URL '" + std::string(url) + "': " + why));
  };
  if (!url.starts_with("nfs://")) return bad("must start with nfs://");
  std::string_view rest = url.substr(6);
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("no export path after the server");
  std::string_view hostport = rest.substr(0, slash);
  std::string_view path_query = rest.substr(slash);
  std::string_view path = path_query.substr(0, path_query.find('?'));
  std::string_view query =
      path_query.size() > path.size() ? path_query.substr(path.size() + 1) : "";
  HubAddress h;
  size_t colon = hostport.rfind(':');
  if (colon != std::string_view::npos && !hostport.ends_with(']')) {
    auto p = ParseInt(hostport.substr(colon + 1), 1, 65535);
    if (!p) return bad("port: " + p.error().message());
    h.nfs_port = static_cast<uint16_t>(*p);
    hostport = hostport.substr(0, colon);
  }
  h.server = std::string(hostport);
  if (auto s = CheckServer(h.server); !s) return bad(s.error().message());
  h.share = std::string(path);
  if (h.share.size() > 1 && h.share.back() == '/') h.share.pop_back();
  if (auto s = CheckShare(h.share); !s) return bad(s.error().message());
  if (!query.empty()) {
    for (std::string_view kv : Split(query, '&')) {
      size_t eq = kv.find('=');
      std::string_view k = kv.substr(0, eq);
      std::string_view v = eq == std::string_view::npos ? "" : kv.substr(eq + 1);
      if (k == "nfsport" || k == "mountport") {
        auto p = ParseInt(v, k == "mountport" ? 0 : 1, 65535);
        if (!p) return bad(std::string(k) + ": " + p.error().message());
        (k == "nfsport" ? h.nfs_port : h.mount_port) = static_cast<uint16_t>(*p);
      } else if (k == "version") {
        auto version = ParseNfsVersion(v, "version");
        if (!version) return bad(version.error().message());
        h.nfs_version = *version;
      } else {
        return bad("unknown option '" + std::string(k) + "' (known: nfsport, mountport, version)");
      }
    }
  }
  if (h.nfs_version != NfsVersion::kV3 && h.mount_port != 0) {
    return bad("mountport: NFSv4 has no MOUNT protocol (give nfsport only)");
  }
  return h;
}

}  // namespace spoke
