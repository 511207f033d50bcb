#include "cache-agent/volume/volume.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache-agent/fs/kept_root.h"
#include "cache-agent/fs/kernel_inode_log.h"
#include "common/log.h"

namespace spoke::agent {

using namespace std::chrono_literals;

Status Volume::Config::Validate() const {
  if (volume_id.empty()) return Fail(Code::kInvalidArgument, "volume_id: is required");
  if (read_ahead_max_bytes < block_size)
    return Fail(Code::kInvalidArgument, "read_ahead_max_bytes: must be >= one block");
  if (walk_concurrency < 1 || walk_concurrency > 256)
    return Fail(Code::kInvalidArgument, "walk_concurrency: must be in 1..256");
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0)
    return Fail(Code::kInvalidArgument, "block_size: must be a power of two >= 4096");
  if (hints_max_lines == 0) return Fail(Code::kInvalidArgument, "hints_max_lines: must be > 0");
  if (hints_max_bytes < HintPredictor::HintBytes(kMaxHintPath)) {
    return Fail(Code::kInvalidArgument, "hints_max_bytes: must hold one longest hint (" +
                                            std::to_string(HintPredictor::HintBytes(kMaxHintPath)) +
                                            " bytes)");
  }
  return Ok();
}

Volume::Volume(const Config& config, BlockCache* cache,
               std::shared_ptr<CacheListenerFanout> listeners)
    : config_(config),
      read_only_(config.read_only || config.context.read_only()),
      cache_(cache),
      listeners_(std::move(listeners)) {}

Volume::~Volume() {
  // No cache verdict may reach the scheduler once it is gone.
  if (listeners_ && driver_ && driver_->listener() != nullptr)
    listeners_->Remove(fetcher_->volume_key(), driver_->listener());
  fs_.reset();
  driver_.reset();
  fetcher_.reset();
  if (remote_) remote_->UseHandleStore(nullptr);  // before the store goes
  metadata_.reset();
  remote_.reset();
}

// What kubelet does for a volume it owns (a setgid, group-writable root of the fsGroup), done
// on the hub: kubelet's own chown would go as root, which the hub sees as hubUid without the
// group. The change goes as the volume's identity with the group among its groups, as the
// root's owner may give it to a group it is in. A refusal leaves the directory's group, as
// kubelet's failed chown does, and says so.
void Volume::ApplyMountGroup(uint32_t group, const std::string& root_file) {
  const FileAttr root = metadata_->RootAttr();
  const uint32_t mode = (root.mode & 07777) | S_ISGID | S_IRWXG;
  if (root.gid == group && (root.mode & 07777) == mode) return;
  const HubIdentityParams& id = config_.context.identity;
  const Credentials as{id.uid, id.gid, {group}};
  // The group first, then the mode: a hub may apply one SETATTR's mode before its owner, and
  // the setgid bit set on a directory of a group the caller is not in is dropped.
  SetAttrRequest to_group;
  to_group.gid = group;
  SetAttrRequest to_mode;
  to_mode.mode = mode;
  auto after = remote_->SetAttrAs(as, "", to_group);
  if (after) after = remote_->SetAttrAs(as, "", to_mode);
  if (!after) {
    log::Warn(
        "cannot give the volume root the pod's fsGroup: the pod's files keep the "
        "directory's group",
        {{"volume", config_.volume_id}, {"group", group}, {"error", after.error().ToString()}});
    return;
  }
  metadata_->SetAttr(kRootIno, *after);
  if (!root_file.empty()) (void)SaveRootAttr(root_file, metadata_->RootAttr());
  // What provisioning put there as the volume's identity (the controller's record) follows,
  // as kubelet's chown would have taken it; once, as the root had another group until now.
  if (auto entries = remote_->ReadDir(""); entries) {
    for (const DirEntry& e : *entries) {
      if (e.attr.uid != id.uid || e.attr.gid != id.gid) continue;
      if (auto r = remote_->SetAttrAs(as, e.name, to_group); !r) {
        log::Warn(
            "cannot give an entry of the volume root the pod's fsGroup",
            {{"volume", config_.volume_id}, {"name", e.name}, {"error", r.error().ToString()}});
      }
    }
  }
  log::Info("volume root given the pod's fsGroup",
            {{"volume", config_.volume_id}, {"group", group}});
}

