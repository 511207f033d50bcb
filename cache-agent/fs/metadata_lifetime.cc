// MetadataCache: how long an inode lives (metadata_cache.h): kernel references (lookups,
// FORGET), open handles (pins), names in cached listings, and dropping what nothing keeps.
#include <vector>

#include "cache-agent/fs/metadata_cache.h"

namespace spoke::agent {

void MetadataCache::ForgetRemovedLocked(uint64_t parent, const std::string& name, uint64_t ino) {
  auto n = nodes_.find(ino);
  if (n == nodes_.end() || ino == kRootIno) return;
  Node& node = n->second;
  // Known under another name (a hard link, a rename seen since), or a directory that still
  // has entries here: kept.
  bool only_name = node.parent == parent && node.name == name;
  bool gone = node.attr.is_dir() ? node.entries().children.empty() : node.attr.nlink <= 1;
  node.attr_valid = false;
  if (!only_name || !gone) return;
  node.removed = true;
  LogDroppedLocked(ino, node);  // gone from the hub: after a restart, unknown is right
  MaybeDropLocked(ino);         // unless the kernel or a handle still holds it
}

bool MetadataCache::NamedLocked(uint64_t ino, const Node& n) const {
  // Another link may be an entry of a listing under a name this node no longer records.
  if (!n.attr.is_dir() && n.attr.nlink > 1) return true;
  auto p = nodes_.find(n.parent);
  if (p == nodes_.end() || n.parent == ino) return false;
  return p->second.entries().children.Find(n.name.view()) == ino;
}

void MetadataCache::SetParentLocked(uint64_t ino, Node& n, uint64_t parent) {
  if (n.parent == parent) return;
  if (n.parent != 0 && n.parent != ino) {
    auto old = nodes_.find(n.parent);
    if (old != nodes_.end() && old->second.dir_data && old->second.dir_data->child_nodes > 0) {
      old->second.dir_data->child_nodes--;
    }
  }
  n.parent = parent;
  if (parent != 0 && parent != ino) {
    auto p = nodes_.find(parent);
    if (p != nodes_.end()) p->second.dir().child_nodes++;
  }
}

void MetadataCache::MaybeDropLocked(uint64_t ino, uint64_t dropping) {
  if (ino == kRootIno || ino == dropping) return;
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  if (n.lookups > 0 || n.opens > 0 || n.uncounted || NamedLocked(ino, n)) return;
  if (n.dir_data) {
    // An unnamed directory's listing names nothing any more: its entries go first, those
    // nothing else keeps with them. Erasing other nodes leaves `n` valid (unordered_map).
    Dir& d = *n.dir_data;
    std::vector<uint64_t> entries;
    entries.reserve(d.children.size());
    d.children.ForEach([&](std::string_view, uint64_t child) { entries.push_back(child); });
    d.children.Clear();
    d.snapshot.reset();
    d.listed = false;
    for (uint64_t child : entries) MaybeDropLocked(child, ino);  // not back into this one
    // A child still kept (held by the kernel or open) needs this node for its path.
    if (d.child_nodes > 0) return;
  }
  uint64_t parent = n.parent;
  SetParentLocked(ino, n, 0);
  if (auto f = displaced_.find({FsidLocked(ino, n), n.attr.file_id});
      f != displaced_.end() && f->second == ino) {
    displaced_.erase(f);
  }
  if (!rdevs_.empty()) rdevs_.erase(ino);
  if (!far_fsids_.empty()) far_fsids_.erase(ino);
  LogDroppedLocked(ino, n);
  nodes_.erase(it);
  // A directory kept only for this child's path may go now (unless it is the one dropping
  // its entries: it decides for itself once they are done).
  if (parent != ino) MaybeDropLocked(parent, dropping);
}

void MetadataCache::AddKernelRefLocked(uint64_t ino, Node& n) {
  if (!n.logged) LogKeptLocked(ino, n);
  if (n.lookups == UINT32_MAX) {
    n.uncounted = true;  // a count we can no longer keep: never dropped by FORGET
    return;
  }
  n.lookups++;
}

bool MetadataCache::AddKernelRef(uint64_t ino) {
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return false;
  AddKernelRefLocked(ino, it->second);
  return true;
}

void MetadataCache::Forget(uint64_t ino, uint64_t count) {
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;  // dropped, or a number an earlier agent gave never met
  Node& n = it->second;
  if (count > n.lookups) {
    // The kernel returns more than this process handed out: it also held references an
    // earlier agent gave. What it still holds is unknown: kept from now on.
    n.uncounted = true;
    n.lookups = 0;
    return;
  }
  n.lookups -= static_cast<uint32_t>(count);
  MaybeDropLocked(ino);
}

void MetadataCache::Pin(uint64_t ino) {
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  if (it->second.opens < UINT16_MAX) it->second.opens++;  // saturated: kept for good
}

void MetadataCache::Unpin(uint64_t ino) {
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  if (n.opens == 0 || n.opens == UINT16_MAX) return;
  n.opens--;
  MaybeDropLocked(ino);
}

void MetadataCache::AdoptKernelReferences() {
  MutexLock lock(mu_);
  adopted_ = true;
  kernel_copies_stale_.store(true);
  for (auto& [ino, n] : nodes_) n.uncounted = n.kernel_copy_stale = true;
}

bool MetadataCache::TakeKernelCopyStale(uint64_t ino) {
  if (!kernel_copies_stale_.load()) return false;  // never taken over: nothing is stale
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || !it->second.kernel_copy_stale) return false;
  it->second.kernel_copy_stale = false;
  return true;
}

