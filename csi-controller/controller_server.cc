#include "csi-controller/controller_server.h"

#include <cmath>
#include <ctime>

#include "common/grpc_status.h"
#include "common/log.h"
#include "csi-controller/volume_record.h"

namespace spoke::controller {
namespace {

using csi::v1::VolumeCapability;
using Caps = google::protobuf::RepeatedPtrField<VolumeCapability>;

// What a volume id keeps of the identity: enough for DeleteVolume to act as CreateVolume did.
HubIdentityParams IdIdentity(const HubIdentityParams& params) {
  HubIdentityParams id;
  id.allow_root = params.allow_root;
  if (!params.allow_root) {
    id.uid = params.uid;
    id.gid = params.gid;
  }
  return id;
}

// A record is a few hundred bytes; anything much larger is not ours.
constexpr size_t kMaxRecordBytes = 64 * 1024;

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string Leaf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string GuardKey(const HubAddress& hub, const std::string& path) {
  return hub.server + ":" + std::to_string(hub.nfs_port) + "|" + hub.share + "|" + path;
}

bool IsReadOnlyMode(VolumeCapability::AccessMode::Mode m) {
  return m == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         m == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

// Structural checks (InvalidArgument naming the field) shared by CreateVolume and
// ValidateVolumeCapabilities.
Status CheckCapabilityShape(const Caps& caps, std::string_view field) {
  if (caps.empty()) {
    return Fail(Code::kInvalidArgument, std::string(field) + " is required");
  }
  for (int i = 0; i < caps.size(); ++i) {
    const VolumeCapability& c = caps[i];
    std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    if (!c.has_mount() && !c.has_block()) {
      return Fail(Code::kInvalidArgument, name + ": access_type is required (mount)");
    }
    if (!c.has_access_mode() || c.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
      return Fail(Code::kInvalidArgument, name + ".access_mode is required");
    }
  }
  return Ok();
}

// Whether Spoke can serve the capabilities for a volume of `mode`; the reason when not.
Status CheckCapabilitySupport(const Caps& caps, VolumeMode mode, std::string_view field) {
  for (int i = 0; i < caps.size(); ++i) {
    const VolumeCapability& c = caps[i];
    std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    if (c.has_block()) {
      return Fail(Code::kInvalidArgument,
                  name +
                      ": block access is not supported, Spoke volumes are file systems "
                      "(use access_type mount)");
    }
    auto m = c.access_mode().mode();
    if (mode == VolumeMode::kDataset && !IsReadOnlyMode(m)) {
      return Fail(Code::kInvalidArgument,
                  name +
                      ".access_mode: a dataset volume is read-only (mode=dataset); use "
                      "MULTI_NODE_READER_ONLY or SINGLE_NODE_READER_ONLY, got " +
                      VolumeCapability::AccessMode::Mode_Name(m));
    }
  }
  return Ok();
}

bool CapacityFits(int64_t existing, int64_t required, int64_t limit) {
  if (required > 0 && existing < required) return false;
  if (limit > 0 && existing > limit) return false;
  return true;
}

// Names the first parameter that differs, for an AlreadyExists message.
std::string FirstDifference(const StringMap& was, const StringMap& now) {
  std::set<std::string> keys;
  for (const auto& [k, v] : was) keys.insert(k);
  for (const auto& [k, v] : now) keys.insert(k);
  for (const auto& k : keys) {
    auto a = was.find(k);
    auto b = now.find(k);
    std::string va = a == was.end() ? "(unset)" : "'" + a->second + "'";
    std::string vb = b == now.end() ? "(unset)" : "'" + b->second + "'";
    if (va != vb) return k + " was " + va + ", now " + vb;
  }
  return "";
}

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Only the entries a half-finished Create leaves behind.
bool OnlyLeftovers(const std::vector<std::string>& names) {
  std::string tmp = std::string(kRecordFile) + ".tmp";
  for (const auto& n : names) {
    if (n != tmp) return false;
  }
  return true;
}

// CreateVolume's checks of the request itself, before its parameters.
grpc::Status CheckCreateRequest(const csi::v1::CreateVolumeRequest& req) {
  if (req.name().empty()) return Invalid("name is required");
  if (auto s = CheckCapabilityShape(req.volume_capabilities(), "volume_capabilities"); !s) {
    return ToGrpcStatus(s.error());
  }
  if (req.has_volume_content_source()) {
    return Invalid("volume_content_source: Spoke cannot create a volume from a snapshot or clone");
  }
  if (!req.mutable_parameters().empty()) {
    return Invalid("mutable_parameters: Spoke has no mutable parameters");
  }
  int64_t required = req.capacity_range().required_bytes();
  int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0) return Invalid("capacity_range.required_bytes must not be negative");
  if (limit < 0) return Invalid("capacity_range.limit_bytes must not be negative");
  if (limit > 0 && required > limit) {
    return Invalid("capacity_range: required_bytes " + std::to_string(required) +
                   " exceeds limit_bytes " + std::to_string(limit));
  }
  return grpc::Status::OK;
}

bool HasExplicitHubTimeout(const StringMap& raw) {
  auto it = raw.find(std::string(kParamHubTimeout));
  return it != raw.end() && !it->second.empty();
}

// The volume's directory: subDir, expanded for a scratch volume.
Result<std::string> VolumePath(const VolumeParams& params, const StringMap& raw,
                               const std::string& name) {
  if (params.mode == VolumeMode::kScratch) return ExpandSubDir(params.sub_dir, raw, name);
  return params.sub_dir;
}

csi::v1::Volume ToVolume(const VolumeRecord& r) {
  csi::v1::Volume v;
  v.set_volume_id(r.volume_id);
  v.set_capacity_bytes(r.capacity_bytes);
  return v;
}

// A new scratch directory at `path`, with its record.
Result<csi::v1::Volume> MakeScratchDir(ExportSession& hub, const std::string& path,
                                       const std::string& where, uint32_t mode,
                                       const VolumeRecord& record) {
  SPOKE_RETURN_IF_ERROR_WRAP(hub.MakeDirs(Parent(path), mode), "creating the parent of " + where);
  if (auto s = hub.MakeDir(path, mode); !s) {
    if (s.error().code() == Code::kAlreadyExists) {
      return Fail(Code::kCancelled, where + " appeared while creating it; retry");
    }
    return std::unexpected(s.error().Wrap("creating " + where));
  }
  // A crash here leaves an empty directory without a record: the retry adopts it.
  SPOKE_RETURN_IF_ERROR_WRAP(hub.WriteFile(Join(path, kRecordFile), record.Encode()),
                             "writing the volume record");
  return ToVolume(record);
}

// A directory without a record, adopted only when it holds nothing but a half-finished
// Create's leftovers.
Result<csi::v1::Volume> AdoptScratchDir(ExportSession& hub, const std::string& path,
                                        const std::string& where, const VolumeRecord& record) {
  SPOKE_TRY(auto names, hub.List(path));
  if (!OnlyLeftovers(names)) {
    return Fail(Code::kReadOnly,
                where + " already exists, is not empty and was not created by Spoke (no " +
                    std::string(kRecordFile) +
                    "); refusing to adopt it, since deleting the volume would delete that "
                    "data. Choose another subDir or move the directory away");
  }
  // Ours, half-created by an earlier attempt (or an empty directory someone made).
  SPOKE_RETURN_IF_ERROR_WRAP(hub.WriteFile(Join(path, kRecordFile), record.Encode()),
                             "writing the volume record");
  return ToVolume(record);
}

// The volume the record `text` found in the directory describes, when it is `wanted`'s (same
// name and parameters) and its capacity fits the requested range.
Result<csi::v1::Volume> VolumeOfRecord(const std::string& text, const std::string& where,
                                       const VolumeRecord& wanted, int64_t required,
                                       int64_t limit) {
  const std::string& name = wanted.name;
  auto existing = VolumeRecord::Decode(text);
  if (!existing) {
    return Fail(Code::kReadOnly, where + "/" + std::string(kRecordFile) +
                                     " is not readable: " + existing.error().message());
  }
  if (existing->name != name) {
    return Fail(Code::kReadOnly, where + " already belongs to volume '" + existing->name +
                                     "' (two volumes' subDir expand to the same directory)");
  }
  if (existing->parameters != wanted.parameters) {
    return Fail(Code::kAlreadyExists,
                "volume '" + name + "' already exists with other parameters (" +
                    FirstDifference(existing->parameters, wanted.parameters) + ")");
  }
  if (!CapacityFits(existing->capacity_bytes, required, limit)) {
    return Fail(Code::kAlreadyExists, "volume '" + name + "' already exists with capacity " +
                                          std::to_string(existing->capacity_bytes) +
                                          " bytes, which does not fit the requested range");
  }
  return ToVolume(*existing);
}

}  // namespace

ControllerServer::ControllerServer(ControllerConfig config, std::unique_ptr<ExportAdmin> admin,
                                   Clock clock)
    : config_(std::move(config)), admin_(std::move(admin)), clock_(std::move(clock)) {}

ControllerServer::Guard::Guard(ControllerServer* server, std::string key)
    : server_(server), key_(std::move(key)) {
  MutexLock lock(server_->mu_);
  held_ = server_->busy_.insert(key_).second;
}

ControllerServer::Guard::~Guard() {
  if (!held_) return;
  MutexLock lock(server_->mu_);
  server_->busy_.erase(key_);
}

std::string ControllerServer::ArchiveName(const std::string& leaf,
                                          std::chrono::system_clock::time_point t) const {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return config_.archive_prefix + leaf + "-" + buf;
}

Result<std::unique_ptr<ExportSession>> ControllerServer::Open(const HubAddress& hub,
                                                              double timeout_seconds,
                                                              const HubIdentityParams& identity) {
  auto secs = std::chrono::seconds(static_cast<int64_t>(std::ceil(timeout_seconds)));
  return admin_->Open(hub, secs, identity);
}

grpc::Status ControllerServer::CreateVolume(grpc::ServerContext*,
                                            const csi::v1::CreateVolumeRequest* req,
                                            csi::v1::CreateVolumeResponse* resp) {
  if (auto s = CheckCreateRequest(*req); !s.ok()) return s;
  const std::string& name = req->name();
  int64_t required = req->capacity_range().required_bytes();
  int64_t limit = req->capacity_range().limit_bytes();
  // NFS has no per-directory quota: the capacity is recorded, not enforced.
  int64_t capacity = required > 0 ? required : limit;

  StringMap raw(req->parameters().begin(), req->parameters().end());
  auto params = ParseVolumeParams(raw);
  if (!params) return ToGrpcStatus(params.error());
  const bool explicit_timeout = HasExplicitHubTimeout(raw);
  if (!explicit_timeout) params->hub_timeout_seconds = config_.hub_timeout_seconds;
  if (auto s =
          CheckCapabilitySupport(req->volume_capabilities(), params->mode, "volume_capabilities");
      !s) {
    return ToGrpcStatus(s.error());
  }
  auto expanded = VolumePath(*params, raw, name);
  if (!expanded) return ToGrpcStatus(expanded.error());
  const std::string& path = *expanded;
  StringMap canonical = CanonicalParameters(*params, path, explicit_timeout);
  VolumeId id{params->hub, params->mode, params->on_delete, path, IdIdentity(params->identity)};
  std::string id_text = id.Encode();
  if (auto s = CheckSameAsKnown(name, canonical, required, limit); !s.ok()) return s;

  Guard guard(this, GuardKey(params->hub, path));
  if (!guard.held()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "an operation on volume directory '" + path + "' is in progress");
  }