namespace {

MetadataCache::Config MetadataConfig(const Volume::Config& config) {
  MetadataCache::Config mc;
  mc.consistency = config.context.cache.consistency;
  mc.ttl_seconds = config.context.cache.ttl_seconds;
  mc.walk_concurrency = config.walk_concurrency;
  return mc;
}

BlockFetcher::Config FetcherConfig(const Volume::Config& config, const BlockCache* cache,
                                   Clock& clock) {
  BlockFetcher::Config fc;
  fc.block_size = cache != nullptr ? cache->block_size() : config.block_size;
  fc.max_hub_inflight = config.max_hub_inflight;
  fc.read_deadline = config.read_deadline;
  fc.prefetch_bytes_max = config.prefetch_bytes_max;
  fc.memory = config.memory;
  fc.source = config.block_source;
  fc.staging_bytes_max = config.staging_bytes_max;
  if (config.memory != nullptr) {
    fc.staging_bytes_max = std::min(fc.staging_bytes_max, config.memory->background_limit() / 4);
  }
  if (fc.staging_bytes_max < fc.block_size) fc.staging_bytes_max = 0;
  fc.clock = &clock;
  fc.pacing.target_queue = config.link_queue_target;
  fc.pacing.initial_window = config.link_initial_window;
  // Pacing only ever narrows what the slots and the prefetch bound allow on a fast link.
  fc.pacing.max_window = std::max<uint64_t>(
      fc.prefetch_bytes_max, static_cast<uint64_t>(fc.max_hub_inflight) * fc.block_size);
  return fc;
}

PrefetchDriver::Config DriverConfig(const Volume::Config& config, BlockCache* cache) {
  PrefetchDriver::Config pc;
  pc.volume_id = VolumeMetricsLabel(config.volume_id);  // labels its metrics
  pc.mode = config.context.cache.prefetch;
  pc.read_ahead_max_bytes = config.read_ahead_max_bytes;
  // The volume's share of the cache for unverified prefetches: a quarter of it (as
  // NoThrashPolicy's largest transient share), at least the read-ahead window.
  uint64_t capacity = cache != nullptr ? cache->Stats().capacity_bytes : 0;
  pc.space_budget_bytes = std::max<uint64_t>(capacity / 4, config.read_ahead_max_bytes);
  pc.max_inflight_bytes = std::min<uint64_t>(64ull << 20, config.prefetch_bytes_max);
  pc.memory = config.memory;
  pc.hints_max_lines = config.hints_max_lines;
  pc.hints_max_bytes = config.hints_max_bytes;
  return pc;
}

VolumeFs::Config FsConfig(const Volume::Config& config, OpenRecords* open_records, bool read_only) {
  const VolumeContext& context = config.context;
  VolumeFs::Config vc;
  vc.open_records = open_records;
  vc.volume_id = config.volume_id;
  vc.read_only = read_only;
  vc.consistency = context.cache.consistency;
  vc.write_back = context.write_mode != WriteMode::kSync;
  vc.write_back_config.unstable = context.write_mode == WriteMode::kUnstable;
  vc.write_back_config.budget_bytes = config.write_back_bytes;
  vc.write_back_config.memory = config.memory;
  // A hub restart (a few request timeouts) is ridden out; waits sit above the retries.
  auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(1.0, context.hub_timeout_seconds) * 1000));
  vc.write_back_config.retry_bound =
      std::max<std::chrono::milliseconds>(std::chrono::seconds(30), 3 * timeout);
  vc.write_back_config.wait_bound = vc.write_back_config.retry_bound + 2 * timeout;
  return vc;
}

}  // namespace

Status Volume::OpenRecordsInStateDir() {
  if (config_.state_dir.empty()) return Ok();
  auto records = OpenRecords::Open(config_.state_dir + "/open-files", /*clear=*/!config_.adopted);
  if (!records) {
    // Without them a writer's handle would reach the hub as the agent after a restart.
    return std::unexpected(records.error().Wrap("volume " + config_.volume_id +
                                                ": the state directory's open records"));
  }
  open_records_ = std::move(*records);
  return Ok();
}

