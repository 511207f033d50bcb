#include "cache-agent/fuse/fuse_volume_mounter.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/metadata_cache.h"
#include "cache-agent/fs/prefetch_driver.h"
#include "cache-agent/fs/volume_fs.h"
#include "cache-agent/fuse/fuse_adapter.h"
#include "cache-agent/prefetch/sequential_predictor.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;

class FuseMountedVolume final : public MountedVolume {
 public:
  FuseMountedVolume(std::string id, VolumeContext ctx, std::string target, bool read_only,
                    BlockCache* cache, std::shared_ptr<CacheListenerFanout> listeners)
      : id_(std::move(id)),
        ctx_(std::move(ctx)),
        target_(std::move(target)),
        read_only_(read_only),
        cache_(cache),
        listeners_(std::move(listeners)),
        volume_key_(VolumeKey(id_)) {}

  ~FuseMountedVolume() override {
    (void)Unmount();
    fuse_.reset();
    // No cache verdict may reach the scheduler once it is gone.
    if (listeners_ && driver_) listeners_->Remove(volume_key_, driver_->listener());
    fs_.reset();
    driver_.reset();
    fetcher_.reset();
    metadata_.reset();
    remote_.reset();
  }

  const std::string& volume_id() const override { return id_; }
  const std::string& target_path() const override { return target_; }
  const VolumeContext& context() const override { return ctx_; }
  bool read_only() const override { return read_only_; }

  VolumeFigures Figures() override {
    VolumeFigures f;
    if (cache_ != nullptr) {
      f.cache_bytes = cache_->VolumeBytes(volume_key_);
      f.checksum_failures = cache_->Stats().checksum_failures;
    }
    f.cache_hits = fetcher_->hits();
    f.cache_misses = fetcher_->misses();
    f.hub_read_bytes = fetcher_->hub_read_bytes();
    f.cache_read_bytes = fetcher_->cache_read_bytes();
    f.demand_miss_latency_ms_avg = fetcher_->demand_miss_latency_ms_avg();
    auto st = fs_->StatFs();
    f.hub_reachable = remote_->Reachable() && st.has_value();
    f.last_hub_error = st ? remote_->LastError() : st.error().ToString();
    if (st) {
      f.hub_total_bytes = st->total_bytes;
      f.hub_available_bytes = st->avail_bytes;
      f.hub_used_bytes = st->total_bytes - std::min(st->total_bytes, st->free_bytes);
      f.hub_total_inodes = st->total_files;
      f.hub_free_inodes = st->free_files;
    }
    if (!driver_->empty()) {
      driver_->UpdateMetrics();
      driver_->Stats().FillFigures(&f);  // experts, prefetched bytes, demand-miss latency
    }
    return f;
  }

  Status Warmup(const std::string& path_prefix,
                const std::function<void(const WarmupFigures&)>& progress,
                const std::atomic<bool>& cancelled) override {
    auto prefix = NormalizeRelativePath(path_prefix, "path");
    if (!prefix) return std::unexpected(prefix.error());
    while (!metadata_->WaitWalk(200ms)) {
      if (cancelled.load()) return Fail(Code::kCancelled, "warm-up cancelled");
    }
    auto files = metadata_->Files(*prefix);
    if (files.empty() && !prefix->empty()) {
      auto r = metadata_->Resolve(*prefix);
      if (!r) return std::unexpected(r.error());
    }
    WarmupFigures figures;
    figures.files_total = files.size();
    for (const auto& f : files) figures.bytes_total += f.size;
    std::atomic<uint64_t> next{0}, files_done{0}, bytes_done{0}, hub_bytes{0};
    std::mutex err_mu;
    std::optional<Error> first_error;
    uint32_t bs = fetcher_->block_size();
    auto worker = [&] {
      while (!cancelled.load()) {
        uint64_t i = next.fetch_add(1);
        if (i >= files.size()) return;
        const auto& wf = files[i];
        FileRef ref{wf.path, wf.file_id, wf.version, wf.size};
        uint64_t blocks = (wf.size + bs - 1) / bs;
        for (uint64_t b = 0; b < blocks && !cancelled.load(); b += 64) {
          auto r = fetcher_->Warm(ref, b, std::min<uint64_t>(64, blocks - b));
          if (!r) {
            std::lock_guard<std::mutex> lock(err_mu);
            if (!first_error) first_error = r.error().Wrap("warm-up of " + wf.path);
            break;
          }
          hub_bytes += *r;
          bytes_done += std::min<uint64_t>(64ull * bs, wf.size - b * bs);
        }
        files_done++;
      }
    };
    std::vector<std::thread> workers;
    for (int i = 0; i < 8; ++i) workers.emplace_back(worker);
    auto report = [&] {
      figures.files_done = files_done.load();
      figures.bytes_done = bytes_done.load();
      figures.bytes_from_hub = hub_bytes.load();
      if (progress) progress(figures);
    };
    while (files_done.load() < files.size() && !cancelled.load()) {
      std::this_thread::sleep_for(200ms);
      report();
    }
    for (auto& t : workers) t.join();
    report();
    if (cancelled.load()) return Fail(Code::kCancelled, "warm-up cancelled");
    if (first_error) return std::unexpected(*first_error);
    return Ok();
  }

