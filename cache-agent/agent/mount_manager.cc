#include "cache-agent/agent/mount_manager.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/fd_keeper.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace spoke::agent {
namespace {

std::string Prefixed(std::string_view field, const Error& e) {
  return std::string(field) + ": " + e.message();
}

// Another Mount/Unmount of the target holds its lock, possibly across a WAN wait: the caller
// (the node plugin, kubelet behind it) retries rather than parking a thread here.
auto Busy(const std::string& target) {
  return Fail(Code::kUnavailable,
              "target_path: a mount or unmount of " + target + " is in progress; retry");
}

}  // namespace

Status ValidateVolumeId(const std::string& id) {
  if (id.empty()) return Fail(Code::kInvalidArgument, "volume_id: required");
  if (id.size() > 2048) return Fail(Code::kInvalidArgument, "volume_id: longer than 2048 bytes");
  for (unsigned char ch : id) {
    if (ch < 0x20 || ch == 0x7f) {
      return Fail(Code::kInvalidArgument, "volume_id: contains a control character");
    }
  }
  if (!id.starts_with("spoke1|")) return Ok();  // opaque id: the context says everything
  auto decoded = VolumeId::Decode(id);
  if (decoded) return Ok();
  // spokectl mounts a scratch share root, which the controller never creates: the id is
  // well-formed apart from that rule.
  if (id.starts_with("spoke1|scratch|")) {
    std::string as_dataset = "spoke1|dataset|" + id.substr(sizeof("spoke1|scratch|") - 1);
    if (VolumeId::Decode(as_dataset)) return Ok();
  }
  return Fail(Code::kInvalidArgument, Prefixed("volume_id", decoded.error()));
}

std::string NormalizeTarget(const std::string& path) {
  if (path.empty()) return path;
  std::string n = std::filesystem::path(path).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

Status ValidateTargetPath(const std::string& target) {
  if (target.empty()) return Fail(Code::kInvalidArgument, "target_path: required");
  if (target.front() != '/') {
    return Fail(Code::kInvalidArgument, "target_path: must be absolute, got '" + target + "'");
  }
  if (target.size() > 4000) return Fail(Code::kInvalidArgument, "target_path: too long");
  for (unsigned char ch : target) {
    if (ch < 0x20 || ch == 0x7f) {
      return Fail(Code::kInvalidArgument, "target_path: contains a control character");
    }
  }
  if (NormalizeTarget(target) != target) {
    return Fail(Code::kInvalidArgument,
                "target_path: must be normalised (no '.', '..', '//' or trailing '/'), got '" +
                    target + "'");
  }
  if (target == "/") return Fail(Code::kInvalidArgument, "target_path: cannot be /");
  return Ok();
}

Status CheckTargetUnderRoots(const std::string& target, const std::vector<std::string>& roots) {
  if (roots.empty()) return Ok();
  std::string list;
  for (const std::string& root : roots) {
    if (target.size() > root.size() + 1 && target.starts_with(root) && target[root.size()] == '/')
      return Ok();
    list += (list.empty() ? "" : ", ") + root;
  }
  return Fail(Code::kPermissionDenied,
              "target_path: " + target + " is outside the agent's mountRoots (" + list + ")");
}

MountManager::MountManager(VolumeMounter& mounter, HostMounts& host, metrics::Registry& registry,
                           Options options)
    : mounter_(mounter),
      host_(host),
      registry_(registry),
      options_(std::move(options)),
      mounts_gauge_(registry.GetGauge("spoke_mounts", "FUSE mounts served by this agent")),
      pending_gauge_(registry.GetGauge("spoke_mounts_pending",
                                       "Mounts of the previous run not restored yet (retrying)")),
      restore_failures_(registry.GetCounter("spoke_mount_restore_failures_total",
                                            "Failed attempts to restore a mount at start-up")),
      stale_cleaned_(registry.GetCounter("spoke_stale_mounts_cleaned_total",
                                         "Stale FUSE mounts of a dead agent detached")),
      adopted_(registry.GetCounter("spoke_mounts_adopted_total",
                                   "FUSE connections taken over from a previous agent")) {}

MountManager::~MountManager() { Shutdown(); }

void MountManager::RemoveEntryAndSeries(const std::string& target) {
  std::string volume_id;
  bool still_mounted = false;
  std::shared_ptr<MountedVolume> volume;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(target);
    if (it == entries_.end()) return;
    volume_id = it->second.record.volume_id;
    volume = std::move(it->second.volume);
    entries_.erase(it);
    for (const auto& [t, e] : entries_)
      still_mounted = still_mounted || e.record.volume_id == volume_id;
  }
  // The stack goes before its series: a hub call still in flight (a /metrics scrape's
  // FSSTAT) records into them until the volume's hub client is gone.
  volume.reset();
  // The volume's series go with its last mount: /metrics does not grow with every volume
  // the node ever had.
  if (!still_mounted) registry_.RemoveLabeled("volume", VolumeMetricsLabel(volume_id));
}