Result<bool> Volume::InitRoot(const std::string& root_file) {
  auto kept_root = config_.adopted && !root_file.empty() ? LoadRootAttr(root_file) : std::nullopt;
  if (kept_root) {
    metadata_->InitFrom(*kept_root);
    return true;
  }
  if (auto st = metadata_->Init(); !st) {
    Error e = st.error();
    if (e.code() == Code::kTimeout) e = Error(Code::kUnavailable, e.message());
    return std::unexpected(e.Wrap("volume " + config_.volume_id + ": root of the volume"));
  }
  if (!root_file.empty()) {
    if (auto saved = SaveRootAttr(root_file, metadata_->RootAttr()); !saved) {
      log::Warn("cannot keep the volume root for a restart: one while the hub is down fails",
                {{"volume", config_.volume_id}, {"error", saved.error().ToString()}});
    }
  }
  return false;
}

// Every inode the kernel holds is known to the next agent at once, hub or no hub.
void Volume::KeepKernelInodes() {
  const std::string inode_file = config_.state_dir + "/inodes";
  if (config_.adopted) {
    size_t known = metadata_->AdoptLoggedInodes(KernelInodeLog::Load(inode_file));
    log::Info("inodes the kernel holds, known from the last agent",
              {{"volume", config_.volume_id}, {"inodes", known}});
  }
  if (auto inode_log = KernelInodeLog::Open(inode_file, /*fresh=*/!config_.adopted); inode_log) {
    metadata_->LogKernelInodes(std::move(*inode_log));
  } else {
    log::Warn(
        "cannot keep the kernel's inodes for a restart: after one while the hub is "
        "down, files met before answer once the walk reaches them",
        {{"volume", config_.volume_id}, {"error", inode_log.error().ToString()}});
  }
}

Status Volume::OpenMetadata(Clock& clock) {
  const MetadataCache::Config mc = MetadataConfig(config_);
  SPOKE_RETURN_IF_ERROR(mc.Validate());
  metadata_ = std::make_unique<MetadataCache>(*remote_, mc, clock);
  SPOKE_RETURN_IF_ERROR(OpenRecordsInStateDir());
  const std::string root_file = config_.state_dir.empty() ? "" : config_.state_dir + "/root";
  SPOKE_TRY(const bool kept_root, InitRoot(root_file));
  const VolumeContext& context = config_.context;
  if (context.mount_group && !kept_root && !read_only_) {
    ApplyMountGroup(*context.mount_group, root_file);
  }
  if (!config_.state_dir.empty()) KeepKernelInodes();
  // Listed handles live in the metadata cache's inodes. Strict volumes read by path (their
  // remote ignores the store).
  if (mc.consistency != Consistency::kStrict) remote_->UseHandleStore(metadata_.get());
  metadata_->StartWalk();
  return Ok();
}

Result<std::unique_ptr<Volume>> Volume::Open(const Config& config, std::unique_ptr<RemoteFs> remote,
                                             BlockCache* cache,
                                             std::shared_ptr<CacheListenerFanout> listeners,
                                             metrics::Registry* registry, Clock& clock) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  if (remote == nullptr) return Fail(Code::kInvalidArgument, "remote: is required");
  std::unique_ptr<Volume> vol(new Volume(config, cache, std::move(listeners)));
  metrics::Registry& reg = registry != nullptr ? *registry : vol->own_registry_;
  // Hashed: metric labels carry no volume ids (share paths) or pod UIDs.
  metrics::Labels labels{{"volume", VolumeMetricsLabel(config.volume_id)}};
  vol->remote_ = std::move(remote);
  vol->RegisterWarmupSeries(reg, labels);
  SPOKE_RETURN_IF_ERROR(vol->OpenMetadata(clock));

  const BlockFetcher::Config fc = FetcherConfig(config, cache, clock);
  SPOKE_RETURN_IF_ERROR(fc.Validate());
  vol->fetcher_ = std::make_unique<BlockFetcher>(*vol->remote_, cache, VolumeKey(config.volume_id),
                                                 fc, reg, labels);
  vol->driver_ = std::make_unique<PrefetchDriver>(DriverConfig(config, cache), *vol->fetcher_,
                                                  clock, vol->metadata_.get(), &reg);
  if (vol->listeners_ && vol->driver_->listener() != nullptr)
    vol->listeners_->Add(vol->fetcher_->volume_key(), vol->driver_->listener());
  vol->fs_ = std::make_unique<VolumeFs>(
      FsConfig(config, vol->open_records_.get(), vol->read_only_), *vol->remote_, *vol->metadata_,
      *vol->fetcher_, vol->driver_->empty() ? nullptr : vol->driver_.get(), clock);
  return vol;
}

