// What a Spoke volume is: the StorageClass parameters (validated once, at CreateVolume),
// the volume id that DeleteVolume and the node decode, and the volume context handed to
// the node plugin and the cache agent.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace spoke {

using StringMap = std::map<std::string, std::string>;

enum class VolumeMode { kDataset, kScratch };
enum class OnDelete { kDelete, kRetain, kArchive };
enum class Consistency { kImmutable, kTtl, kStrict };
enum class PrefetchMode { kOff, kReadAhead, kAuto };
enum class HubIdentity { kCaller, kFixed };
// Scratch volumes: kWriteBack answers a write once the agent holds it and sends it on with
// many WRITEs in flight (durable on the hub when fsync or close returns); kSync answers each
// write only once the hub has it. kUnstable is kWriteBack with UNSTABLE WRITEs made durable by
// a COMMIT (at fsync, close and every 16 MiB), sent again when the hub restarted before it.
enum class WriteMode { kSync, kWriteBack, kUnstable };
// The protocol the agent speaks to the hub: NFSv3 (libnfs) or NFSv4.1 (spoke-nfs4), for hubs
// that serve no v3 (Amazon EFS, v4-only NAS exports).
enum class NfsVersion { kV3, kV41 };

std::string_view ToString(VolumeMode m);
std::string_view ToString(OnDelete d);
std::string_view ToString(Consistency c);
std::string_view ToString(PrefetchMode p);
std::string_view ToString(HubIdentity i);
std::string_view ToString(WriteMode w);
std::string_view ToString(NfsVersion v);  // "3", "4.1"

// Where the NFS export lives. Explicit ports skip the portmapper (firewalled hubs, tests).
struct HubAddress {
  std::string server;  // host name or IP
  uint16_t nfs_port = 2049;
  uint16_t mount_port = 0;  // 0 = ask the portmapper
  std::string share;        // absolute export path, e.g. /srv/datasets (v4: the pseudo path)
  // v4.x speaks to nfs_port only (no MOUNT protocol, no portmapper): mount_port stays 0.
  NfsVersion nfs_version = NfsVersion::kV3;

  // nfs://server/share?nfsport=..&mountport=..&version=3 (libnfs URL of the share root).
  // Only call on a validated address (Validate(), or any parser here): the URL is glued
  // from the fields.
  std::string NfsUrl() const;
  // server a host name or IP, share an absolute normalised path without URL metacharacters.
  Status Validate() const;
  bool operator==(const HubAddress&) const = default;
};

struct CacheParams {
  Consistency consistency = Consistency::kImmutable;
  uint32_t ttl_seconds = 30;  // like actimeo; only for kTtl
  PrefetchMode prefetch = PrefetchMode::kAuto;
  bool operator==(const CacheParams&) const = default;
};

// Who the hub sees (AUTH_SYS). kCaller: each FUSE request carries the caller's uid, gid and
// groups; kFixed: every request is sent as uid/gid (all-squash). uid/gid are also the
// identity of requests no caller makes (the agent's walk, prefetch and warm-up, and the
// controller's provisioning). Without allow_root no request ever carries uid 0: a caller
// with uid 0 is sent as uid/gid (like root_squash).
struct HubIdentityParams {
  HubIdentity mode = HubIdentity::kCaller;
  uint32_t uid = 65534;  // nobody
  uint32_t gid = 65534;  // nogroup
  bool allow_root = false;

  // The credential of a request made for the caller (uid, gid).
  std::pair<uint32_t, uint32_t> ForCaller(uint32_t caller_uid, uint32_t caller_gid) const;
  bool operator==(const HubIdentityParams&) const = default;
};

// Validated StorageClass parameters.
struct VolumeParams {
  HubAddress hub;
  VolumeMode mode = VolumeMode::kScratch;
  std::string sub_dir;  // template (scratch) or fixed path inside the share (dataset)
  OnDelete on_delete = OnDelete::kDelete;
  CacheParams cache;
  double hub_timeout_seconds = 10;  // bound on every hub call made for this volume
  HubIdentityParams identity{};
  WriteMode write_mode = WriteMode::kWriteBack;
};

// StorageClass parameter names.
inline constexpr std::string_view kParamServer = "server";
inline constexpr std::string_view kParamShare = "share";
inline constexpr std::string_view kParamNfsPort = "nfsPort";
inline constexpr std::string_view kParamMountPort = "mountPort";
inline constexpr std::string_view kParamMode = "mode";
inline constexpr std::string_view kParamSubDir = "subDir";
inline constexpr std::string_view kParamOnDelete = "onDelete";
inline constexpr std::string_view kParamConsistency = "consistency";
inline constexpr std::string_view kParamTtlSeconds = "ttlSeconds";
inline constexpr std::string_view kParamPrefetch = "prefetch";
inline constexpr std::string_view kParamHubTimeout = "hubTimeoutSeconds";
inline constexpr std::string_view kParamHubIdentity = "hubIdentity";
inline constexpr std::string_view kParamHubUid = "hubUid";
inline constexpr std::string_view kParamHubGid = "hubGid";
inline constexpr std::string_view kParamAllowRoot = "allowRoot";
inline constexpr std::string_view kParamWriteMode = "writeMode";
inline constexpr std::string_view kParamNfsVersion = "nfsVersion";
// Added by csi-provisioner --extra-create-metadata.
inline constexpr std::string_view kMetaPvcName = "csi.storage.k8s.io/pvc/name";
inline constexpr std::string_view kMetaPvcNamespace = "csi.storage.k8s.io/pvc/namespace";
inline constexpr std::string_view kMetaPvName = "csi.storage.k8s.io/pv/name";
// Volume context only: the volume's directory relative to the share ("" = the share root).
inline constexpr std::string_view kCtxPath = "path";
// Set by the node plugin only (CSI VOLUME_MOUNT_GROUP, a pod's fsGroup); replaced by it in
// every request, so volume attributes cannot choose it.
inline constexpr std::string_view kCtxMountGroup = "spoke.csi.dev/volumeMountGroup";
// The agent's hint control file at a volume's root: a job writes upcoming paths to it, one
// per line. It is never stored on the hub and stays writable on read-only volumes.
inline constexpr std::string_view kHintFileName = ".spoke-hints";

