#include "csi-node/node_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>

#include "common/config.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/volume.h"

namespace spoke::node {
namespace {

using csi::v1::VolumeCapability;

grpc::Status Invalid(std::string msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(msg));
}

// A local dependency (mount probe, agent call) that hung is DEADLINE_EXCEEDED here.
grpc::Status ToGrpc(const Error& e, std::string_view context = {}) {
  return ToGrpcStatus(e, context, grpc::StatusCode::DEADLINE_EXCEEDED);
}

grpc::Status ToGrpc(const AgentError& e) {
  // A missing agent is a condition of the node, not of the request: kubelet retries
  // UNAVAILABLE with backoff, which is what we want until the agent is back.
  if (e.unreachable) return grpc::Status(grpc::StatusCode::UNAVAILABLE, e.message);
  return grpc::Status(e.code, e.message);
}

// A reader-only access mode, or "ro" among the PV's mountOptions.
bool ReadOnlyAccessMode(const VolumeCapability& cap) {
  for (const auto& flag : cap.mount().mount_flags()) {
    if (flag == "ro") return true;
  }
  switch (cap.access_mode().mode()) {
    case VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY:
    case VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY:
      return true;
    default:
      return false;
  }
}

// Capability checks shared by stage and publish.
grpc::Status CheckCapability(const csi::v1::VolumeCapability* cap, bool present) {
  if (!present) return Invalid("volume_capability is required");
  if (cap->has_block()) {
    return Invalid(
        "volume_capability: block access is not supported, a Spoke volume is a file system "
        "(use access_type mount)");
  }
  if (!cap->has_mount()) return Invalid("volume_capability.access_type is required (mount)");
  if (cap->access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    return Invalid("volume_capability.access_mode is required");
  }
  return grpc::Status::OK;
}

StringMap ToStringMap(const google::protobuf::Map<std::string, std::string>& m) {
  return StringMap(m.begin(), m.end());
}

// The context to mount with: the request's (what CreateVolume returned), or when a CO sends
// none (statically provisioned PVs often have no volumeAttributes), what the id encodes.
// A scratch volume is written: at the share's root it would let one volume write over every
// other volume's directory. Spoke never provisions one; a context must not ask for one either.
Status RefuseScratchAtRoot(const VolumeContext& c) {
  if (c.mode == VolumeMode::kScratch && c.path.empty()) {
    return Fail(Code::kInvalidArgument,
                "a scratch volume cannot be a share's root: set subDir to its own directory");
  }
  return Ok();
}

Result<VolumeContext> ContextFor(const VolumeId& id, const StringMap& request_context) {
  bool has_ours = false;
  for (const auto& [k, v] : request_context) {
    if (!k.starts_with("csi.storage.k8s.io/")) has_ours = true;
  }
  if (has_ours) {
    SPOKE_TRY_WRAP(auto c, VolumeContext::FromMap(request_context), "volume_context");
    SPOKE_RETURN_IF_ERROR_WRAP(RefuseScratchAtRoot(c), "volume_context");
    return c;
  }
  VolumeContext c;
  c.hub = id.hub;
  c.mode = id.mode;
  c.path = id.path;
  if (id.mode == VolumeMode::kScratch) c.cache.consistency = Consistency::kStrict;
  return c;
}

// A pod's fsGroup reaches the driver as the mount's volume_mount_group (VOLUME_MOUNT_GROUP:
// kubelet then leaves the volume's ownership to us). It replaces whatever the attributes say.
Status SetMountGroup(VolumeContext& c, const csi::v1::VolumeCapability& cap) {
  c.mount_group.reset();
  const std::string& g = cap.mount().volume_mount_group();
  if (g.empty()) return Ok();
  auto v = ParseInt(g, 0, 4294967294LL);
  if (!v) {
    return Fail(Code::kInvalidArgument, "volume_capability.mount.volume_mount_group: '" + g +
                                            "' is not a group id (" + v.error().message() + ")");
  }
  c.mount_group = static_cast<uint32_t>(*v);
  return Ok();
}

bool PathExists(const std::string& path, int* err) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return true;
  *err = errno;
  return false;
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string HubName(const StringMap& ctx, const std::string& volume_id) {
  auto it = ctx.find(std::string(kParamServer));
  if (it != ctx.end()) {
    auto port = ctx.find(std::string(kParamNfsPort));
    return it->second + ":" + (port != ctx.end() ? port->second : "2049");
  }
  if (auto id = VolumeId::Decode(volume_id)) {
    return id->hub.server + ":" + std::to_string(id->hub.nfs_port);
  }
  return "the hub";
}

using spoke::agent::v1::MountInfo;
using spoke::agent::v1::VolumeStatsResponse;

// An agent that does not answer is the volume's condition, not the call's error.
grpc::Status AgentErrorAsCondition(const AgentError& e, csi::v1::VolumeCondition* cond) {
  if (!e.unreachable) return ToGrpc(e);
  cond->set_abnormal(true);
  cond->set_message(e.message);
  return grpc::Status::OK;
}

// Which agent mount backs the mount `here`: the path itself (staging) or the mount it binds.
// Null when none does.
const MountInfo* BackingAgentMount(Mounter& mounter, const std::vector<MountInfo>& agent_mounts,
                                   const std::vector<MountEntry>& mounts, const MountEntry& here,
                                   const std::string& volume_id) {
  const MountInfo* backing = nullptr;
  for (const auto& m : agent_mounts) {
    std::string mp = mounter.CanonicalPath(m.target_path());
    if (mp == here.mount_point) return &m;
    auto e = FindMount(mounts, mp);
    if (e && e->SameTree(here) && (!backing || m.volume_id() == volume_id)) backing = &m;
  }
  return backing;
}

void AddHubUsage(const VolumeStatsResponse& stats, csi::v1::NodeGetVolumeStatsResponse* resp) {
  auto* bytes = resp->add_usage();
  bytes->set_unit(csi::v1::VolumeUsage::BYTES);
  bytes->set_total(static_cast<int64_t>(stats.hub_total_bytes()));
  bytes->set_available(static_cast<int64_t>(stats.hub_available_bytes()));
  bytes->set_used(static_cast<int64_t>(stats.hub_used_bytes()));
  auto* inodes = resp->add_usage();
  inodes->set_unit(csi::v1::VolumeUsage::INODES);
  inodes->set_total(static_cast<int64_t>(stats.hub_total_inodes()));
  inodes->set_available(static_cast<int64_t>(stats.hub_free_inodes()));
  inodes->set_used(static_cast<int64_t>(stats.hub_total_inodes() >= stats.hub_free_inodes()
                                            ? stats.hub_total_inodes() - stats.hub_free_inodes()
                                            : 0));
}

// "cache: 1.0 GiB cached, hit ratio 97.0% (...)", for the volume condition's message.
std::string CacheSummary(const VolumeStatsResponse& stats) {
  uint64_t reads = stats.cache_hits() + stats.cache_misses();
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1f%%",
                reads ? 100.0 * static_cast<double>(stats.cache_hits()) / reads : 0.0);
  std::string cache = "cache: " + HumanBytes(stats.cache_bytes()) + " cached, hit ratio " + ratio +
                      " (" + std::to_string(stats.cache_hits()) + " hits, " +
                      std::to_string(stats.cache_misses()) + " misses), " +
                      HumanBytes(stats.hub_read_bytes()) + " read from the hub";
  if (stats.checksum_failures() > 0) {
    cache += ", " + std::to_string(stats.checksum_failures()) + " bad blocks dropped";
  }
  return cache;
}