  Result<uint64_t> Evict(const std::string& path_prefix) override {
    auto prefix = NormalizeRelativePath(path_prefix, "path");
    if (!prefix) return std::unexpected(prefix.error());
    if (cache_ == nullptr) return uint64_t{0};
    if (prefix->empty()) return cache_->Evict(volume_key_, 0);
    uint64_t n = 0;
    for (const auto& f : metadata_->Files(*prefix)) n += cache_->Evict(volume_key_, f.file_id);
    return n;
  }

  // The hint expert (auto mode) fetches the named files ahead, in the given order, as the
  // budget allows. Paths that name no regular file of the volume are rejected here (the
  // caller learns of typos); other modes reject every path.
  HintFigures Hint(const std::vector<std::string>& paths) override {
    HintFigures h;
    std::vector<std::string> known;
    for (const auto& p : paths) {
      auto norm = NormalizeRelativePath(p, "path");
      auto r = norm ? metadata_->Resolve(*norm) : Result<InodeAttr>(std::unexpected(norm.error()));
      if (!r || !r->attr.is_reg()) {
        h.rejected++;
        continue;
      }
      known.push_back(*norm);
    }
    HintCounts c = driver_->AddHintPaths(known);
    driver_->Tick();  // start fetching now, not at the next tick
    h.accepted += c.accepted;
    h.rejected += c.rejected;
    return h;
  }

  Status Unmount() override {
    if (fuse_ == nullptr) return Ok();
    return fuse_->Unmount();
  }

  // Built by the mounter, in order.
  std::unique_ptr<LibnfsRemote> remote_;
  std::unique_ptr<MetadataCache> metadata_;
  std::unique_ptr<BlockFetcher> fetcher_;
  std::unique_ptr<PrefetchDriver> driver_;
  std::unique_ptr<VolumeFs> fs_;
  std::unique_ptr<FuseAdapter> fuse_;

 private:
  std::string id_;
  VolumeContext ctx_;
  std::string target_;
  bool read_only_;
  BlockCache* cache_;
  std::shared_ptr<CacheListenerFanout> listeners_;
  uint64_t volume_key_;
};

}  // namespace

Status FuseVolumeMounter::Config::Validate() const {
  if (auto st = hub.Validate(); !st) return std::unexpected(st.error().Wrap("hub"));
  if (read_ahead_max_bytes < block_size)
    return Fail(Code::kInvalidArgument, "read_ahead_max_bytes: must be >= one block");
  if (walk_concurrency < 1 || walk_concurrency > 256)
    return Fail(Code::kInvalidArgument, "walk_concurrency: must be in 1..256");
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0)
    return Fail(Code::kInvalidArgument, "block_size: must be a power of two >= 4096");
  return Ok();
}