VolumeFigures Volume::Figures() {
  VolumeFigures f;
  f.cache_bytes = fetcher_->CachedBytes();
  if (cache_ != nullptr) f.checksum_failures = cache_->Stats().checksum_failures;
  f.cache_hits = fetcher_->hits();
  f.cache_misses = fetcher_->misses();
  f.hub_read_bytes = fetcher_->hub_read_bytes();
  f.cache_read_bytes = fetcher_->cache_read_bytes();
  // One source for the miss latency: the fetcher times each read that waited for the hub.
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
    PrefetchStats ps = driver_->Stats();
    f.prefetched_bytes_used = ps.prefetched_bytes_used;
    f.prefetched_bytes_wasted = ps.prefetched_bytes_wasted;
    f.experts = std::move(ps.experts);
    f.hints_rejected = ps.hints_rejected;
    f.hints_unresolved = ps.hints_unresolved;
    f.admission_declined_blocks = ps.admission_declined_blocks;
  }
  f.metadata_inodes = metadata_->entries();
  const StagingBuffer::Stats staged = fetcher_->staging_stats();
  f.staged_blocks_held = staged.blocks;
  f.staged_bytes_held = staged.bytes;
  f.staged_blocks = staged.staged;
  f.staged_hits = staged.hits;
  f.staged_dropped = staged.dropped_full + staged.expired + staged.memory_refused;
  f.staged_evicted = staged.evicted;
  if (const MemoryBudget* m = config_.memory; m != nullptr) {
    using Use = MemoryBudget::Use;
    f.memory.budget_bytes = m->total();
    f.memory.used_bytes = m->used();
    f.memory.peak_bytes = m->peak();
    f.memory.prefetch_bytes = m->used(Use::kPrefetch);
    f.memory.store_queue_bytes = m->used(Use::kStoreQueue);
    f.memory.demand_bytes = m->used(Use::kDemand);
    f.memory.hints_bytes = m->used(Use::kHints);
    f.memory.metadata_bytes = m->used(Use::kMetadata);
    f.memory.staged_bytes = m->used(Use::kStaged);
    f.memory.write_back_bytes = m->used(Use::kWriteBack);
    for (int i = 0; i < MemoryBudget::kUses; ++i) {
      f.memory.refusals += m->refusals(static_cast<Use>(i));
    }
  }
  return f;
}

namespace {

// Warm-up's tickets in flight. One thread keeps a window of warm tickets (each: up to 64
// blocks of one file, queued in the fetcher's warm-up class): it starts tickets while the
// window has room and finishes the oldest, so the hub sees every block the window holds at
// once, not one file per thread. The window is bounded in blocks by twice the fetcher's hub
// depth (the queued half refills slots as the older blocks come back, while finished tickets
// wait their turn to be collected) and in bytes by its store queue (stored blocks must fit
// it), and by the memory budget StartWarm takes room in; it always holds at least one ticket.
class WarmupWindow {
 public:
  // `rate` (optional): the warm-up's limit on what it fetches; a ticket then covers about a
  // second of it, so that progress is reported while the limit holds the starts back.
  WarmupWindow(BlockFetcher& fetcher, const std::function<void(const WarmupFigures&)>& progress,
               WarmRateLimiter* rate, const std::atomic<bool>& cancelled);

  // Files to warm after those added before.
  void Add(std::vector<WalkedFile> files);
  size_t files() const { return files_.size(); }
  bool empty() const { return window_.empty(); }
  const std::optional<Error>& first_error() const { return first_error_; }