void SetHubCondition(const VolumeStatsResponse& stats, const std::string& hub,
                     csi::v1::VolumeCondition* cond) {
  const std::string cache = CacheSummary(stats);
  if (!stats.hub_reachable()) {
    cond->set_abnormal(true);
    cond->set_message("hub " + hub + " unreachable: " +
                      (stats.last_hub_error().empty() ? "no answer" : stats.last_hub_error()) +
                      "; " + cache);
  } else {
    cond->set_abnormal(false);
    cond->set_message("hub " + hub + " reachable; " + cache);
  }
}

}  // namespace

NodeServer::PathLock::PathLock(NodeServer* server, std::string key)
    : server_(server), key_(std::move(key)) {
  MutexLock l(server_->mu_);
  acquired_ = server_->busy_.insert(key_).second;
}

NodeServer::PathLock::~PathLock() {
  if (!acquired_) return;
  MutexLock l(server_->mu_);
  server_->busy_.erase(key_);
}

NodeServer::NodeServer(NodeConfig config, Mounter& mounter, AgentClient& agent)
    : config_(std::move(config)), mounter_(mounter), agent_(agent) {}

std::string NodeServer::EphemeralDir(const std::string& volume_id) const {
  std::string name;
  for (char c : volume_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    name.push_back(ok ? c : '_');
  }
  if (name == "." || name == "..") name = "_" + name;
  return CleanPath(config_.state_dir) + "/ephemeral/" + name;
}