bool MountManager::KernelServes(const std::string& target) {
  // The mount table only: a stat of the target would be a FUSE request to ourselves, and an
  // aborted connection of ours is found by SyncKeeper (connection_lost).
  auto mounts = host_.List();
  const MountEntry* m = FindMount(mounts, target);
  return m != nullptr && IsSpokeFuseMount(*m);
}

std::shared_ptr<std::mutex> MountManager::TargetLock(const std::string& target) {
  MutexLock lock(mu_);
  auto& slot = target_locks_[target];
  if (!slot) slot = std::make_shared<std::mutex>();
  return slot;
}

Status MountManager::Start() {
  auto records = ReadMountState(options_.state_file);
  if (!records) {
    std::error_code ec;
    std::filesystem::rename(options_.state_file, options_.state_file + ".bad", ec);
    log::Error("cannot read the mount state; moved it aside, starting with no mounts",
               {{"file", options_.state_file}, {"error", records.error().message()}});
    records = std::vector<MountRecord>{};
  }
  // The state file is trusted no more than a client: a target outside the roots is dropped.
  std::erase_if(*records, [&](const MountRecord& r) {
    auto s = CheckTargetUnderRoots(r.target_path, options_.mount_roots);
    if (!s) log::Error("not restoring a mount", {{"error", s.error().message()}});
    return !s;
  });
  {
    MutexLock lock(mu_);
    for (auto& r : *records) {
      Entry e;
      e.record = r;
      e.backoff = options_.retry_initial;
      e.next_retry = std::chrono::steady_clock::now();
      entries_[r.target_path] = std::move(e);
    }
  }
  // Connections the keeper held through the restart: served again before anything else, so
  // their users see only a pause.
  std::vector<std::string> adopted = AdoptKept(*records);
  RenewKeeperLease();
  // Stale mounts next, synchronously: they are local and fast, and a pod reading through
  // one gets ENOTCONN until it is gone.
  for (const auto& r : *records) {
    if (std::find(adopted.begin(), adopted.end(), r.target_path) != adopted.end()) continue;
    auto cleaned = CleanStaleMount(host_, r.target_path);
    if (!cleaned) {
      log::Error("cannot clean a stale mount",
                 {{"target", r.target_path}, {"error", cleaned.error().message()}});
    } else if (*cleaned) {
      stale_cleaned_.Inc();
    }
  }
  UpdateGauges();
  if (records->size() > adopted.size()) {
    log::Info("restoring mounts of the previous run",
              {{"count", records->size() - adopted.size()}, {"taken_over", adopted.size()}});
  }
  bg_ = std::thread([this] {
    NameThisThread("spoke-mounts");
    BackgroundLoop();
  });
  return Ok();
}

