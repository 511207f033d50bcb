// MetadataCache: how an inode's attributes and NFS handle are stored, and the handle store
// the RemoteFs asks (metadata_cache.h, dir_entries.h).
#include "cache-agent/fs/metadata_cache.h"

namespace spoke::agent {

FileAttr MetadataCache::AttrLocked(const Node& n) const {
  const StoredAttr& s = n.attr;
  FileAttr a;
  a.file_id = s.file_id;
  a.fsid = fsids_[s.fsid];
  a.mode = s.mode;
  a.nlink = s.nlink;
  a.uid = s.uid;
  a.gid = s.gid;
  a.size = s.size;
  a.used = s.used;
  a.atime = {s.atime_s, static_cast<long>(s.atime_ns)};
  a.mtime = {s.mtime_s, static_cast<long>(s.mtime_ns)};
  a.ctime = {s.ctime_s, static_cast<long>(s.ctime_ns)};
  if (auto r = rdevs_.find(n.ino); r != rdevs_.end()) a.rdev = r->second;
  return a;
}

void MetadataCache::TouchLocked(uint64_t dir) {
  auto it = nodes_.find(dir);
  if (it != nodes_.end() && it->second.dir_data) it->second.dir_data->snapshot.reset();
}

void MetadataCache::StoreAttrLocked(Node& n, const FileAttr& a) {
  TouchLocked(n.parent);
  StoredAttr& s = n.attr;
  s.file_id = a.file_id;
  s.fsid = FsidIndexLocked(a.fsid);
  s.mode = a.mode;
  s.nlink = a.nlink;
  s.uid = a.uid;
  s.gid = a.gid;
  s.size = a.size;
  s.used = a.used;
  s.atime_s = a.atime.tv_sec;
  s.atime_ns = static_cast<uint32_t>(a.atime.tv_nsec);
  s.mtime_s = a.mtime.tv_sec;
  s.mtime_ns = static_cast<uint32_t>(a.mtime.tv_nsec);
  s.ctime_s = a.ctime.tv_sec;
  s.ctime_ns = static_cast<uint32_t>(a.ctime.tv_nsec);
  if (a.rdev != 0) {
    rdevs_[n.ino] = a.rdev;
  } else if (!rdevs_.empty()) {
    rdevs_.erase(n.ino);
  }
}

uint64_t MetadataCache::ResolveCachedLocked(std::string_view path) const {
  uint64_t ino = kRootIno;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty()) continue;
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return 0;
    ino = it->second.entries().children.Find(part);
    if (ino == 0) return 0;
  }
  return nodes_.contains(ino) ? ino : 0;
}

std::optional<HandleStore::Entry> MetadataCache::FindHandle(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ino = ResolveCachedLocked(path);
  if (ino == 0) return std::nullopt;
  const Node& n = nodes_.at(ino);
  if (n.fh.empty()) return std::nullopt;
  return Entry{std::string(n.fh.view()), n.attr.file_id};
}

void MetadataCache::DropHandles(const std::string& path) {
  // Only the handle of the inode the path names now: handles of other inodes name their own
  // files, whatever happens to this one's name.
  std::lock_guard<std::mutex> lock(mu_);
  if (const uint64_t ino = ResolveCachedLocked(path); ino != 0) nodes_.at(ino).fh.Clear();
}

size_t MetadataCache::handles() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [ino, node] : nodes_) n += node.fh.empty() ? 0 : 1;
  return n;
}

}  // namespace spoke::agent
