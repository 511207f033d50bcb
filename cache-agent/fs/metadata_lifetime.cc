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
  MaybeDropLocked(ino);  // unless the kernel or a handle still holds it
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
  nodes_.erase(it);
  // A directory kept only for this child's path may go now (unless it is the one dropping
  // its entries: it decides for itself once they are done).
  if (parent != ino) MaybeDropLocked(parent, dropping);
}

void MetadataCache::AddKernelRefLocked(Node& n) {
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
  AddKernelRefLocked(it->second);
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

}  // namespace spoke::agent
