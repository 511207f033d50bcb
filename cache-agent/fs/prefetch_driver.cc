#include "cache-agent/fs/prefetch_driver.h"

#include <algorithm>

#include "cache-agent/prefetch/sequential_predictor.h"
#include "common/log.h"

namespace spoke::agent {

void CacheListenerFanout::Add(uint64_t volume_key, CacheListener* listener) {
  MutexLock lock(mu_);
  listeners_[volume_key] = listener;
}

void CacheListenerFanout::Remove(uint64_t volume_key, CacheListener* listener) {
  MutexLock lock(mu_);
  auto it = listeners_.find(volume_key);
  if (it != listeners_.end() && it->second == listener) listeners_.erase(it);
}

void CacheListenerFanout::OnPrefetchUsed(const BlockKey& key, ExpertId expert) {
  MutexLock lock(mu_);
  auto it = listeners_.find(key.volume);
  if (it != listeners_.end()) it->second->OnPrefetchUsed(key, expert);
}

void CacheListenerFanout::OnPrefetchWasted(const BlockKey& key, ExpertId expert) {
  MutexLock lock(mu_);
  auto it = listeners_.find(key.volume);
  if (it != listeners_.end()) it->second->OnPrefetchWasted(key, expert);
}

PrefetchDriver::PrefetchDriver(const Config& config, BlockFetcher& fetcher, const Clock& clock,
                               MetadataCache* metadata, metrics::Registry* registry)
    : config_(config), metadata_(metadata), sink_(fetcher) {
  const bool account_metadata = config_.memory != nullptr && metadata_ != nullptr;
  if (config_.mode == PrefetchMode::kOff) {
    if (account_metadata && config_.tick_interval.count() > 0) {
      ticker_ = std::thread([this] { TickLoop(); });
    }
    return;
  }
  const uint32_t bs = fetcher.block_size();
  PrefetchScheduler::Config sc;
  sc.volume_key = fetcher.volume_key();
  sc.block_size = bs;
  uint64_t space = config_.space_budget_bytes != 0 ? config_.space_budget_bytes
                                                   : 4 * config_.read_ahead_max_bytes;
  sc.space_budget_bytes = std::max<uint64_t>(space, bs);
  sc.max_inflight_bytes = std::max<uint64_t>(config_.max_inflight_bytes, bs);
  sc.hints.max_pending = std::max<size_t>(config_.hints_max_lines, 1);
  sc.hints.max_pending_bytes =
      std::max(config_.hints_max_bytes, HintPredictor::HintBytes(kMaxHintPath));
  sc.hints.memory = config_.memory;
  auto valid = sc.Validate();
  if (!valid) {
    // Only a bug gets here: every field above is clamped to a valid range.
    log::Error("prefetch: invalid scheduler config", {{"error", valid.error().ToString()}});
    std::abort();
  }
  scheduler_ = std::make_unique<PrefetchScheduler>(sc, clock, sink_);

  SequentialPredictor::Config seq;
  seq.max_blocks = static_cast<uint32_t>(
      std::max<uint64_t>(seq.initial_blocks, config_.read_ahead_max_bytes / bs));
  scheduler_->AddExpert(std::make_unique<SequentialPredictor>(seq));
  if (config_.mode == PrefetchMode::kAuto) scheduler_->AddTrackerExperts({});
  // Files removed on the hub by other clients leave the tracker too (ForgetRemovedOnHub).
  if (metadata_ != nullptr) metadata_->ReportRemovals(true);

  if (registry != nullptr) {
    metrics_ = std::make_unique<PrefetchMetrics>(*registry, config_.volume_id);
    metrics_->Update(scheduler_->Stats());
  }
  if (config_.tick_interval.count() > 0) ticker_ = std::thread([this] { TickLoop(); });
}

PrefetchDriver::~PrefetchDriver() {
  {
    MutexLock lock(tick_mu_);
    stop_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (scheduler_ && metadata_ != nullptr) metadata_->ReportRemovals(false);
  MutexLock lock(metrics_mu_);
  if (metadata_charged_ > 0)
    config_.memory->Release(MemoryBudget::Use::kMetadata, metadata_charged_);
}

std::unique_ptr<PrefetchDriver> PrefetchDriver::ForMode(PrefetchMode mode, BlockFetcher& fetcher,
                                                        uint64_t read_ahead_max_bytes) {
  Config c;
  c.mode = mode;
  c.read_ahead_max_bytes = read_ahead_max_bytes;
  c.tick_interval = std::chrono::milliseconds(0);
  return std::make_unique<PrefetchDriver>(c, fetcher, SystemClock::Get(), nullptr, nullptr);
}

void PrefetchDriver::OnOpen(const OpenEvent& e) {
  FeedTreeIfReady();
  if (scheduler_) scheduler_->OnOpen(e);
}

void PrefetchDriver::ForgetFile(std::string_view path) {
  if (scheduler_) scheduler_->ForgetFile(path);
}

void PrefetchDriver::OnRead(const ReadEvent& e) {
  if (scheduler_) scheduler_->OnRead(e);
}

void PrefetchDriver::OnClose(const CloseEvent& e) {
  if (scheduler_) scheduler_->OnClose(e);
}

void PrefetchDriver::FeedTreeIfReady() {
  if (!scheduler_ || tree_fed_.load() || metadata_ == nullptr ||
      config_.mode != PrefetchMode::kAuto)
    return;
  MutexLock lock(feed_mu_);
  if (tree_fed_.load()) return;
  // Directory by directory as the walk lists them: on a WAN the walk of a big tree takes
  // seconds, and the working set can be fetched from its first directories meanwhile.
  const bool done = metadata_->walk_done();  // before taking the files: none is missed
  auto files = metadata_->WalkedSince(&walk_cursor_);
  for (const WalkedFile& f : files) scheduler_->AddTreeFile(f.path, f.file_id, f.version, f.size);
  walk_files_fed_ += files.size();
  if (!done) return;
  tree_fed_.store(true);
  log::Debug("prefetch: metadata walk fed to the tracker",
             {{"volume", config_.volume_id}, {"files", walk_files_fed_}});
}

void PrefetchDriver::Tick() {
  if (!scheduler_) {
    // Prefetch off: the tick only keeps the metadata estimate current.
    bool update = false;
    {
      MutexLock lock(metrics_mu_);
      if (++ticks_ >= config_.metrics_every_ticks) {
        ticks_ = 0;
        update = true;
      }
    }
    if (update) AccountMetadata();
    return;
  }
  FeedTreeIfReady();
  ForgetRemovedOnHub();
  scheduler_->Tick();
  bool update = false;
  {
    MutexLock lock(metrics_mu_);
    if ((metrics_ || config_.memory != nullptr) && ++ticks_ >= config_.metrics_every_ticks) {
      ticks_ = 0;
      update = true;
    }
  }
  if (update) UpdateMetrics();
}

void PrefetchDriver::ForgetRemovedOnHub() {
  if (!scheduler_ || metadata_ == nullptr) return;
  // Taken under the metadata lock, forgotten under the scheduler's only (never both held).
  const std::vector<std::string> gone = metadata_->TakeRemovedFiles();
  if (!gone.empty()) scheduler_->ForgetFiles(gone);
}

void PrefetchDriver::TickLoop() {
  MutexLock lock(tick_mu_);
  while (!stop_) {
    tick_cv_.wait_for(lock, config_.tick_interval, [&]() REQUIRES(tick_mu_) { return stop_; });
    if (stop_) break;
    lock.unlock();
    Tick();
    lock.lock();
  }
}

HintCounts PrefetchDriver::AddHints(std::string_view text) {
  // Hints name walked files: the tracker must know them before the hints come up.
  FeedTreeIfReady();
  if (scheduler_) return scheduler_->AddHints(text);
  HintCounts c;
  c.rejected = static_cast<uint32_t>(std::count(text.begin(), text.end(), '\n'));
  return c;
}

HintCounts PrefetchDriver::FlushHints() {
  if (scheduler_) return scheduler_->FlushHints();
  return {};
}

HintCounts PrefetchDriver::AddHintPaths(std::span<const std::string> paths) {
  FeedTreeIfReady();
  if (scheduler_) return scheduler_->AddHintPaths(paths);
  HintCounts c;
  c.rejected = static_cast<uint32_t>(paths.size());
  return c;
}

PrefetchStats PrefetchDriver::Stats() const {
  if (scheduler_) return scheduler_->Stats();
  return {};
}

void PrefetchDriver::UpdateMetrics() {
  AccountMetadata();
  if (!scheduler_) return;
  PrefetchStats s = scheduler_->Stats();
  MutexLock lock(metrics_mu_);
  if (metrics_) metrics_->Update(s);
}

void PrefetchDriver::AccountMetadata() {
  if (config_.memory == nullptr || metadata_ == nullptr) return;
  // Accounted, never refused: the namespace must be served. Its share leaves less room for
  // prefetch and hints.
  const uint64_t bytes = metadata_->entries() * kMetadataEntryBytes;
  MutexLock lock(metrics_mu_);
  if (bytes > metadata_charged_) {
    config_.memory->Charge(MemoryBudget::Use::kMetadata, bytes - metadata_charged_);
  } else if (bytes < metadata_charged_) {
    config_.memory->Release(MemoryBudget::Use::kMetadata, metadata_charged_ - bytes);
  }
  metadata_charged_ = bytes;
}

}  // namespace spoke::agent