// Parses and validates StorageClass parameters. Unknown keys (other than the
// csi.storage.k8s.io/ ones) are rejected. Errors are kInvalidArgument and name the parameter.
Result<VolumeParams> ParseVolumeParams(const StringMap& params);

// Expands ${pvc.metadata.name}, ${pvc.metadata.namespace} and ${pv.metadata.name} from the
// provisioner's metadata (pv name falls back to `volume_name`) and normalises the result.
// Errors name subDir: unknown variables, missing metadata, escaping the share.
Result<std::string> ExpandSubDir(std::string_view tmpl, const StringMap& params,
                                 std::string_view volume_name);

// Checks a path relative to the share: no "..", no absolute path, no empty or "." parts,
// no control characters; collapses nothing silently. "" is the share root. `what` names the
// field in the error.
Result<std::string> NormalizeRelativePath(std::string_view path, std::string_view what);

// A path inside a volume as a person types it (spokectl warmup/evict PREFIX, the agent API's
// path_prefix, hint paths): "", ".", "./" and "/" are the volume root (""); "./sub", "sub/",
// "sub//x" and "sub/./x" are forgiven and normalised ("sub", "sub/x"). Still refused, as by
// NormalizeRelativePath: any ".." component, an absolute path other than "/" (the path is
// relative to the volume, not to the host), control characters, backslashes and '|'. `what` names
// the field in the error.
Result<std::string> NormalizePathInVolume(std::string_view path, std::string_view what);

// share, subDir and path end up in a libnfs URL, where '?', '&', '=', '#' and '%' would
// start options (e.g. uid=0) or escapes: they are refused, with whitespace and control
// characters. kInvalidArgument naming `what`.
Status CheckUrlSafe(std::string_view value, std::string_view what);

// What the node plugin and agent need to mount a volume.
struct VolumeContext {
  HubAddress hub;
  VolumeMode mode = VolumeMode::kDataset;
  std::string path;  // relative to the share
  CacheParams cache;
  double hub_timeout_seconds = 10;
  HubIdentityParams identity{};
  WriteMode write_mode = WriteMode::kWriteBack;
  // A pod's fsGroup (kCtxMountGroup): a writable volume's root directory gets this group on
  // the hub when mounted, so the pod's files inherit it (the directory is setgid).
  std::optional<uint32_t> mount_group;

  bool read_only() const { return mode == VolumeMode::kDataset; }
  StringMap ToMap() const;
  // Accepts what ToMap() writes, and CSI inline-volume attributes (which give `subDir`
  // instead of `path`). A scratch volume at the share root is refused. Errors name the key.
  static Result<VolumeContext> FromMap(const StringMap& ctx);
};

VolumeContext MakeVolumeContext(const VolumeParams& params, std::string path);

// The CSI volume id: everything DeleteVolume and the node need without the parameters.
//   spoke1|<mode>|<onDelete>|<server>|<nfsPort>|<mountPort>|<share>|<path>[|<identity>]
// <identity> is "<hubUid>:<hubGid>" or "root" (allowRoot), left out for the default
// (65534:65534): the identity DeleteVolume uses on the hub.
struct VolumeId {
  HubAddress hub;
  VolumeMode mode = VolumeMode::kScratch;
  OnDelete on_delete = OnDelete::kDelete;
  std::string path;              // relative to the share
  HubIdentityParams identity{};  // uid, gid and allow_root only

  std::string Encode() const;
  // kInvalidArgument naming what is malformed.
  static Result<VolumeId> Decode(std::string_view id);
  bool operator==(const VolumeId&) const = default;
};

// The `volume` label of a volume's metrics and /healthz entry: "v" + 16 hex digits of a hash
// of the id. Volume ids carry server, share and path, and kubelet's target paths carry pod
// UIDs; neither belongs on an HTTP endpoint. `spokectl status` (root socket) maps them back.
std::string VolumeMetricsLabel(std::string_view volume_id);

// Parses nfs://server[:port]/share/path?nfsport=N&mountport=M (spokectl mount). The whole
// URL path is the share; the volume path is "".
Result<HubAddress> ParseNfsUrl(std::string_view url);

}  // namespace spoke