  csi::v1::Volume volume;
  if (params->mode == VolumeMode::kDataset) {
    if (auto s = CreateDataset(*params); !s) return ToGrpcStatus(s.error());
    volume.set_volume_id(id_text);
    volume.set_capacity_bytes(capacity);
  } else {
    auto made = CreateScratch(name, *params, path, canonical, required, limit);
    if (!made) return ToGrpcStatus(made.error());
    volume = *made;
  }
  for (const auto& [k, v] : MakeVolumeContext(*params, path).ToMap()) {
    (*volume.mutable_volume_context())[k] = v;
  }
  {
    MutexLock lock(mu_);
    known_[name] = Known{canonical, volume.capacity_bytes(), volume.volume_id()};
  }
  log::Info("volume created", {{"name", name},
                               {"volume", volume.volume_id()},
                               {"mode", ToString(params->mode)},
                               {"capacity", volume.capacity_bytes()}});
  *resp->mutable_volume() = std::move(volume);
  return grpc::Status::OK;
}

grpc::Status ControllerServer::CheckSameAsKnown(const std::string& name, const StringMap& canonical,
                                                int64_t required, int64_t limit) {
  MutexLock lock(mu_);
  auto it = known_.find(name);
  if (it == known_.end()) return grpc::Status::OK;
  if (it->second.parameters != canonical) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        "volume '" + name + "' already exists with other parameters (" +
                            FirstDifference(it->second.parameters, canonical) + ")");
  }
  if (!CapacityFits(it->second.capacity_bytes, required, limit)) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        "volume '" + name + "' already exists with capacity " +
                            std::to_string(it->second.capacity_bytes) +
                            " bytes, which does not fit the requested range");
  }
  return grpc::Status::OK;
}