grpc::Status NodeServer::CheckPath(const std::string& path, std::string_view field) const {
  if (path.empty()) return Invalid(std::string(field) + " is required");
  if (path.front() != '/') {
    return Invalid(std::string(field) + " must be an absolute path, got '" + path + "'");
  }
  if (config_.kubelet_dir_enforced) {
    std::string clean = CleanPath(path);
    std::string root = CleanPath(config_.kubelet_dir);
    if (!clean.starts_with(root + "/")) {
      return Invalid(std::string(field) + " '" + path + "' is outside kubelet's directory " + root +
                     " (kubeletDir in the node config)");
    }
  }
  return grpc::Status::OK;
}

grpc::Status NodeServer::RecoverStale(const std::string& path, bool* recovered) {
  *recovered = false;
  if (!mounter_.IsStale(path)) return grpc::Status::OK;
  log::Warn("stale mount (transport endpoint is not connected): detaching it", {{"path", path}});
  if (auto s = mounter_.Unmount(path, /*lazy=*/true); !s) {
    return ToGrpc(s.error(), "detach stale mount " + path);
  }
  *recovered = true;
  return grpc::Status::OK;
}

grpc::Status NodeServer::AgentMount(const std::string& volume_id, const StringMap& context,
                                    const std::string& staging, bool read_only) {
  bool recovered = false;
  if (auto s = RecoverStale(staging, &recovered); !s.ok()) return s;
  auto r = agent_.Mount(volume_id, context, staging, read_only);
  if (!r) return ToGrpc(r.error());
  return grpc::Status::OK;
}

grpc::Status NodeServer::AgentUnmount(const std::string& staging) {
  auto r = agent_.Unmount(staging);
  if (!r) {
    if (!r.error().unreachable) return ToGrpc(r.error());
    // No agent to ask. A mount it served is stale now (its FUSE daemon is the agent), and
    // can be detached here; a live mount means the agent is alive but not answering.
    auto mounted = mounter_.IsMountPoint(staging);
    if (!mounted) return ToGrpc(mounted.error());
    if (*mounted && !mounter_.IsStale(staging)) return ToGrpc(r.error());
    if (*mounted) {
      log::Warn("cache agent unreachable: detaching its stale mount here",
                {{"path", staging}, {"error", r.error().message}});
    }
  }
  // Whatever the agent did not know about (a stale mount from before its restart) goes too.
  for (int i = 0; i < 8; ++i) {
    auto mounted = mounter_.IsMountPoint(staging);
    if (!mounted) return ToGrpc(mounted.error());
    if (!*mounted) return grpc::Status::OK;
    if (auto s = mounter_.Unmount(staging, /*lazy=*/true); !s) {
      return ToGrpc(s.error(), "unmount " + staging);
    }
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "mounts keep appearing at " + staging);
}

