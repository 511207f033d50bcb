#include "cache-agent/exe/fuse_volume_mounter.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include "cache-agent/agent/mount_manager.h"
#include "cache-agent/fuse/fuse_adapter.h"
#include "cache-agent/remote/hub_client.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

// Where a session that would not end keeps its adapter and volume (reachable, so leak checkers
// stay quiet about it), for the rest of the process.
void KeepForever(std::unique_ptr<FuseAdapter> fuse, std::unique_ptr<Volume> volume,
                 std::unique_ptr<PeerVolume> peer) {
  static std::mutex mu;
  static auto* kept =
      new std::vector<std::tuple<std::unique_ptr<FuseAdapter>, std::unique_ptr<Volume>,
                                 std::unique_ptr<PeerVolume>>>();
  std::lock_guard lock(mu);
  kept->emplace_back(std::move(fuse), std::move(volume), std::move(peer));
}

// A Volume served by a FUSE session: what the control plane holds for a mount.
class FuseMountedVolume final : public MountedVolume {
 public:
  FuseMountedVolume(std::unique_ptr<Volume> volume, std::string target)
      : volume_(std::move(volume)), target_(std::move(target)) {}
  ~FuseMountedVolume() override {
    if (peer_ != nullptr)
      peer_->ServeBlocksFrom(nullptr);  // no peer is answered from a closing volume
    (void)Unmount();
    if (fuse_ != nullptr && !fuse_->session_ended()) {
      // A worker is still inside the volume (a request the hub has not answered): freeing the
      // stack under it would crash the agent. Keep both alive; the loop ends with the process.
      log::Error("FUSE session still running at unmount; its volume is kept in memory",
                 {{"target", target_}});
      KeepForever(std::move(fuse_), std::move(volume_), std::move(peer_));
      return;
    }
    fuse_.reset();  // the session ends before the stack it serves
    volume_.reset();
    peer_.reset();  // the fetcher's block source: after the fetcher
  }

  const std::string& volume_id() const override { return volume_->volume_id(); }
  const std::string& target_path() const override { return target_; }
  const VolumeContext& context() const override { return volume_->context(); }
  bool read_only() const override { return volume_->read_only(); }
  VolumeFigures Figures() override { return volume_->Figures(); }
  Status Warmup(const std::string& path_prefix, const WarmupOptions& options,
                const std::function<void(const WarmupFigures&)>& progress,
                const std::atomic<bool>& cancelled) override {
    return volume_->Warmup(path_prefix, options, progress, cancelled);
  }
  Result<uint64_t> Evict(const std::string& path_prefix) override {
    return volume_->Evict(path_prefix);
  }
  HintFigures Hint(const std::vector<std::string>& paths) override { return volume_->Hint(paths); }
  Status Unmount() override {
    if (fuse_ == nullptr) return Ok();
    return fuse_->Unmount();
  }
  int fuse_fd() const override { return fuse_ == nullptr ? -1 : fuse_->session_fd(); }
  std::string takeover_json() const override {
    return fuse_ == nullptr ? "{}" : fuse_->init_json();
  }
  Status HandOver(std::chrono::milliseconds timeout) override {
    if (fuse_ == nullptr) return Ok();
    return fuse_->HandOver(timeout);
  }
  bool connection_lost() const override { return fuse_ != nullptr && fuse_->connection_lost(); }

  Volume& volume() { return *volume_; }
  // The FUSE session that serves the volume from now on.
  void AttachSession(std::unique_ptr<FuseAdapter> fuse) { fuse_ = std::move(fuse); }
  // The volume's peer side (its fetcher's block source); peers are answered from now on.
  void ServePeers(std::unique_ptr<PeerVolume> peer) {
    peer_ = std::move(peer);
    if (peer_ == nullptr) return;
    // A peer's block is read only for the file this volume sees at that path, at the size
    // it has here, so that a stale or wrong request never stores bytes under a wrong key.
    Volume* v = volume_.get();
    peer_->ServeBlocksFrom(&v->fetcher(), [v](const std::string& path) -> Result<FileRef> {
      SPOKE_TRY(auto a, v->metadata().Resolve(path));
      if (!S_ISREG(a.attr.mode)) return Fail(Code::kNotFound, path + " is not a regular file");
      return FileRef{.path = path,
                     .file_id = a.attr.file_id,
                     .version = a.attr.ContentVersion(),
                     .size = a.attr.size};
    });
  }