Result<std::unique_ptr<MountedVolume>> MountManager::DoMount(const MountRecord& record,
                                                             const VolumeContext& context) {
  const std::string& target = record.target_path;
  SPOKE_TRY(bool cleaned, CleanStaleMount(host_, target));
  if (cleaned) stale_cleaned_.Inc();
  auto mounts = host_.List();
  if (const MountEntry* other = FindMount(mounts, target)) {
    return Fail(Code::kAlreadyExists, "target_path: " + target + " already has a " +
                                          other->fs_type + " mount (" + other->source + ")");
  }
  std::error_code ec;
  std::filesystem::create_directories(target, ec);
  if (ec) return Fail(Code::kIo, "cannot create target_path " + target + ": " + ec.message());
  if (!std::filesystem::is_directory(target, ec)) {
    return Fail(Code::kInvalidArgument, "target_path: " + target + " is not a directory");
  }
  return mounter_.Mount(record.volume_id, context, target, record.read_only || context.read_only());
}

Status MountManager::Mount(const std::string& volume_id, const StringMap& volume_context,
                           const std::string& target_path, bool read_only,
                           const std::function<bool()>& caller_gone) {
  if (shut_down_) return Fail(Code::kUnavailable, "the agent is shutting down");
  if (auto s = ValidateVolumeId(volume_id); !s) return s;
  if (auto s = ValidateTargetPath(target_path); !s) return s;
  if (auto s = CheckTargetUnderRoots(target_path, options_.mount_roots); !s) return s;
  auto context = VolumeContext::FromMap(volume_context);
  if (!context) {
    return Fail(Code::kInvalidArgument, Prefixed("volume_context", context.error()));
  }
  MountRecord record{volume_id, volume_context, target_path, read_only};

  auto target_lock = TargetLock(target_path);
  std::unique_lock<std::mutex> tl(*target_lock, std::try_to_lock);
  if (!tl.owns_lock()) return Busy(target_path);
  SPOKE_TRY(std::shared_ptr<MountedVolume> existing, MountedAt(record));
  if (existing) {
    if (KernelServes(target_path)) return Ok();  // idempotent
    DropVanishedMount(record, std::move(existing));
  }
  SPOKE_TRY(std::unique_ptr<MountedVolume> volume,
            MountUnlessCallerGone(record, *context, caller_gone));
  AddMounted(record, std::move(volume));
  return PersistMounted(record);
}

Result<std::shared_ptr<MountedVolume>> MountManager::MountedAt(const MountRecord& record) {
  const std::string& target_path = record.target_path;
  MutexLock lock(mu_);
  auto it = entries_.find(target_path);
  if (it == entries_.end()) return nullptr;
  if (it->second.record.volume_id != record.volume_id) {
    return Fail(Code::kAlreadyExists, "target_path: " + target_path + " already has volume " +
                                          it->second.record.volume_id + " mounted");
  }
  // No volume: a restore is pending; mount now, with the caller's (newer) parameters.
  if (!it->second.volume) return nullptr;
  if (it->second.record.read_only != record.read_only) {
    return Fail(Code::kAlreadyExists,
                "target_path: volume already mounted there with read_only=" +
                    std::string(it->second.record.read_only ? "true" : "false"));
  }
  return it->second.volume;
}

void MountManager::DropVanishedMount(const MountRecord& record,
                                     std::shared_ptr<MountedVolume> existing) {
  const std::string& target_path = record.target_path;
  log::Warn("a mount of this agent left the kernel's mount table; mounting it again",
            {{"volume", record.volume_id}, {"target", target_path}});
  {
    MutexLock lock(mu_);
    auto it = entries_.find(target_path);
    if (it != entries_.end() && it->second.volume == existing) it->second.volume.reset();
  }
  ForgetInKeeper(target_path);
  (void)existing->Unmount();
  existing.reset();
  UpdateGauges();
}

