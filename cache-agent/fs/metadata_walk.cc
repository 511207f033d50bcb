// MetadataCache: the mount-time walk of the tree and the walked files (metadata_cache.h).
#include <algorithm>
#include <chrono>
#include <functional>

#include "cache-agent/fs/metadata_cache.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace spoke::agent {

void MetadataCache::StartWalk() {
  MutexLock lock(walk_mu_);
  if (walk_started_) return;
  walk_started_ = true;
  walk_queue_.push_back(kRootIno);
  for (int i = 0; i < config_.walk_concurrency; ++i) {
    walkers_.emplace_back([this] {
      NameThisThread("spoke-walk");
      WalkWorker();
    });
  }
}

void MetadataCache::WalkWorker() {
  while (true) {
    uint64_t ino;
    {
      MutexLock lock(walk_mu_);
      walk_cv_.wait(lock, [&]() REQUIRES(walk_mu_) {
        return stop_.load() || !walk_queue_.empty() || walk_active_ == 0;
      });
      if (stop_.load()) return;
      if (walk_queue_.empty()) {
        // Nothing queued and nobody listing: the walk is over.
        if (!walk_done_.exchange(true)) {
          log::Info("metadata walk done", {{"directories", walked_dirs_.size()}});
        }
        walk_cv_.notify_all();
        return;
      }
      ino = walk_queue_.front();
      walk_queue_.pop_front();
      walk_active_++;
    }
    // A directory removed on the hub since it was queued may have been dropped: never wait
    // for the walk (this very walk) to meet it.
    auto st = EnsureListed(ino, true, /*wait_unknown=*/false);
    // An unreachable hub (an agent restarted while the WAN is down): the walk is how inodes
    // the kernel still holds are found again, so it waits for the hub and lists again, with
    // backoff, rather than leaving them unknown for good. The walk stays unfinished meanwhile.
    for (auto backoff = std::chrono::milliseconds(500);
         !st && (st.error().code() == Code::kUnavailable || st.error().code() == Code::kTimeout) &&
         !stop_.load();
         backoff = std::min<std::chrono::milliseconds>(2 * backoff, std::chrono::seconds(30))) {
      log::Warn("metadata walk: listing failed; listing it again",
                {{"error", st.error().ToString()}, {"retry_in_ms", backoff.count()}});
      {
        MutexLock lock(walk_mu_);
        walk_cv_.wait_for(lock, backoff, [&] { return stop_.load(); });
      }
      if (stop_.load()) break;
      st = EnsureListed(ino, true, /*wait_unknown=*/false);
    }
    std::vector<uint64_t> subdirs;
    if (!st && st.error().code() == Code::kNotFound) {
      log::Debug("metadata walk: a directory went meanwhile", {{"error", st.error().ToString()}});
    } else if (!st) {
      log::Warn("metadata walk: listing failed", {{"error", st.error().ToString()}});
    } else {
      MutexLock lock(mu_);
      if (auto dir = nodes_.find(ino); dir != nodes_.end()) {
        dir->second.entries().children.ForEach([&](std::string_view, uint64_t c) {
          mu_.AssertHeld();  // called by ForEach, under the lock above
          auto child = nodes_.find(c);
          if (child != nodes_.end() && child->second.attr.is_dir()) subdirs.push_back(c);
        });
      }
    }
    {
      MutexLock lock(walk_mu_);
      for (uint64_t d : subdirs) walk_queue_.push_back(d);
      if (st) walked_dirs_.push_back(ino);
      walk_active_--;
    }
    walk_cv_.notify_all();
  }
}

bool MetadataCache::WaitWalk(std::chrono::milliseconds timeout) {
  MutexLock lock(walk_mu_);
  return walk_cv_.wait_for(lock, timeout, [&] { return walk_done_.load() || stop_.load(); }) &&
         walk_done_.load();
}

bool MetadataCache::WaitWalkBeyond(size_t cursor, std::chrono::milliseconds timeout) {
  MutexLock lock(walk_mu_);
  return walk_cv_.wait_for(lock, timeout, [&]() REQUIRES(walk_mu_) {
    return walk_done_.load() || stop_.load() || walked_dirs_.size() > cursor;
  });
}

std::vector<WalkedFile> MetadataCache::Files(const std::string& prefix) const {
  MutexLock lock(mu_);
  std::vector<WalkedFile> out;
  // The analysis sees each lambda as a function of its own: they run under the lock above.
  std::function<void(uint64_t, const std::string&)> visit =
      [&](uint64_t ino, const std::string& path) REQUIRES(mu_) {
        auto it = nodes_.find(ino);
        if (it == nodes_.end()) return;
        it->second.entries().children.ForEach([&](std::string_view name, uint64_t c) {
          mu_.AssertHeld();  // called by ForEach, under the lock above
          auto child = nodes_.find(c);
          if (child == nodes_.end()) return;
          std::string child_path =
              path.empty() ? std::string(name) : path + "/" + std::string(name);
          const Node& cn = child->second;
          if (cn.attr.is_dir()) {
            if (c != ino) visit(c, child_path);
          } else if (cn.attr.is_reg()) {
            bool match = prefix.empty() || child_path == prefix ||
                         child_path.starts_with(prefix.back() == '/' ? prefix : prefix + "/");
            if (match) {
              out.push_back(WalkedFile{child_path, cn.attr.file_id,
                                       AttrLocked(c, cn).ContentVersion(), cn.attr.size});
            }
          }
        });
      };
  visit(kRootIno, "");
  return out;
}

std::vector<WalkedFile> MetadataCache::WalkedSince(size_t* cursor) const {
  std::vector<uint64_t> dirs;
  {
    MutexLock lock(walk_mu_);
    if (*cursor < walked_dirs_.size()) {
      dirs.assign(walked_dirs_.begin() + static_cast<std::ptrdiff_t>(*cursor), walked_dirs_.end());
    }
    *cursor = walked_dirs_.size();
  }
  std::vector<WalkedFile> out;
  if (dirs.empty()) return out;
  MutexLock lock(mu_);
  for (uint64_t ino : dirs) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) continue;
    const std::string dir = PathLocked(ino);
    it->second.entries().children.ForEach([&](std::string_view name, uint64_t c) {
      mu_.AssertHeld();  // called by ForEach, under the lock above
      const Node& cn = nodes_.at(c);
      if (!cn.attr.is_reg()) return;
      out.push_back(WalkedFile{dir.empty() ? std::string(name) : dir + "/" + std::string(name),
                               cn.attr.file_id, AttrLocked(c, cn).ContentVersion(), cn.attr.size});
    });
  }
  return out;
}

}  // namespace spoke::agent
