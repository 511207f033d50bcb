// MountManager and the fd keeper (docs/agent-restarts.md): each served mount's /dev/fuse fd is
// PUT under its target's key, kept connections are taken over at start, the keeper's copy is
// forgotten on unmount, and the background thread re-PUTs what a restarted keeper lost.
#include <nlohmann/json.hpp>
#include <set>

#include "cache-agent/agent/mount_manager.h"
#include "common/fd_keeper.h"
#include "common/log.h"

namespace spoke::agent {

std::string MountManager::KeeperKey(const std::string& target) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : target) h = (h ^ c) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "mount-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool MountManager::PutToKeeper(const MountRecord& record, MountedVolume& volume) {
  if (options_.keeper_socket.empty() || volume.fuse_fd() < 0) return false;
  auto takeover = nlohmann::json::parse(volume.takeover_json(), nullptr, false);
  if (takeover.is_discarded() || !takeover.is_object()) {
    log::Error("the mount has no takeover record; not kept", {{"target", record.target_path}});
    return false;
  }
  nlohmann::json meta;
  meta["target"] = record.target_path;
  meta["volume_id"] = record.volume_id;
  meta["read_only"] = record.read_only;
  meta["context"] = record.volume_context;
  meta["takeover"] = std::move(takeover);
  FdKeeperClient keeper(options_.keeper_socket, options_.keeper_timeout);
  if (auto s = keeper.Put(KeeperKey(record.target_path), meta.dump(), volume.fuse_fd()); !s) {
    log::Warn(
        "the fd keeper did not take the mount's connection (retrying in the background); "
        "until it does, an agent crash ends this mount",
        {{"target", record.target_path},
         {"keeper", options_.keeper_socket},
         {"error", s.error().message()}});
    return false;
  }
  return true;
}

void MountManager::ForgetInKeeper(const std::string& target) {
  if (options_.keeper_socket.empty()) return;
  FdKeeperClient keeper(options_.keeper_socket, options_.keeper_timeout);
  if (auto r = keeper.Del(KeeperKey(target)); !r) {
    log::Warn("cannot remove the mount from the fd keeper",
              {{"target", target}, {"error", r.error().message()}});
  }
}

std::vector<std::string> MountManager::AdoptKept(const std::vector<MountRecord>& records) {
  std::vector<std::string> adopted;
  if (options_.keeper_socket.empty()) return adopted;
  FdKeeperClient keeper(options_.keeper_socket, options_.keeper_timeout);
  auto kept = keeper.List();
  if (!kept) {
    log::Warn("no fd keeper: mounts of the previous run are re-created",
              {{"keeper", options_.keeper_socket}, {"error", kept.error().message()}});
    return adopted;
  }
  std::map<std::string, const MountRecord*> by_target;
  for (const auto& r : records) by_target[r.target_path] = &r;
  for (KeptFd& k : *kept) {
    auto meta = nlohmann::json::parse(k.metadata_json, nullptr, false);
    std::string target = meta.is_object() ? meta.value("target", "") : "";
    std::string volume_id = meta.is_object() ? meta.value("volume_id", "") : "";
    auto it = by_target.find(target);
    bool ours = it != by_target.end() && it->second->volume_id == volume_id &&
                KeeperKey(target) == k.key && meta.contains("takeover");
    Result<std::unique_ptr<MountedVolume>> volume = Fail(Code::kNotFound, "not in the mount table");
    if (ours) {
      const MountRecord& r = *it->second;
      auto context = VolumeContext::FromMap(r.volume_context);
      volume = context ? mounter_.Adopt(r.volume_id, *context, target,
                                        r.read_only || context->read_only(), std::move(k.fd),
                                        meta["takeover"].dump())
                       : Result<std::unique_ptr<MountedVolume>>(std::unexpected(context.error()));
    }
    if (!volume) {
      // Nobody will serve this connection: detach it so that its users get an error instead
      // of waiting forever, and let the keeper close it. The mount is then re-created.
      log::Error("cannot take over a kept FUSE connection; detaching it",
                 {{"key", k.key}, {"target", target}, {"error", volume.error().message()}});
      k.fd.Reset();
      if (!target.empty()) (void)host_.DetachUnmount(target);
      (void)keeper.Del(k.key);
      continue;
    }
    {
      MutexLock lock(mu_);
      Entry& e = entries_[target];
      e.volume = std::shared_ptr<MountedVolume>(std::move(*volume));
      e.kept = true;
    }
    adopted_.Inc();
    adopted.push_back(target);
    log::Info("mount taken over from the previous agent",
              {{"volume", volume_id}, {"target", target}});
  }
  return adopted;
}

void MountManager::RenewKeeperLease() {
  if (options_.keeper_socket.empty() || FdKeeperClient::LeaseAlive(keeper_lease_.get())) return;
  FdKeeperClient keeper(options_.keeper_socket, options_.keeper_timeout);
  auto lease = keeper.TakeLease();
  if (!lease) {
    keeper_lease_.Reset();
    return;  // unreachable keeper: SyncKeeper reports it and retries
  }
  keeper_lease_ = std::move(*lease);
}

std::chrono::steady_clock::time_point MountManager::SyncKeeper() {
  RenewKeeperLease();
  auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<MountRecord, std::shared_ptr<MountedVolume>>> mounted;
  std::vector<std::string> lost;
  {
    MutexLock lock(mu_);
    for (auto& [target, e] : entries_) {
      if (!e.volume) continue;
      if (e.volume->connection_lost()) {
        lost.push_back(target);
        continue;
      }
      if (e.volume->fuse_fd() >= 0) mounted.emplace_back(e.record, e.volume);
    }
  }
  // An aborted connection (old kernel, orphaned requests): re-create the mount.
  for (const auto& target : lost) {
    std::shared_ptr<MountedVolume> v;
    {
      MutexLock lock(mu_);
      auto it = entries_.find(target);
      if (it == entries_.end()) continue;
      v = std::move(it->second.volume);
      it->second.kept = false;
      it->second.next_retry = now;
      it->second.backoff = options_.retry_initial;
    }
    ForgetInKeeper(target);
    if (v) (void)v->Unmount();
  }
  if (options_.keeper_socket.empty() || mounted.empty()) return now + options_.keeper_interval;
  FdKeeperClient keeper(options_.keeper_socket, options_.keeper_timeout);
  auto kept = keeper.List();
  std::set<std::string> keys;
  if (kept) {
    for (const auto& k : *kept) keys.insert(k.key);
  }
  bool all = kept.has_value();
  for (auto& [record, volume] : mounted) {
    if (kept && keys.contains(KeeperKey(record.target_path))) continue;
    bool ok = kept && PutToKeeper(record, *volume);
    if (ok) log::Info("connection given to the fd keeper again", {{"target", record.target_path}});
    all = all && ok;
    MutexLock lock(mu_);
    auto it = entries_.find(record.target_path);
    if (it != entries_.end() && it->second.volume == volume) it->second.kept = ok;
  }
  if (all) {
    keeper_backoff_ = std::chrono::milliseconds(0);
    return now + options_.keeper_interval;
  }
  keeper_backoff_ = std::min(std::max(keeper_backoff_ * 2, options_.keeper_interval),
                             options_.keeper_backoff_max);
  if (!kept) {
    log::Warn("fd keeper unreachable; retrying", {{"keeper", options_.keeper_socket},
                                                  {"retry_in_ms", keeper_backoff_.count()},
                                                  {"error", kept.error().message()}});
  }
  return now + keeper_backoff_;
}

}  // namespace spoke::agent