grpc::Status NodeServer::NodeStageVolume(grpc::ServerContext*,
                                         const csi::v1::NodeStageVolumeRequest* req,
                                         csi::v1::NodeStageVolumeResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (req->staging_target_path().empty()) return Invalid("staging_target_path is required");
  if (auto s = CheckCapability(&req->volume_capability(), req->has_volume_capability()); !s.ok())
    return s;
  if (auto s = CheckPath(req->staging_target_path(), "staging_target_path"); !s.ok()) return s;
  auto id = VolumeId::Decode(req->volume_id());
  if (!id) return ToGrpc(id.error(), "volume_id");
  auto vctx = ContextFor(*id, ToStringMap(req->volume_context()));
  if (!vctx) return ToGrpc(vctx.error());
  if (auto s = SetMountGroup(*vctx, req->volume_capability()); !s) return ToGrpc(s.error());
  bool read_only = vctx->read_only() || ReadOnlyAccessMode(req->volume_capability());

  const std::string& staging = req->staging_target_path();
  PathLock lock(this, staging);
  if (!lock.acquired()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "an operation on " + staging + " is already in progress");
  }
  if (auto s = AgentMount(req->volume_id(), vctx->ToMap(), staging, read_only); !s.ok()) {
    return s;
  }
  log::Info("volume staged", {{"volume", req->volume_id()},
                              {"staging", staging},
                              {"mode", ToString(vctx->mode)},
                              {"read_only", read_only}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodeUnstageVolume(grpc::ServerContext*,
                                           const csi::v1::NodeUnstageVolumeRequest* req,
                                           csi::v1::NodeUnstageVolumeResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (req->staging_target_path().empty()) return Invalid("staging_target_path is required");
  if (auto s = CheckPath(req->staging_target_path(), "staging_target_path"); !s.ok()) return s;
  const std::string& staging = req->staging_target_path();
  PathLock lock(this, staging);
  if (!lock.acquired()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "an operation on " + staging + " is already in progress");
  }
  int err = 0;
  auto mounted = mounter_.IsMountPoint(staging);
  if (!mounted) return ToGrpc(mounted.error());
  if (!*mounted && !PathExists(staging, &err) && err == ENOENT) {
    return grpc::Status::OK;  // gone already
  }
  if (auto s = AgentUnmount(staging); !s.ok()) return s;
  // The staging directory belongs to the CO (kubelet creates and removes it).
  log::Info("volume unstaged", {{"volume", req->volume_id()}, {"staging", staging}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::BindIntoTarget(const std::string& volume_id, const std::string& staging,
                                        const std::string& target, bool read_only) {
  auto mounts = mounter_.ListMounts();
  if (!mounts) return ToGrpc(mounts.error());
  auto staged = FindMount(*mounts, mounter_.CanonicalPath(staging));
  if (!staged) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "volume " + volume_id + " is not staged: nothing is mounted at " + staging +
                            " (NodeStageVolume first)");
  }

  std::error_code ec;
  bool created = false;
  struct stat st;
  auto current = FindMount(*mounts, mounter_.CanonicalPath(target));
  // Only a target that is no mount point is looked at (a hung FUSE mount would block lstat),
  // and only ENOENT means "create it".
  if (!current && ::lstat(target.c_str(), &st) != 0 && errno == ENOENT) {
    std::filesystem::path parent = std::filesystem::path(target).parent_path();
    if (!std::filesystem::is_directory(parent, ec)) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "target_path's parent " + parent.string() + " does not exist");
    }
    if (::mkdir(target.c_str(), 0750) != 0 && errno != EEXIST) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "mkdir " + target + ": " + std::strerror(errno));
    }
    created = true;
  }

  if (current) {
    bool recovered = false;
    if (auto s = RecoverStale(target, &recovered); !s.ok()) return s;
    if (!recovered) {
      if (!current->SameTree(*staged)) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            "target_path " + target + " already has another mount (" +
                                current->fstype + " " + current->source + ")");
      }
      if (read_only && !current->read_only()) {
        if (auto s = mounter_.RemountReadOnly(target); !s) return ToGrpc(s.error());
      }
      return grpc::Status::OK;  // published already
    }
  }

  if (auto s = mounter_.BindMount(staging, target); !s) {
    if (created) ::rmdir(target.c_str());
    return ToGrpc(s.error());
  }
  if (read_only) {
    if (auto s = mounter_.RemountReadOnly(target); !s) {
      // Never leave a writable view of a volume that must be read-only.
      (void)mounter_.Unmount(target, /*lazy=*/true);
      if (created) ::rmdir(target.c_str());
      return ToGrpc(s.error());
    }
    BindHintFile(staging, target);
  }
  return grpc::Status::OK;
}