  // Starts tickets while the window has room (or is empty).
  void StartTickets(const std::atomic<bool>& cancelled);
  // Waits for the oldest ticket, waking now and then to report and to notice a cancel.
  // Returns false when it is not finished by then.
  bool WaitOldest(std::chrono::milliseconds step);
  void FinishOldest();
  void Report();
  // Reports when the last report is 200 ms old.
  void MaybeReport();
  const WarmupFigures& figures() const { return figures_; }

 private:
  static constexpr uint64_t kTicketBlocks = 64;
  struct Pending {
    size_t file;
    uint64_t bytes;  // of the file's range the ticket covers
    BlockFetcher::WarmTicket ticket;
  };

  // Starts the current file's next ticket; false when the window has no room for it.
  bool StartNextTicket();

  BlockFetcher& fetcher_;
  std::vector<WalkedFile> files_;
  const std::function<void(const WarmupFigures&)>& progress_;
  WarmRateLimiter* rate_;
  const std::atomic<bool>& cancelled_;
  const uint32_t bs_;
  const uint64_t ticket_blocks_;
  const uint64_t window_blocks_;
  const uint64_t window_bytes_;
  WarmupFigures figures_;
  std::deque<Pending> window_;
  uint64_t window_used_blocks_ = 0, window_used_bytes_ = 0;
  std::vector<uint32_t> outstanding_;  // unfinished tickets per file
  std::vector<bool> failed_;
  uint64_t files_done_ = 0, bytes_done_ = 0, hub_bytes_ = 0;
  std::optional<Error> first_error_;
  size_t cur_ = 0;      // file whose blocks are being started
  uint64_t block_ = 0;  // its next block
  std::chrono::steady_clock::time_point next_report_;
};

WarmupWindow::WarmupWindow(BlockFetcher& fetcher,
                           const std::function<void(const WarmupFigures&)>& progress,
                           WarmRateLimiter* rate, const std::atomic<bool>& cancelled)
    : fetcher_(fetcher),
      progress_(progress),
      rate_(rate),
      cancelled_(cancelled),
      bs_(fetcher.block_size()),
      ticket_blocks_(rate == nullptr
                         ? kTicketBlocks
                         : std::clamp<uint64_t>(rate->bytes_per_second() / bs_, 1, kTicketBlocks)),
      window_blocks_(2 * static_cast<uint64_t>(fetcher.max_hub_inflight())),
      window_bytes_(fetcher.store_queue_bytes_max()),
      next_report_(std::chrono::steady_clock::now() + 200ms) {}

void WarmupWindow::Add(std::vector<WalkedFile> files) {
  for (auto& f : files) {
    figures_.files_total++;
    figures_.bytes_total += f.size;
    files_.push_back(std::move(f));
    outstanding_.push_back(0);
    failed_.push_back(false);
  }
}

void WarmupWindow::StartTickets(const std::atomic<bool>& cancelled) {
  while (cur_ < files_.size() && !cancelled.load()) {
    if (!StartNextTicket()) break;
  }
}

bool WarmupWindow::StartNextTicket() {
  const auto& wf = files_[cur_];
  const uint64_t blocks = (wf.size + bs_ - 1) / bs_;
  if (block_ >= blocks || failed_[cur_]) {
    if (outstanding_[cur_] == 0) files_done_++;
    cur_++;
    block_ = 0;
    return true;
  }
  const uint64_t n = std::min<uint64_t>(ticket_blocks_, blocks - block_);
  const uint64_t n_bytes = std::min<uint64_t>(n * bs_, wf.size - block_ * bs_);
  if (!window_.empty() &&
      (window_used_blocks_ + n > window_blocks_ || window_used_bytes_ + n_bytes > window_bytes_)) {
    return false;
  }
  FileRef ref{wf.path, wf.file_id, wf.version, wf.size};
  Pending p{cur_, n_bytes, fetcher_.StartWarm(ref, block_, n, rate_, &cancelled_)};
  window_used_blocks_ += p.ticket.blocks();
  window_used_bytes_ += p.ticket.bytes();
  outstanding_[cur_]++;
  window_.push_back(std::move(p));
  block_ += n;
  MaybeReport();
  return true;
}

bool WarmupWindow::WaitOldest(std::chrono::milliseconds step) {
  return fetcher_.WaitWarm(window_.front().ticket, std::chrono::steady_clock::now() + step);
}

// The files a warm-up covers, as the mount's walk lists them: on a cold mount the first
// reads go out one listing after the call, and the rest of the walk overlaps them. When the
// walk is over, the files the metadata cache holds that it did not list (a directory listed
// another way) follow. A file (by id: hard links) is returned once.
class WarmupFileFeed {
 public:
  WarmupFileFeed(MetadataCache& metadata, const std::string& prefix)
      : metadata_(metadata),
        prefix_(prefix),
        under_(prefix.empty() || prefix.back() == '/' ? prefix : prefix + "/") {}