 private:
  std::unique_ptr<PeerVolume> peer_;  // outlives volume_ (declared first, destroyed last)
  std::unique_ptr<Volume> volume_;
  std::string target_;
  std::unique_ptr<FuseAdapter> fuse_;
};

}  // namespace

Status FuseVolumeMounter::Config::Validate() const {
  SPOKE_RETURN_IF_ERROR_WRAP(hub.Validate(), "hub");
  // The per-volume settings are the Volume's: one check, in Volume::Config.
  Volume::Config v;
  v.volume_id.push_back('-');  // any valid id: only the settings are checked here
  v.read_ahead_max_bytes = read_ahead_max_bytes;
  v.walk_concurrency = walk_concurrency;
  v.block_size = block_size;
  v.hints_max_lines = hints_max_lines;
  v.hints_max_bytes = hints_max_bytes;
  return v.Validate();
}

FuseVolumeMounter::FuseVolumeMounter(const Config& config, BlockCache* cache,
                                     metrics::Registry* registry, PeerNode* peers)
    : config_(config),
      cache_(cache),
      registry_(registry),
      peers_(peers),
      listeners_(std::make_shared<CacheListenerFanout>()) {
  if (cache_ != nullptr) cache_->SetListener(listeners_.get());
}

FuseVolumeMounter::~FuseVolumeMounter() {
  if (cache_ != nullptr) cache_->SetListener(nullptr);
}

Result<std::unique_ptr<MountedVolume>> FuseVolumeMounter::Mount(const std::string& volume_id,
                                                                const VolumeContext& context,
                                                                const std::string& target_path,
                                                                bool read_only) {
  return MountOrAdopt(volume_id, context, target_path, read_only, UniqueFd(), "");
}

Result<std::unique_ptr<MountedVolume>> FuseVolumeMounter::Adopt(const std::string& volume_id,
                                                                const VolumeContext& context,
                                                                const std::string& target_path,
                                                                bool read_only, UniqueFd fuse_fd,
                                                                const std::string& takeover_json) {
  if (!fuse_fd.valid()) return Fail(Code::kInvalidArgument, "fuse_fd: not a descriptor");
  return MountOrAdopt(volume_id, context, target_path, read_only, std::move(fuse_fd),
                      takeover_json);
}