Result<std::unique_ptr<MountedVolume>> MountManager::MountUnlessCallerGone(
    const MountRecord& record, const VolumeContext& context,
    const std::function<bool()>& caller_gone) {
  const std::string& target_path = record.target_path;
  auto volume = DoMount(record, context);
  if (volume && caller_gone && caller_gone()) {
    log::Warn("the caller gave up before the mount was made; undoing it",
              {{"volume", record.volume_id}, {"target", target_path}});
    (void)(*volume)->Unmount();
    volume = Fail(Code::kCancelled, "mount of " + target_path +
                                        " undone: the caller gave up (deadline or cancel) "
                                        "before it was made");
  }
  if (!volume) {
    log::Warn("mount failed", {{"volume", record.volume_id},
                               {"target", target_path},
                               {"error", volume.error().message()}});
  }
  return volume;
}

void MountManager::AddMounted(const MountRecord& record, std::unique_ptr<MountedVolume> volume) {
  {
    MutexLock lock(mu_);
    Entry& e = entries_[record.target_path];
    e.record = record;
    e.volume = std::shared_ptr<MountedVolume>(std::move(volume));
    e.attempts = 0;
    e.last_error.clear();
    e.hub_reachable = true;
  }
  UpdateGauges();
  log::Info("volume mounted", {{"volume", record.volume_id},
                               {"target", record.target_path},
                               {"read_only", record.read_only}});
}

Status MountManager::PersistMounted(const MountRecord& record) {
  const std::string& target_path = record.target_path;
  auto persisted = Persist();
  if (persisted) {
    std::shared_ptr<MountedVolume> v = FindByTarget(target_path);
    bool kept = v && PutToKeeper(record, *v);
    MutexLock lock(mu_);
    entries_[target_path].kept = kept;
    return Ok();
  }
  // Unpersisted mounts would be lost on restart without kubelet knowing: undo.
  log::Error("cannot persist the mount table; undoing the mount",
             {{"target", target_path}, {"error", persisted.error().message()}});
  std::shared_ptr<MountedVolume> v;
  {
    MutexLock lock(mu_);
    v = entries_[target_path].volume;
    entries_.erase(target_path);
  }
  if (v) (void)v->Unmount();
  UpdateGauges();
  return persisted;
}

Status MountManager::Unmount(const std::string& target_path) {
  if (auto s = ValidateTargetPath(target_path); !s) return s;
  auto target_lock = TargetLock(target_path);
  std::unique_lock<std::mutex> tl(*target_lock, std::try_to_lock);
  if (!tl.owns_lock()) return Busy(target_path);
  std::shared_ptr<MountedVolume> volume;
  bool known = false;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(target_path);
    if (it != entries_.end()) {
      known = true;
      volume = it->second.volume;
    }
  }
  if (volume) {
    if (auto s = volume->Unmount(); !s) {
      log::Warn("unmount failed", {{"target", target_path}, {"error", s.error().message()}});
      return s;
    }
  }
  // The connection is gone with the mount; the keeper's duplicate must not outlive it.
  ForgetInKeeper(target_path);
  // Also covers a pending restore and a mount left by a dead agent we never knew about.
  SPOKE_RETURN_IF_ERROR(CleanStaleMount(host_, target_path));
  if (!known) return Ok();
  volume.reset();  // RemoveEntryAndSeries drops the last reference before the series
  RemoveEntryAndSeries(target_path);
  UpdateGauges();
  log::Info("volume unmounted", {{"target", target_path}});
  return Persist();
}

std::vector<MountStatus> MountManager::List() const {
  MutexLock lock(mu_);
  std::vector<MountStatus> out;
  for (const auto& [target, e] : entries_) {
    out.push_back(
        MountStatus{e.record, e.volume != nullptr, e.hub_reachable, e.last_error, e.attempts});
  }
  return out;
}

size_t MountManager::mounted_count() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [target, e] : entries_) n += e.volume != nullptr;
  return n;
}

std::shared_ptr<MountedVolume> MountManager::FindByVolume(const std::string& volume_id) const {
  MutexLock lock(mu_);
  for (const auto& [target, e] : entries_) {
    if (e.volume && e.record.volume_id == volume_id) return e.volume;
  }
  return nullptr;
}

std::shared_ptr<MountedVolume> MountManager::FindByTarget(const std::string& target_path) const {
  MutexLock lock(mu_);
  auto it = entries_.find(NormalizeTarget(target_path));
  return it == entries_.end() ? nullptr : it->second.volume;
}