KernelInodeLog::Entry MetadataCache::LogEntryLocked(uint64_t ino, const Node& n) const {
  return KernelInodeLog::Entry{ino, n.parent, std::string(n.name.view()), AttrLocked(ino, n),
                               std::string(n.fh.view())};
}

void MetadataCache::LogKeptLocked(uint64_t ino, Node& n) {
  if (log_ == nullptr || ino == kRootIno || n.removed) return;
  if (!n.logged) {
    n.logged = true;
    ++logged_;
  }
  log_->Kept(LogEntryLocked(ino, n));
  // Entries of inodes dropped since and older places of moved ones: rewritten whole once
  // they are most of the file.
  if (log_->lines() > 2 * logged_ + 4096) {
    std::vector<KernelInodeLog::Entry> live;
    live.reserve(logged_);
    for (const auto& [i, node] : nodes_) {
      if (node.logged) live.push_back(LogEntryLocked(i, node));
    }
    log_->Rewrite(std::move(live));
  }
}

void MetadataCache::LogMovedLocked(uint64_t ino, const Node& n) {
  if (n.logged && log_ != nullptr) log_->Kept(LogEntryLocked(ino, n));
}

void MetadataCache::LogDroppedLocked(uint64_t ino, Node& n) {
  if (!n.logged) return;
  n.logged = false;
  --logged_;
  if (log_ != nullptr) log_->Dropped(ino);
}

void MetadataCache::LogKernelInodes(std::unique_ptr<KernelInodeLog> log) {
  MutexLock lock(mu_);
  log_ = std::move(log);
  // Adopted entries are in the file already; anything else the kernel holds now is not.
  for (auto& [ino, n] : nodes_) {
    if (!n.logged && ino != kRootIno && (n.lookups > 0 || n.uncounted)) LogKeptLocked(ino, n);
  }
}

size_t MetadataCache::AdoptLoggedInodes(const std::vector<KernelInodeLog::Entry>& entries) {
  MutexLock lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> added;  // (ino, parent)
  for (const KernelInodeLog::Entry& e : entries) {
    if (e.ino == kRootIno || e.ino >= kStableInoLimit || e.parent == 0 || nodes_.contains(e.ino)) {
      continue;
    }
    Node& n = nodes_[e.ino];
    StoreAttrLocked(e.ino, n, e.attr);
    n.name = e.name;
    n.fh.Assign(e.fh);
    // An immutable volume's files do not change; elsewhere the next use asks the hub.
    n.attr_valid = config_.consistency == Consistency::kImmutable;
    n.attr_time = clock_.Now();
    if (e.ino != HomeIno(e.attr.fsid, e.attr.file_id)) {
      displaced_[{e.attr.fsid, e.attr.file_id}] = e.ino;
    }
    added.emplace_back(e.ino, e.parent);
  }
  // Linked once all are in (a directory may come after its entries), and named in the
  // parent's entries as a lookup's answer is: the path resolves, the listing is not "listed".
  for (auto [ino, parent] : added) {
    Node& n = nodes_[ino];
    SetParentLocked(ino, n, parent);
    if (auto p = nodes_.find(parent); p != nodes_.end() && p->second.attr.is_dir()) {
      p->second.dir().children.Set(n.name.view(), ino);
    }
  }
  // One whose chain of parents does not reach the root has no path: left for the walk.
  auto reaches_root = [&](uint64_t ino) REQUIRES(mu_) {
    for (size_t depth = 0; depth <= added.size(); ++depth) {
      if (ino == kRootIno) return true;
      auto it = nodes_.find(ino);
      if (it == nodes_.end() || it->second.parent == ino) return false;
      if (auto p = nodes_.find(it->second.parent); p == nodes_.end() || !p->second.attr.is_dir()) {
        return false;
      }
      ino = it->second.parent;
    }
    return false;  // a cycle
  };
  std::vector<uint64_t> cut;
  for (auto [ino, parent] : added) {
    if (!reaches_root(ino)) cut.push_back(ino);
  }
  for (uint64_t ino : cut) {
    Node& n = nodes_[ino];
    if (auto p = nodes_.find(n.parent); p != nodes_.end() && p->second.dir_data &&
                                        p->second.dir_data->children.Find(n.name.view()) == ino) {
      p->second.dir_data->children.Erase(n.name.view());
    }
    if (auto d = displaced_.find({FsidLocked(ino, n), n.attr.file_id});
        d != displaced_.end() && d->second == ino) {
      displaced_.erase(d);
    }
    SetParentLocked(ino, n, 0);
    rdevs_.erase(ino);
    far_fsids_.erase(ino);
  }
  for (uint64_t ino : cut) nodes_.erase(nodes_.find(ino));
  for (auto [ino, parent] : added) {
    if (auto it = nodes_.find(ino); it != nodes_.end()) {
      it->second.logged = true;
      ++logged_;
    }
  }
  return added.size() - cut.size();
}

}  // namespace spoke::agent