Status ControllerServer::CreateDataset(const VolumeParams& params) {
  auto session = Open(params.hub, params.hub_timeout_seconds, params.identity);
  if (!session) {
    if (session.error().code() == Code::kUnavailable) return std::unexpected(session.error());
    return Fail(Code::kReadOnly, session.error().message());  // -> FailedPrecondition
  }
  auto st = (*session)->Stat(params.sub_dir);
  std::string where = params.hub.server + ":" + params.hub.share + "/" + params.sub_dir;
  if (!st) {
    if (st.error().code() == Code::kNotFound) {
      // The request is valid; the hub is not in the state it needs (FailedPrecondition):
      // a dataset volume names a directory that must already hold the data.
      return Fail(Code::kReadOnly, "dataset directory " + where +
                                       " does not exist on the hub (parameter subDir); a "
                                       "dataset volume is never created by Spoke");
    }
    return std::unexpected(st.error());
  }
  if (!st->is_dir) {
    return Fail(Code::kReadOnly,
                "dataset path " + where + " on the hub is not a directory (parameter subDir)");
  }
  return Ok();
}

Result<csi::v1::Volume> ControllerServer::CreateScratch(const std::string& name,
                                                        const VolumeParams& params,
                                                        const std::string& path,
                                                        const StringMap& canonical,
                                                        int64_t required, int64_t limit) {
  int64_t capacity = required > 0 ? required : limit;
  auto session_or = Open(params.hub, params.hub_timeout_seconds, params.identity);
  if (!session_or) {
    if (session_or.error().code() == Code::kUnavailable) {
      return std::unexpected(session_or.error());
    }
    return Fail(Code::kReadOnly, session_or.error().message());
  }
  ExportSession& hub = **session_or;
  VolumeRecord record{
      name,
      VolumeId{params.hub, params.mode, params.on_delete, path, IdIdentity(params.identity)}
          .Encode(),
      canonical, capacity, Rfc3339(clock_())};
  std::string where = params.hub.server + ":" + params.hub.share + "/" + path;

  auto st = hub.Stat(path);
  if (!st && st.error().code() != Code::kNotFound) return std::unexpected(st.error());
  if (!st) return MakeScratchDir(hub, path, where, config_.scratch_dir_mode, record);
  if (!st->is_dir) {
    return Fail(Code::kReadOnly, where + " exists on the hub and is not a directory");
  }
  auto text = hub.ReadFile(Join(path, kRecordFile), kMaxRecordBytes);
  if (!text && text.error().code() != Code::kNotFound) return std::unexpected(text.error());
  if (!text) return AdoptScratchDir(hub, path, where, record);
  return VolumeOfRecord(*text, where, record, required, limit);
}