Status MountManager::Persist() {
  std::lock_guard<std::mutex> pl(persist_mu_);
  std::vector<MountRecord> records;
  {
    MutexLock lock(mu_);
    for (const auto& [target, e] : entries_) records.push_back(e.record);
  }
  return WriteMountState(options_.state_file, records);
}

void MountManager::UpdateGauges() {
  MutexLock lock(mu_);
  int64_t mounted = 0, pending = 0;
  for (const auto& [target, e] : entries_) (e.volume ? mounted : pending)++;
  mounts_gauge_.Set(mounted);
  pending_gauge_.Set(pending);
}

void MountManager::RetryPending(bool force) {
  std::vector<std::string> due;
  auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mu_);
    for (const auto& [target, e] : entries_) {
      if (!e.volume && (force || e.next_retry <= now)) due.push_back(target);
    }
  }
  for (const auto& target : due) {
    {
      MutexLock bl(bg_mu_);
      if (stop_) return;
    }
    auto target_lock = TargetLock(target);
    std::lock_guard<std::mutex> tl(*target_lock);
    MountRecord record;
    {
      MutexLock lock(mu_);
      auto it = entries_.find(target);
      if (it == entries_.end() || it->second.volume) continue;  // unmounted or mounted meanwhile
      record = it->second.record;
    }
    auto context = VolumeContext::FromMap(record.volume_context);
    Result<std::unique_ptr<MountedVolume>> volume =
        context ? DoMount(record, *context)
                : Result<std::unique_ptr<MountedVolume>>(std::unexpected(context.error()));
    MutexLock lock(mu_);
    auto it = entries_.find(target);
    if (it == entries_.end()) {
      if (volume) (void)(*volume)->Unmount();
      continue;
    }
    Entry& e = it->second;
    if (volume) {
      e.volume = std::shared_ptr<MountedVolume>(std::move(*volume));
      e.kept = PutToKeeper(e.record, *e.volume);  // small local call, bounded
      e.last_error.clear();
      log::Info("mount restored",
                {{"volume", record.volume_id}, {"target", target}, {"attempts", e.attempts + 1}});
      e.attempts = 0;
    } else {
      ++e.attempts;
      restore_failures_.Inc();
      e.last_error = volume.error().message();
      e.next_retry = std::chrono::steady_clock::now() + e.backoff;
      log::Warn("cannot restore a mount; retrying", {{"volume", record.volume_id},
                                                     {"target", target},
                                                     {"attempt", e.attempts},
                                                     {"retry_in_ms", e.backoff.count()},
                                                     {"error", e.last_error}});
      e.backoff = std::min(e.backoff * 2, options_.retry_max);
    }
  }
  UpdateGauges();
}

void MountManager::RefreshHealth() {
  std::vector<std::pair<std::string, std::shared_ptr<MountedVolume>>> mounted;
  {
    MutexLock lock(mu_);
    for (const auto& [target, e] : entries_) {
      if (e.volume) mounted.emplace_back(target, e.volume);
    }
  }
  for (const auto& [target, volume] : mounted) {
    VolumeFigures f = volume->Figures();
    MutexLock lock(mu_);
    auto it = entries_.find(target);
    if (it == entries_.end() || it->second.volume != volume) continue;
    if (it->second.hub_reachable != f.hub_reachable) {
      (f.hub_reachable ? log::Info : log::Warn)(
          f.hub_reachable ? "hub reachable again" : "hub unreachable",
          {{"target", target}, {"error", f.last_hub_error}});
    }
    it->second.hub_reachable = f.hub_reachable;
    if (!f.hub_reachable) it->second.last_error = f.last_hub_error;
  }
}

void MountManager::RunBackgroundOnce(bool force_retry) {
  RetryPending(force_retry);
  RefreshHealth();
}