  // The files listed since the last call; after the walk ended, every file not returned yet
  // (and over() is true from then on).
  std::vector<WalkedFile> Next() {
    std::vector<WalkedFile> out;
    if (over_) return out;
    over_ = metadata_.walk_done();  // read first: WalkedSince completes the walk then
    for (auto& f : over_ ? metadata_.Files(prefix_) : metadata_.WalkedSince(&cursor_)) {
      if (!prefix_.empty() && f.path != prefix_ && !f.path.starts_with(under_)) continue;
      if (known_.insert(f.file_id).second) out.push_back(std::move(f));
    }
    return out;
  }
  bool over() const { return over_; }
  size_t cursor() const { return cursor_; }

 private:
  MetadataCache& metadata_;
  const std::string prefix_, under_;
  std::unordered_set<uint64_t> known_;
  size_t cursor_ = 0;
  bool over_ = false;
};

void WarmupWindow::FinishOldest() {
  Pending p = std::move(window_.front());
  window_.pop_front();
  window_used_blocks_ -= p.ticket.blocks();
  window_used_bytes_ -= p.ticket.bytes();
  auto r = fetcher_.FinishWarm(std::move(p.ticket));
  if (r) {
    hub_bytes_ += *r;
    if (!failed_[p.file]) bytes_done_ += p.bytes;
  } else {
    if (!first_error_) first_error_ = r.error().Wrap("warm-up of " + files_[p.file].path);
    failed_[p.file] = true;  // its later blocks are not started
  }
  // A file is done when its last ticket is finished and the starter has moved past it
  // (files start in order: every file before `cur_` has all its tickets started).
  if (--outstanding_[p.file] == 0 && p.file != cur_) files_done_++;
}

void WarmupWindow::Report() {
  figures_.files_done = files_done_;
  figures_.bytes_done = bytes_done_;
  figures_.bytes_from_hub = hub_bytes_;
  if (progress_) progress_(figures_);
}

void WarmupWindow::MaybeReport() {
  if (std::chrono::steady_clock::now() < next_report_) return;
  Report();
  next_report_ = std::chrono::steady_clock::now() + 200ms;
}

}  // namespace

void Volume::RegisterWarmupSeries(metrics::Registry& reg, const metrics::Labels& labels) {
  auto result = [&](const char* r) {
    metrics::Labels l = labels;
    l["result"] = r;
    return &reg.GetCounter("spoke_warmups_total", "Warm-ups ended, by result", l);
  };
  warmup_series_ = WarmupSeries{
      .running = &reg.GetGauge("spoke_warmup_running", "Warm-ups running", labels),
      .remaining_bytes = &reg.GetGauge("spoke_warmup_remaining_bytes",
                                       "Bytes the running warm-ups have still to cache", labels),
      .bytes = &reg.GetCounter("spoke_warmup_bytes_total", "Bytes warm-ups found or made cached",
                               labels),
      .files = &reg.GetCounter("spoke_warmup_files_total", "Files warm-ups finished", labels),
      .ok = result("ok"),
      .failed = result("failed"),
      .cancelled = result("cancelled"),
  };
}