grpc::Status ControllerServer::DeleteVolume(grpc::ServerContext*,
                                            const csi::v1::DeleteVolumeRequest* req,
                                            csi::v1::DeleteVolumeResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  auto id = VolumeId::Decode(req->volume_id());
  if (!id) {
    // Not an id this driver made, so no volume of ours: CSI says a volume that does not
    // exist is deleted (and csi-sanity checks exactly this).
    log::Warn("delete of a volume id Spoke never made: nothing to do",
              {{"volume", req->volume_id()}, {"error", id.error().message()}});
    return grpc::Status::OK;
  }
  if (id->mode == VolumeMode::kDataset) {
    log::Info("dataset volume released; the hub directory is never touched",
              {{"volume", req->volume_id()}});
  } else if (id->on_delete == OnDelete::kRetain) {
    log::Info("scratch volume retained on the hub (onDelete=retain)",
              {{"volume", req->volume_id()}});
  } else {
    Guard guard(this, GuardKey(id->hub, id->path));
    if (!guard.held()) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          "an operation on volume directory '" + id->path + "' is in progress");
    }
    if (auto s = DeleteScratch(*id, req->volume_id()); !s) return ToGrpcStatus(s.error());
  }
  MutexLock lock(mu_);
  std::erase_if(known_, [&](const auto& kv) { return kv.second.volume_id == req->volume_id(); });
  return grpc::Status::OK;
}