void MountManager::BackgroundLoop() {
  auto next_health = std::chrono::steady_clock::now();
  auto next_keeper = std::chrono::steady_clock::now() + options_.keeper_interval;
  while (true) {
    if (std::chrono::steady_clock::now() >= next_keeper) next_keeper = SyncKeeper();
    RetryPending(false);
    if (std::chrono::steady_clock::now() >= next_health) {
      RefreshHealth();
      next_health = std::chrono::steady_clock::now() + options_.health_interval;
    }
    // Sleep until the next retry, health or keeper check is due.
    auto wake = std::min(next_health, next_keeper);
    {
      MutexLock lock(mu_);
      for (const auto& [target, e] : entries_) {
        if (!e.volume) wake = std::min(wake, e.next_retry);
      }
    }
    MutexLock bl(bg_mu_);
    if (bg_cv_.wait_until(bl, wake, [this]() REQUIRES(bg_mu_) { return stop_; })) return;
  }
}

void MountManager::HandOver(std::chrono::milliseconds drain) {
  if (shut_down_.exchange(true)) return;
  {
    MutexLock bl(bg_mu_);
    stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  std::vector<std::pair<MountRecord, std::shared_ptr<MountedVolume>>> mounted;
  {
    MutexLock lock(mu_);
    for (auto& [target, e] : entries_) {
      if (e.volume) mounted.emplace_back(e.record, std::move(e.volume));
    }
  }
  // The lease goes first: a keeper stopping at the same time (the node plugin upgraded with
  // this agent) then knows no agent serves what it keeps, and stays for the next one.
  keeper_lease_.Reset();
  // A restarted keeper may lack some connections: PUT them all (replacing is harmless). Each
  // hand-over drains for up to `drain`: all at once, so that the total stays `drain`.
  const auto keeper_deadline = std::chrono::steady_clock::now() + options_.keeper_handover_wait;
  std::atomic<size_t> handed{0};
  std::vector<std::thread> drains;
  for (const auto& [record, volume] : mounted) {
    drains.emplace_back([this, &record, &volume, &handed, drain, keeper_deadline] {
      // A keeper restarting (or stopping and refusing) is offered the connection again
      // until the next one answers.
      bool kept = PutToKeeper(record, *volume);
      while (!kept && std::chrono::steady_clock::now() < keeper_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        kept = PutToKeeper(record, *volume);
      }
      if (!kept) {
        log::Warn("no fd keeper holds this mount: unmounting it (the next agent mounts it again)",
                  {{"target", record.target_path}});
        (void)volume->Unmount();
        return;
      }
      if (auto s = volume->HandOver(drain); !s) {
        log::Warn("hand-over left requests unanswered (the next agent's resend covers them)",
                  {{"target", record.target_path}, {"error", s.error().message()}});
      }
      ++handed;
    });
  }
  for (auto& t : drains) t.join();
  UpdateGauges();
  log::Info("FUSE connections handed over",
            {{"count", handed.load()}, {"unmounted", mounted.size() - handed.load()}});
}

void MountManager::Shutdown() {
  if (shut_down_.exchange(true)) return;
  {
    MutexLock bl(bg_mu_);
    stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  std::vector<std::pair<std::string, std::shared_ptr<MountedVolume>>> mounted;
  {
    MutexLock lock(mu_);
    for (auto& [target, e] : entries_) {
      if (e.volume) mounted.emplace_back(target, std::move(e.volume));
    }
  }
  // mounts.json is kept: the next start mounts these again. Each session may wait for its
  // loop to end (bounded per session): end them all at once, not one after another.
  std::vector<std::thread> enders;
  for (const auto& [target, volume] : mounted) {
    enders.emplace_back([&target, &volume] {
      if (auto s = volume->Unmount(); !s) {
        log::Warn("cannot end a FUSE session",
                  {{"target", target}, {"error", s.error().message()}});
      }
    });
  }
  for (auto& t : enders) t.join();
  UpdateGauges();
  if (!mounted.empty()) log::Info("FUSE sessions ended", {{"count", mounted.size()}});
}

}  // namespace spoke::agent