namespace {

// The mounter's hub pool settings, with the volume's hub timeout and identity.
LibnfsRemote::Config VolumeHubConfig(LibnfsRemote::Config hub, const VolumeContext& context,
                                     bool adopting) {
  if (context.hub_timeout_seconds > 0) hub.request_timeout_seconds = context.hub_timeout_seconds;
  if (!context.identity.allow_root) {  // no request as root unless the StorageClass allows it
    hub.uid = context.identity.uid;
    hub.gid = context.identity.gid;
  }
  // The same identity model for the calls made for a caller (the *As operations).
  hub.identity_mode = context.identity.mode == HubIdentity::kFixed
                          ? LibnfsRemote::Config::IdentityMode::kFixed
                          : LibnfsRemote::Config::IdentityMode::kCaller;
  hub.fixed_uid = context.identity.uid;
  hub.fixed_gid = context.identity.gid;
  hub.allow_root = context.identity.allow_root;
  // Handles kept by path lag behind renames other clients make on the hub: reads by handle
  // check the file id they mean, listings cannot. Strict volumes (close-to-open against
  // other writers) keep none: they resolve names at the time of each call, as a kernel NFS
  // client would (a listing looks its directory up, then reads its pages by that handle).
  if (context.cache.consistency == Consistency::kStrict) hub.fh_table_size = 0;
  // A connection taken over is served whether or not the hub answers now (a restart while the
  // WAN is down): the pool mounts in the background, and calls meanwhile fail within their
  // bound. Detaching it would end every pod's bind mount of it.
  if (adopting) hub.wait_for_mount = false;
  return hub;
}

FuseAdapter::Options FuseOptions(const FuseVolumeMounter::Config& config,
                                 const std::string& target_path, const VolumeContext& context,
                                 bool read_only, int max_hub_inflight,
                                 metrics::Registry* registry) {
  FuseAdapter::Options fo;
  fo.mountpoint = target_path;
  fo.read_only = read_only;
  fo.consistency = context.cache.consistency;
  fo.ttl_seconds = context.cache.ttl_seconds;
  fo.allow_other = config.allow_other;
  // A worker per read the hub may have in flight, and room beside them for cached reads and
  // metadata requests.
  fo.max_threads = std::clamp(max_hub_inflight + 32, 64, 1024);
  fo.registry = registry;
  fo.kernel_read_ahead_bytes = config.kernel_read_ahead_bytes;
  return fo;
}

}  // namespace

Volume::Config FuseVolumeMounter::VolumeSettings(const LibnfsRemote::Config& hub) const {
  Volume::Config vc;
  vc.read_ahead_max_bytes = config_.read_ahead_max_bytes;
  vc.prefetch_bytes_max = config_.prefetch_bytes_max;
  vc.max_hub_inflight = hub.connections * hub.inflight_per_connection;
  // One hub timeout on the wire plus as long again queued behind other reads.
  vc.read_deadline =
      std::chrono::milliseconds(static_cast<int64_t>(2 * 1000 * hub.request_timeout_seconds));
  vc.walk_concurrency = config_.walk_concurrency;
  vc.link_queue_target = config_.link_queue_target;
  vc.link_initial_window = config_.link_initial_window;
  vc.block_size = config_.block_size;
  vc.memory = config_.memory;
  vc.write_back_bytes = config_.write_back_bytes;
  vc.hints_max_lines = config_.hints_max_lines;
  vc.hints_max_bytes = config_.hints_max_bytes;
  return vc;
}

// Cache sharing: the cluster's peers are asked before the hub, and answered for this volume,
// by hub identity (the hub export, the volume's path under it and who it reads the hub as).
// Read-only volumes only: a writable one holds blocks written here that no peer may be given.
std::unique_ptr<PeerVolume> FuseVolumeMounter::AttachPeer(const VolumeContext& context,
                                                          const std::string& path, bool read_only) {
  if (peers_ == nullptr || !(read_only || context.read_only())) return nullptr;
  return peers_->AttachVolume(
      PeerHubName(context.hub.server, context.hub.nfs_port, context.hub.share), path,
      PeerAccessName(context.identity),
      cache_ != nullptr ? cache_->block_size() : config_.block_size);
}