Status ControllerServer::DeleteScratch(const VolumeId& id, const std::string& id_text) {
  auto session_or = Open(id.hub, config_.hub_timeout_seconds, id.identity);
  if (!session_or) {
    if (session_or.error().code() == Code::kUnavailable) {
      return std::unexpected(session_or.error());
    }
    return Fail(Code::kReadOnly, session_or.error().message());
  }
  ExportSession& hub = **session_or;
  std::string where = id.hub.server + ":" + id.hub.share + "/" + id.path;
  auto st = hub.Stat(id.path);
  if (!st) {
    if (st.error().code() == Code::kNotFound) {
      log::Info("volume directory already gone", {{"volume", id_text}});
      return Ok();
    }
    return std::unexpected(st.error());
  }
  if (!st->is_dir) return Fail(Code::kReadOnly, where + " is not a directory; not touching it");

  std::string record_path = Join(id.path, kRecordFile);
  auto text = hub.ReadFile(record_path, kMaxRecordBytes);
  if (!text && text.error().code() != Code::kNotFound) return std::unexpected(text.error());
  SPOKE_TRY(auto names, hub.List(id.path));
  if (!text) {
    // No record: only an empty directory (a Create that stopped before its record, or a
    // Delete that stopped after removing it) may go. Anything else is not provably ours.
    if (!OnlyLeftovers(names)) {
      return Fail(Code::kReadOnly,
                  where + " has no " + std::string(kRecordFile) +
                      " and is not empty: it is not provably this volume's; refusing to " +
                      std::string(ToString(id.on_delete)) + " it (remove it by hand)");
    }
  } else {
    auto record = VolumeRecord::Decode(*text);
    if (!record) {
      return Fail(Code::kReadOnly, where + "/" + std::string(kRecordFile) +
                                       " is not readable: " + record.error().message());
    }
    if (record->volume_id != id_text) {
      return Fail(Code::kReadOnly, where + " belongs to volume '" + record->volume_id +
                                       "', not to this one; not touching it");
    }
  }

  if (id.on_delete == OnDelete::kArchive) {
    std::string to = Join(Parent(id.path), ArchiveName(Leaf(id.path), clock_()));
    SPOKE_RETURN_IF_ERROR_WRAP(hub.Rename(id.path, to), "archiving " + where);
    log::Info("volume archived", {{"volume", id_text}, {"to", to}});
    return Ok();
  }
  // delete: the record goes last, so a Delete cut short is retried as "ours".
  for (const auto& name : names) {
    if (name == kRecordFile) continue;
    SPOKE_RETURN_IF_ERROR_WRAP(hub.RemoveTree(Join(id.path, name)), "deleting " + where);
  }
  if (text) {
    if (auto s = hub.Remove(record_path); !s && s.error().code() != Code::kNotFound) {
      return std::unexpected(s.error().Wrap("deleting " + where));
    }
  }
  if (auto s = hub.Remove(id.path); !s && s.error().code() != Code::kNotFound) {
    return std::unexpected(s.error().Wrap("deleting " + where));
  }
  log::Info("volume deleted", {{"volume", id_text}});
  return Ok();
}