FuseVolumeMounter::FuseVolumeMounter(const Config& config, BlockCache* cache,
                                     metrics::Registry* registry)
    : config_(config),
      cache_(cache),
      registry_(registry),
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
  if (auto st = config_.Validate(); !st) return std::unexpected(st.error());
  if (volume_id.empty()) return Fail(Code::kInvalidArgument, "volume_id: is required");
  if (context.hub.server.empty())
    return Fail(Code::kInvalidArgument, "server: the hub is not set in the volume context");
  auto path = NormalizeRelativePath(context.path, "path");
  if (!path) return std::unexpected(path.error());
  bool ro = read_only || context.read_only();
  metrics::Labels labels{{"volume", VolumeMetricsLabel(volume_id)}};

  auto vol =
      std::make_unique<FuseMountedVolume>(volume_id, context, target_path, ro, cache_, listeners_);
  LibnfsRemote::Config hub = config_.hub;
  if (context.hub_timeout_seconds > 0) hub.request_timeout_seconds = context.hub_timeout_seconds;
  if (!context.identity.allow_root) {  // no request as root unless the StorageClass allows it
    hub.uid = context.identity.uid;
    hub.gid = context.identity.gid;
  }
  auto remote = LibnfsRemote::Connect(context.hub, *path, hub, registry_, labels);
  if (!remote) return std::unexpected(remote.error());
  vol->remote_ = std::move(*remote);

  MetadataCache::Config mc;
  mc.consistency = context.cache.consistency;
  mc.ttl_seconds = context.cache.ttl_seconds;
  mc.walk_concurrency = config_.walk_concurrency;
  if (auto st = mc.Validate(); !st) return std::unexpected(st.error());
  vol->metadata_ = std::make_unique<MetadataCache>(*vol->remote_, mc, SystemClock::Get());
  if (auto st = vol->metadata_->Init(); !st) {
    Error e = st.error();
    if (e.code() == Code::kTimeout) e = Error(Code::kUnavailable, e.message());
    return std::unexpected(e.Wrap("volume " + volume_id + ": root of the volume"));
  }
  vol->metadata_->StartWalk();

  BlockFetcher::Config fc;
  fc.block_size = cache_ != nullptr ? cache_->block_size() : config_.block_size;
  fc.max_hub_inflight = hub.connections * hub.inflight_per_connection;
  fc.prefetch_bytes_max = config_.prefetch_bytes_max;
  if (auto st = fc.Validate(); !st) return std::unexpected(st.error());
  metrics::Registry* reg = registry_;
  if (reg == nullptr) {
    // Keep counters somewhere even without an agent registry.
    static metrics::Registry fallback;
    reg = &fallback;
  }
  vol->fetcher_ =
      std::make_unique<BlockFetcher>(*vol->remote_, cache_, VolumeKey(volume_id), fc, *reg, labels);
  PrefetchDriver::Config pc;
  pc.volume_id = VolumeMetricsLabel(volume_id);  // labels its metrics
  pc.mode = context.cache.prefetch;
  pc.read_ahead_max_bytes = config_.read_ahead_max_bytes;
  // The volume's share of the cache for unverified prefetches: a quarter of it (as
  // NoThrashPolicy's largest transient share), at least the read-ahead window.
  uint64_t capacity = cache_ != nullptr ? cache_->Stats().capacity_bytes : 0;
  pc.space_budget_bytes = std::max<uint64_t>(capacity / 4, config_.read_ahead_max_bytes);
  pc.max_inflight_bytes = std::min<uint64_t>(64ull << 20, fc.prefetch_bytes_max);
  vol->driver_ = std::make_unique<PrefetchDriver>(pc, *vol->fetcher_, SystemClock::Get(),
                                                  vol->metadata_.get(), registry_);
  if (vol->driver_->listener() != nullptr)
    listeners_->Add(vol->fetcher_->volume_key(), vol->driver_->listener());

  VolumeFs::Config vc;
  vc.volume_id = volume_id;
  vc.read_only = ro;
  vc.consistency = context.cache.consistency;
  vol->fs_ = std::make_unique<VolumeFs>(vc, *vol->remote_, *vol->metadata_, *vol->fetcher_,
                                        vol->driver_->empty() ? nullptr : vol->driver_.get(),
                                        SystemClock::Get());

  FuseAdapter::Options fo;
  fo.mountpoint = target_path;
  fo.read_only = ro;
  fo.consistency = context.cache.consistency;
  fo.ttl_seconds = context.cache.ttl_seconds;
  fo.allow_other = config_.allow_other;
  auto fuse = FuseAdapter::Mount(*vol->fs_, fo);
  if (!fuse) return std::unexpected(fuse.error());
  vol->fuse_ = std::move(*fuse);
  log::Info("volume ready", {{"volume", volume_id},
                             {"target", target_path},
                             {"hub", vol->remote_->hub_name()},
                             {"consistency", std::string(ToString(context.cache.consistency))},
                             {"prefetch", std::string(ToString(context.cache.prefetch))}});
  return std::unique_ptr<MountedVolume>(std::move(vol));
}

Result<std::unique_ptr<VolumeMounter>> MakeFuseVolumeMounter(const AgentConfig& config,
                                                             BlockCache& cache,
                                                             metrics::Registry& registry) {
  FuseVolumeMounter::Config c;
  c.hub.connections = config.hub.connections;
  c.hub.inflight_per_connection = config.hub.inflight_per_connection;
  c.hub.request_timeout_seconds = config.hub.request_timeout_seconds;
  c.hub.retries = config.hub.retries;
  c.read_ahead_max_bytes = config.read_ahead_max_bytes;
  c.block_size = cache.block_size();
  if (auto st = c.Validate(); !st) return std::unexpected(st.error());
  return std::unique_ptr<VolumeMounter>(std::make_unique<FuseVolumeMounter>(c, &cache, &registry));
}

}  // namespace spoke::agent