Result<std::unique_ptr<MountedVolume>> FuseVolumeMounter::MountOrAdopt(
    const std::string& volume_id, const VolumeContext& context, const std::string& target_path,
    bool read_only, UniqueFd fuse_fd, const std::string& takeover_json) {
  SPOKE_RETURN_IF_ERROR(config_.Validate());
  if (volume_id.empty()) return Fail(Code::kInvalidArgument, "volume_id: is required");
  if (context.hub.server.empty())
    return Fail(Code::kInvalidArgument, "server: the hub is not set in the volume context");
  SPOKE_TRY(auto path, NormalizeRelativePath(context.path, "path"));
  metrics::Labels labels{{"volume", VolumeMetricsLabel(volume_id)}};
  const bool adopting = fuse_fd.valid();
  const LibnfsRemote::Config hub = VolumeHubConfig(config_.hub, context, adopting);
  SPOKE_TRY(auto connected, ConnectHub(context.hub, path, hub, registry_, labels));
  std::unique_ptr<RemoteFs> remote = std::move(connected.remote);
  const std::string hub_name = connected.name;

  Volume::Config vc = VolumeSettings(hub);
  vc.volume_id = volume_id;
  vc.context = context;
  vc.read_only = read_only;
  if (!config_.state_dir.empty()) {
    vc.state_dir = config_.state_dir + "/mounts/" + MountManager::KeeperKey(target_path);
  }
  vc.adopted = adopting;
  std::unique_ptr<PeerVolume> peer = AttachPeer(context, path, read_only);
  vc.block_source = peer.get();
  SPOKE_TRY(auto volume,
            Volume::Open(vc, std::move(remote), cache_, listeners_, registry_, SystemClock::Get()));
  auto vol = std::make_unique<FuseMountedVolume>(std::move(volume), target_path);
  vol->ServePeers(std::move(peer));

  const FuseAdapter::Options fo =
      FuseOptions(config_, target_path, context, vol->read_only(), vc.max_hub_inflight, registry_);
  // A taken-over connection: the kernel holds numbers with counts this process never saw.
  if (adopting) vol->volume().metadata().AdoptKernelReferences();
  SPOKE_TRY(auto fuse,
            adopting ? FuseAdapter::Adopt(vol->volume().fs(), fo, std::move(fuse_fd), takeover_json)
                     : FuseAdapter::Mount(vol->volume().fs(), fo));
  vol->AttachSession(std::move(fuse));
  log::Info("volume ready", {{"volume", volume_id},
                             {"target", target_path},
                             {"hub", hub_name},
                             {"nfs", std::string(ToString(context.hub.nfs_version))},
                             {"consistency", std::string(ToString(context.cache.consistency))},
                             {"prefetch", std::string(ToString(context.cache.prefetch))}});
  return std::unique_ptr<MountedVolume>(std::move(vol));
}

Result<std::unique_ptr<VolumeMounter>> MakeFuseVolumeMounter(const AgentConfig& config,
                                                             BlockCache& cache,
                                                             metrics::Registry& registry,
                                                             MemoryBudget& memory,
                                                             PeerNode* peers) {
  FuseVolumeMounter::Config c;
  c.hub.connections = config.hub.connections;
  c.hub.inflight_per_connection = config.hub.inflight_per_connection;
  c.hub.request_timeout_seconds = config.hub.request_timeout_seconds;
  c.hub.retries = config.hub.retries;
  c.read_ahead_max_bytes = config.read_ahead_max_bytes;
  // A small cache gets less prefetch in flight than the 256 MiB a large one does.
  c.prefetch_bytes_max = DefaultPrefetchBytesMax(config.cache_size_bytes, c.read_ahead_max_bytes);
  c.kernel_read_ahead_bytes = config.kernel_read_ahead_bytes.value_or(
      std::clamp<uint64_t>(memory.total() / 64 / 4096 * 4096, 128u << 10, 16u << 20));
  c.block_size = cache.block_size();
  c.memory = &memory;
  c.state_dir = config.state_dir;
  // One volume's hints may take at most a quarter of what prefetch and hints share, so a
  // flood on one mount leaves room for the others (the budget bounds them all together).
  c.hints_max_bytes = std::clamp<uint64_t>(memory.background_limit() / 4,
                                           HintPredictor::HintBytes(kMaxHintPath), 64ull << 20);
  c.write_back_bytes = config.write_back_bytes_per_volume.value_or(
      std::clamp<uint64_t>(memory.background_limit() / 4, 16ull << 20, 128ull << 20));
  SPOKE_RETURN_IF_ERROR(c.Validate());
  return std::unique_ptr<VolumeMounter>(
      std::make_unique<FuseVolumeMounter>(c, &cache, &registry, peers));
}

}  // namespace spoke::agent