grpc::Status ControllerServer::ValidateVolumeCapabilities(
    grpc::ServerContext*, const csi::v1::ValidateVolumeCapabilitiesRequest* req,
    csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (auto s = CheckCapabilityShape(req->volume_capabilities(), "volume_capabilities"); !s) {
    return ToGrpcStatus(s.error());
  }
  auto id = VolumeId::Decode(req->volume_id());
  if (!id) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        "volume " + req->volume_id() + " does not exist (" + id.error().message() + ")");
  }
  auto session = Open(id->hub, config_.hub_timeout_seconds, id->identity);
  if (!session) {
    if (session.error().code() == Code::kUnavailable) return ToGrpcStatus(session.error());
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        "volume " + req->volume_id() + " does not exist (" + session.error().message() + ")");
  }
  auto st = (*session)->Stat(id->path);
  if (!st && st.error().code() != Code::kNotFound) return ToGrpcStatus(st.error());
  if (!st || !st->is_dir) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "volume " + req->volume_id() + " does not exist: no directory " +
                            id->hub.share + "/" + id->path + " on the hub");
  }
  if (auto s = CheckCapabilitySupport(req->volume_capabilities(), id->mode, "volume_capabilities");
      !s) {
    resp->set_message(s.error().message());  // not confirmed
    return grpc::Status::OK;
  }
  auto* confirmed = resp->mutable_confirmed();
  *confirmed->mutable_volume_capabilities() = req->volume_capabilities();
  *confirmed->mutable_volume_context() = req->volume_context();
  *confirmed->mutable_parameters() = req->parameters();
  return grpc::Status::OK;
}

grpc::Status ControllerServer::ControllerGetCapabilities(
    grpc::ServerContext*, const csi::v1::ControllerGetCapabilitiesRequest*,
    csi::v1::ControllerGetCapabilitiesResponse* resp) {
  for (auto type : {csi::v1::ControllerServiceCapability::RPC::CREATE_DELETE_VOLUME,
                    csi::v1::ControllerServiceCapability::RPC::GET_CAPACITY}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status ControllerServer::GetCapacity(grpc::ServerContext*,
                                           const csi::v1::GetCapacityRequest* req,
                                           csi::v1::GetCapacityResponse* resp) {
  if (req->parameters().empty()) {
    // No StorageClass, no hub: the capacity is unknown, which CSI spells 0.
    resp->set_available_capacity(0);
    return grpc::Status::OK;
  }
  StringMap raw(req->parameters().begin(), req->parameters().end());
  auto params = ParseVolumeParams(raw);
  if (!params) return ToGrpcStatus(params.error());
  auto timeout_it = raw.find(std::string(kParamHubTimeout));
  if (timeout_it == raw.end() || timeout_it->second.empty()) {
    params->hub_timeout_seconds = config_.hub_timeout_seconds;
  }
  if (!req->volume_capabilities().empty()) {
    if (auto s = CheckCapabilityShape(req->volume_capabilities(), "volume_capabilities"); !s) {
      return ToGrpcStatus(s.error());
    }
    if (!CheckCapabilitySupport(req->volume_capabilities(), params->mode, "volume_capabilities")) {
      resp->set_available_capacity(0);  // no volume with these capabilities can be made
      return grpc::Status::OK;
    }
  }
  auto session = Open(params->hub, params->hub_timeout_seconds, params->identity);
  if (!session) return ToGrpcStatus(session.error());
  auto usage = (*session)->Usage();
  if (!usage) return ToGrpcStatus(usage.error());
  resp->set_available_capacity(static_cast<int64_t>(usage->available_bytes));
  return grpc::Status::OK;
}

}  // namespace spoke::controller