// Its progress reports move the volume's warm-up series by what changed since its last one;
// when it ends, its remaining bytes leave the gauge and its result is counted.
class Volume::WarmupRun {
 public:
  WarmupRun(const WarmupSeries& series, const std::function<void(const WarmupFigures&)>& progress)
      : series_(series), progress_(progress) {
    series_.running->Add(1);
  }
  ~WarmupRun() {
    series_.remaining_bytes->Add(-Remaining(last_));
    series_.running->Add(-1);
  }
  void Report(const WarmupFigures& f) {
    if (f.bytes_done > last_.bytes_done) series_.bytes->Inc(f.bytes_done - last_.bytes_done);
    if (f.files_done > last_.files_done) series_.files->Inc(f.files_done - last_.files_done);
    series_.remaining_bytes->Add(Remaining(f) - Remaining(last_));
    last_ = f;
    if (progress_) progress_(f);
  }
  Status End(Status s, bool cancelled) {
    (s ? series_.ok : cancelled ? series_.cancelled : series_.failed)->Inc();
    return s;
  }

 private:
  static int64_t Remaining(const WarmupFigures& f) {
    return f.bytes_total > f.bytes_done ? static_cast<int64_t>(f.bytes_total - f.bytes_done) : 0;
  }
  const WarmupSeries& series_;
  const std::function<void(const WarmupFigures&)>& progress_;
  WarmupFigures last_;
};

Status Volume::Warmup(const std::string& path_prefix,
                      const std::function<void(const WarmupFigures&)>& progress,
                      const std::atomic<bool>& cancelled) {
  return Warmup(path_prefix, WarmupOptions{}, progress, cancelled);
}

Status Volume::Warmup(const std::string& path_prefix, const WarmupOptions& options,
                      const std::function<void(const WarmupFigures&)>& progress,
                      const std::atomic<bool>& cancelled) {
  WarmupRun run(warmup_series_, progress);
  std::optional<WarmRateLimiter> rate;
  if (options.rate_bytes_per_second > 0) {
    rate.emplace(options.rate_bytes_per_second,
                 options.clock != nullptr ? *options.clock : SystemClock::Get(),
                 options.sleep_until);
  }
  WarmRateLimiter* limiter = rate ? &*rate : nullptr;
  auto report = [&](const WarmupFigures& f) { run.Report(f); };
  WarmupFigures figures;
  Status s = WarmupFiles(path_prefix, limiter, report, cancelled, &figures);
  // A verify pass also follows a warm-up that failed on some files: it fetches them again.
  if (options.verify && !cancelled.load() &&
      (s || (s.error().code() != Code::kInvalidArgument && s.error().code() != Code::kNotFound))) {
    auto prefix = NormalizeRelativePath(path_prefix, "path");
    Status v = VerifyFiles(prefix ? *prefix : "", limiter, report, cancelled, figures);
    if (s && !v) s = v;
    if (!s && v && !cancelled.load()) s = Ok();  // what the warm-up missed, verify fetched
  }
  return run.End(s, cancelled.load());
}