// The agent's hint control file (<volume>/.spoke-hints) is the one writable name of a
// read-only volume: the agent keeps it off the hub and answers EROFS for everything else.
// A read-only bind mount would block it in the kernel, so the file itself is bound again,
// writable, on top. Best effort: without it, hints still reach the agent through its API.
void NodeServer::BindHintFile(const std::string& staging, const std::string& target) {
  std::string source = staging + "/" + std::string(kHintFileName);
  std::string dest = target + "/" + std::string(kHintFileName);
  struct stat st;
  if (::stat(dest.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // agent without hints
  if (auto s = mounter_.BindMount(source, dest); !s) {
    log::Warn("hint file not writable in the pod: bind failed",
              {{"target", dest}, {"error", s.error().message()}});
  }
}

grpc::Status NodeServer::PublishEphemeral(const csi::v1::NodePublishVolumeRequest& req,
                                          bool read_only) {
  StringMap attrs = ToStringMap(req.volume_context());
  if (auto s = config_.inline_volumes.Check(attrs); !s) return ToGrpc(s.error());
  auto vctx = VolumeContext::FromMap(attrs);
  if (!vctx) return ToGrpc(vctx.error().Wrap("volume_context (inline volume attributes)"));
  if (auto s = RefuseScratchAtRoot(*vctx); !s)
    return ToGrpc(s.error().Wrap("volume_context (inline volume attributes)"));
  if (auto s = SetMountGroup(*vctx, req.volume_capability()); !s) return ToGrpc(s.error());
  read_only = read_only || vctx->read_only();
  std::string dir = EphemeralDir(req.volume_id());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "cannot create ephemeral staging dir " + dir + ": " + ec.message());
  }
  // The agent knows the volume by kubelet's id (csi-<hash>): unique per pod and volume.
  if (auto s = AgentMount(req.volume_id(), vctx->ToMap(), dir, read_only); !s.ok()) {
    auto mounted = mounter_.IsMountPoint(dir);
    if (mounted && !*mounted) ::rmdir(dir.c_str());
    return s;
  }
  if (auto s = BindIntoTarget(req.volume_id(), dir, req.target_path(), read_only); !s.ok()) {
    if (AgentUnmount(dir).ok()) ::rmdir(dir.c_str());
    return s;
  }
  log::Info("ephemeral volume published", {{"volume", req.volume_id()},
                                           {"target", req.target_path()},
                                           {"private_mount", dir},
                                           {"read_only", read_only}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodePublishVolume(grpc::ServerContext*,
                                           const csi::v1::NodePublishVolumeRequest* req,
                                           csi::v1::NodePublishVolumeResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (req->target_path().empty()) return Invalid("target_path is required");
  if (auto s = CheckCapability(&req->volume_capability(), req->has_volume_capability()); !s.ok())
    return s;
  if (auto s = CheckPath(req->target_path(), "target_path"); !s.ok()) return s;
  bool read_only = req->readonly() || ReadOnlyAccessMode(req->volume_capability());
  auto eph = req->volume_context().find(std::string(kCtxEphemeral));
  bool ephemeral = eph != req->volume_context().end() && eph->second == "true";

  PathLock lock(this, req->target_path());
  if (!lock.acquired()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "an operation on " + req->target_path() + " is already in progress");
  }
  if (ephemeral) return PublishEphemeral(*req, read_only);

  if (req->staging_target_path().empty()) {
    return Invalid("staging_target_path is required (the driver stages volumes)");
  }
  if (auto s = CheckPath(req->staging_target_path(), "staging_target_path"); !s.ok()) return s;
  auto id = VolumeId::Decode(req->volume_id());
  if (!id) return ToGrpc(id.error(), "volume_id");
  auto vctx = ContextFor(*id, ToStringMap(req->volume_context()));
  if (!vctx) return ToGrpc(vctx.error());
  if (auto s = SetMountGroup(*vctx, req->volume_capability()); !s) return ToGrpc(s.error());
  read_only = read_only || vctx->read_only();

  // A staging mount whose agent died is re-created from the request (same id and context),
  // so pods can start again once the agent is back without waiting for a re-stage.
  bool recovered = false;
  if (auto s = RecoverStale(req->staging_target_path(), &recovered); !s.ok()) return s;
  if (recovered) {
    bool stage_ro = vctx->read_only() || ReadOnlyAccessMode(req->volume_capability());
    if (auto s = AgentMount(req->volume_id(), vctx->ToMap(), req->staging_target_path(), stage_ro);
        !s.ok()) {
      return s;
    }
    log::Info("re-staged a stale staging mount",
              {{"volume", req->volume_id()}, {"staging", req->staging_target_path()}});
  }
  if (auto s = BindIntoTarget(req->volume_id(), req->staging_target_path(), req->target_path(),
                              read_only);
      !s.ok()) {
    return s;
  }
  log::Info(
      "volume published",
      {{"volume", req->volume_id()}, {"target", req->target_path()}, {"read_only", read_only}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::UnmountAndRemoveTarget(const std::string& target) {
  // The writable hint-file bind (BindHintFile) sits on top of the target: it goes first.
  std::string hint = target + "/" + std::string(kHintFileName);
  if (auto m = mounter_.IsMountPoint(hint); m && *m) (void)mounter_.Unmount(hint, /*lazy=*/true);
  for (int i = 0; i < 8; ++i) {
    auto mounted = mounter_.IsMountPoint(target);
    if (!mounted) return ToGrpc(mounted.error());
    if (!*mounted) break;
    bool stale = mounter_.IsStale(target);
    if (stale)
      log::Warn("stale mount (transport endpoint is not connected): detaching it",
                {{"path", target}});
    auto s = mounter_.Unmount(target, /*lazy=*/stale);
    if (!s) {
      // Busy (a process still has its cwd there): detach it; it goes when they let go.
      log::Warn("unmount failed, detaching lazily",
                {{"target", target}, {"error", s.error().message()}});
      if (auto l = mounter_.Unmount(target, /*lazy=*/true); !l) {
        return ToGrpc(l.error(), "unmount " + target);
      }
    }
    if (i == 7) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "mounts keep appearing at " + target);
    }
  }
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT) {
    int err = errno;
    if (err == ENOTDIR) {
      if (::unlink(target.c_str()) == 0) return grpc::Status::OK;
      err = errno;
    }
    return grpc::Status(
        grpc::StatusCode::INTERNAL,
        "remove " + target + ": " + std::strerror(err) +
            (err == ENOTEMPTY ? " (not a mount point and not empty: not deleting)" : ""));
  }
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodeUnpublishVolume(grpc::ServerContext*,
                                             const csi::v1::NodeUnpublishVolumeRequest* req,
                                             csi::v1::NodeUnpublishVolumeResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (req->target_path().empty()) return Invalid("target_path is required");
  if (auto s = CheckPath(req->target_path(), "target_path"); !s.ok()) return s;
  PathLock lock(this, req->target_path());
  if (!lock.acquired()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "an operation on " + req->target_path() + " is already in progress");
  }
  if (auto s = UnmountAndRemoveTarget(req->target_path()); !s.ok()) return s;

  // An ephemeral volume's private agent mount goes with its only publication.
  std::string dir = EphemeralDir(req->volume_id());
  int err = 0;
  auto eph_mounted = mounter_.IsMountPoint(dir);
  if (!eph_mounted) return ToGrpc(eph_mounted.error());
  if (*eph_mounted || PathExists(dir, &err) || err != ENOENT) {
    if (auto s = AgentUnmount(dir); !s.ok()) return s;
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "remove ephemeral staging dir " + dir + ": " + std::strerror(errno));
    }
    log::Info("ephemeral volume torn down", {{"volume", req->volume_id()}, {"private_mount", dir}});
  }
  log::Info("volume unpublished", {{"volume", req->volume_id()}, {"target", req->target_path()}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodeGetVolumeStats(grpc::ServerContext*,
                                            const csi::v1::NodeGetVolumeStatsRequest* req,
                                            csi::v1::NodeGetVolumeStatsResponse* resp) {
  if (req->volume_id().empty()) return Invalid("volume_id is required");
  if (req->volume_path().empty()) return Invalid("volume_path is required");
  const std::string& path = req->volume_path();
  const std::string& volume_id = req->volume_id();
  auto* cond = resp->mutable_volume_condition();

  // The mount table first: touching a mount whose daemon hangs would hang this call.
  auto mounts = mounter_.ListMounts();
  if (!mounts) return ToGrpc(mounts.error());
  auto here = FindMount(*mounts, mounter_.CanonicalPath(path));
  if (!here) {
    struct stat st;
    std::string why = ::lstat(path.c_str(), &st) != 0 ? std::strerror(errno) : "not a mount point";
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "volume " + volume_id + " is not mounted at " + path + " (" + why + ")");
  }
  if (mounter_.IsStale(path)) {
    cond->set_abnormal(true);
    cond->set_message("mount at " + path +
                      " is stale (transport endpoint is not connected): the cache agent that "
                      "served it is gone; restart the pod to remount");
    return grpc::Status::OK;
  }

  auto agent_mounts = agent_.ListMounts();
  if (!agent_mounts) return AgentErrorAsCondition(agent_mounts.error(), cond);
  const MountInfo* backing = BackingAgentMount(mounter_, *agent_mounts, *mounts, *here, volume_id);
  if (!backing) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "volume " + volume_id + " is not mounted at " +
                                                         path + " (no cache agent mount backs it)");
  }
  if (backing->volume_id() != volume_id) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        path + " holds volume " + backing->volume_id() + ", not " + volume_id);
  }
  auto stats = agent_.VolumeStats("", backing->target_path());
  if (!stats) return AgentErrorAsCondition(stats.error(), cond);

  AddHubUsage(*stats, resp);
  SetHubCondition(
      *stats,
      HubName(StringMap(backing->volume_context().begin(), backing->volume_context().end()),
              volume_id),
      cond);
  log::Debug("volume stats", {{"volume", volume_id},
                              {"path", path},
                              {"cache_bytes", stats->cache_bytes()},
                              {"cache_hits", stats->cache_hits()},
                              {"cache_misses", stats->cache_misses()},
                              {"hub_read_bytes", stats->hub_read_bytes()},
                              {"cache_read_bytes", stats->cache_read_bytes()},
                              {"hub_reachable", stats->hub_reachable()}});
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodeGetCapabilities(grpc::ServerContext*,
                                             const csi::v1::NodeGetCapabilitiesRequest*,
                                             csi::v1::NodeGetCapabilitiesResponse* resp) {
  for (auto type : {csi::v1::NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME,
                    csi::v1::NodeServiceCapability::RPC::GET_VOLUME_STATS,
                    csi::v1::NodeServiceCapability::RPC::VOLUME_CONDITION,
                    csi::v1::NodeServiceCapability::RPC::VOLUME_MOUNT_GROUP}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status NodeServer::NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                                     csi::v1::NodeGetInfoResponse* resp) {
  resp->set_node_id(config_.node_id);
  if (!config_.region.empty() || !config_.zone.empty()) {
    auto* segments = resp->mutable_accessible_topology()->mutable_segments();
    if (!config_.region.empty()) (*segments)["topology.spoke.csi.dev/region"] = config_.region;
    if (!config_.zone.empty()) (*segments)["topology.spoke.csi.dev/zone"] = config_.zone;
  }
  return grpc::Status::OK;
}

}  // namespace spoke::node