Status Volume::VerifyFiles(const std::string& prefix, WarmRateLimiter* rate,
                           const std::function<void(const WarmupFigures&)>& progress,
                           const std::atomic<bool>& cancelled, WarmupFigures& figures) {
  const uint32_t bs = fetcher_->block_size();
  std::optional<Error> first_error;
  auto next_report = std::chrono::steady_clock::now() + 200ms;
  for (const WalkedFile& wf : metadata_->Files(prefix)) {
    if (cancelled.load()) return Fail(Code::kCancelled, "warm-up cancelled");
    // The file's version as the hub has it now, against the one its cached blocks are of.
    auto ia = metadata_->Resolve(wf.path);
    Result<FileAttr> now =
        ia ? metadata_->Revalidate(ia->ino) : Result<FileAttr>(std::unexpected(ia.error()));
    // A writable volume's file may have been written through this agent: its blocks carry a
    // local version that the hub's never matches, so only a read-only volume compares them.
    FileRef ref{wf.path, wf.file_id, wf.version, wf.size};
    if (!now && now.error().code() == Code::kNotFound) {
      fetcher_->Evict(wf.file_id);  // gone or replaced on the hub: its blocks are of nothing
      figures.files_changed++;
      // Replaced (another file under the path now): that one is warmed instead.
      auto again = metadata_->Resolve(wf.path);
      if (!again || !again->attr.is_reg() || again->attr.file_id == wf.file_id) continue;
      ref = FileRef{wf.path, again->attr.file_id, again->attr.ContentVersion(), again->attr.size};
    } else if (!now) {
      if (!first_error) first_error = now.error().Wrap("verify of " + wf.path);
      continue;
    } else if (read_only_ && (now->ContentVersion() != wf.version || now->size != wf.size)) {
      fetcher_->Evict(wf.file_id);  // the older version's blocks: never served again
      figures.files_changed++;
      ref.version = now->ContentVersion();
      ref.size = now->size;
    }
    const uint64_t blocks = (ref.size + bs - 1) / bs;
    for (uint64_t i = 0; i < blocks && !cancelled.load(); ++i) {
      if (fetcher_->CheckCached(ref, i) == BlockFetcher::CachedCheck::kGood) {
        figures.blocks_verified++;
      }
    }
    // What is not cached now (dropped, stale, never warmed) is fetched again.
    for (uint64_t first = 0; first < blocks && !cancelled.load(); first += 64) {
      auto ticket =
          fetcher_->StartWarm(ref, first, std::min<uint64_t>(64, blocks - first), rate, &cancelled);
      const uint64_t asked = ticket.blocks();
      auto r = fetcher_->FinishWarm(std::move(ticket));
      if (r) {
        figures.blocks_repaired += asked;
        figures.bytes_from_hub += *r;
      } else if (!first_error) {
        first_error = r.error().Wrap("verify of " + wf.path);
      }
    }
    if (std::chrono::steady_clock::now() >= next_report) {
      if (progress) progress(figures);
      next_report = std::chrono::steady_clock::now() + 200ms;
    }
  }
  if (progress) progress(figures);
  if (cancelled.load()) return Fail(Code::kCancelled, "warm-up cancelled");
  if (first_error) return std::unexpected(*first_error);
  return Ok();
}

Status Volume::WarmupFiles(const std::string& path_prefix, WarmRateLimiter* rate,
                           const std::function<void(const WarmupFigures&)>& progress,
                           const std::atomic<bool>& cancelled, WarmupFigures* last) {
  SPOKE_TRY(auto prefix, NormalizeRelativePath(path_prefix, "path"));
  WarmupFileFeed feed(*metadata_, prefix);
  WarmupWindow window(*fetcher_, progress, rate, cancelled);
  while (!cancelled.load()) {
    if (!feed.over()) {
      window.Add(feed.Next());
      if (feed.over() && window.files() == 0 && !prefix.empty()) {
        SPOKE_RETURN_IF_ERROR(metadata_->Resolve(prefix));  // names what does not exist
      }
    }
    window.StartTickets(cancelled);
    if (window.empty()) {
      if (feed.over()) break;  // every file started and finished
      // Everything listed so far is warm: wait for the walk's next directory.
      metadata_->WaitWalkBeyond(feed.cursor(), 200ms);
      window.MaybeReport();
      continue;
    }
    // Collect the oldest ticket, waking now and then to report, to notice a cancel and,
    // while the walk goes on, to start the files it lists meanwhile.
    if (window.WaitOldest(feed.over() ? 200ms : 20ms)) window.FinishOldest();
    window.MaybeReport();
  }
  // Tickets left unfinished on a cancel: their fetches complete and are cached on their own.
  window.Report();
  *last = window.figures();
  if (cancelled.load()) return Fail(Code::kCancelled, "warm-up cancelled");
  if (window.first_error()) return std::unexpected(*window.first_error());
  return Ok();
}

Result<uint64_t> Volume::Evict(const std::string& path_prefix) {
  SPOKE_TRY(auto prefix, NormalizeRelativePath(path_prefix, "path"));
  if (prefix.empty()) return fetcher_->Evict(0);
  uint64_t n = 0;
  for (const auto& f : metadata_->Files(prefix)) n += fetcher_->Evict(f.file_id);
  return n;
}

HintFigures Volume::Hint(const std::vector<std::string>& paths) {
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

}  // namespace spoke::agent
