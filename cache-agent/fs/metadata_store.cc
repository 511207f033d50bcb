// MetadataCache: how an inode's attributes and NFS handle are stored, and the handle store
// the RemoteFs asks (metadata_cache.h, dir_entries.h).
#include <climits>
#include <cstdint>
#include <ctime>

#include "cache-agent/fs/metadata_cache.h"

namespace spoke::agent {

namespace {

// Times as signed 64-bit nanoseconds since the epoch: 1678-2262, which holds every NFSv3 time
// (unsigned 32-bit seconds: 1970-2106). Beyond it (a local FileAttr only), the nearest end.
int64_t ToNs(const struct timespec& t) {
  constexpr int64_t kMaxS = INT64_MAX / 1000000000 - 1;
  if (t.tv_sec > kMaxS) return INT64_MAX;
  if (t.tv_sec < -kMaxS) return INT64_MIN;
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

struct timespec FromNs(int64_t ns) {
  int64_t s = ns / 1000000000, r = ns % 1000000000;
  if (r < 0) {
    r += 1000000000;
    s -= 1;
  }
  return {static_cast<time_t>(s), static_cast<long>(r)};
}

}  // namespace

FileAttr MetadataCache::AttrLocked(uint64_t ino, const Node& n) const {
  const StoredAttr& s = n.attr;
  FileAttr a;
  a.file_id = s.file_id;
  a.fsid = FsidLocked(ino, n);
  a.mode = s.mode;
  a.nlink = s.nlink;
  a.uid = s.uid;
  a.gid = s.gid;
  a.size = s.size;
  a.used = s.used;
  a.atime = FromNs(s.atime_ns);
  a.mtime = FromNs(s.mtime_ns);
  a.ctime = FromNs(s.ctime_ns);
  if (auto r = rdevs_.find(ino); r != rdevs_.end()) a.rdev = r->second;
  return a;
}

void MetadataCache::TouchLocked(uint64_t dir) {
  auto it = nodes_.find(dir);
  if (it != nodes_.end() && it->second.dir_data) it->second.dir_data->snapshot.reset();
}

void MetadataCache::StoreAttrLocked(uint64_t ino, Node& n, const FileAttr& a) {
  TouchLocked(n.parent);
  StoredAttr& s = n.attr;
  s.file_id = a.file_id;
  s.fsid = FsidIndexLocked(a.fsid);
  if (s.fsid == kFarFsid) {
    far_fsids_[ino] = a.fsid;
  } else if (!far_fsids_.empty()) {
    far_fsids_.erase(ino);
  }
  s.mode = static_cast<uint16_t>(a.mode);
  s.nlink = a.nlink;
  s.uid = a.uid;
  s.gid = a.gid;
  s.size = a.size;
  s.used = a.used;
  s.atime_ns = ToNs(a.atime);
  s.mtime_ns = ToNs(a.mtime);
  s.ctime_ns = ToNs(a.ctime);
  if (a.rdev != 0) {
    rdevs_[ino] = a.rdev;
  } else if (!rdevs_.empty()) {
    rdevs_.erase(ino);
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
  MutexLock lock(mu_);
  const uint64_t ino = ResolveCachedLocked(path);
  if (ino == 0) return std::nullopt;
  const Node& n = nodes_.at(ino);
  if (n.fh.empty()) return std::nullopt;
  return Entry{std::string(n.fh.view()), n.attr.file_id};
}

void MetadataCache::DropHandles(const std::string& path) {
  // Only the handle of the inode the path names now: handles of other inodes name their own
  // files, whatever happens to this one's name.
  MutexLock lock(mu_);
  if (const uint64_t ino = ResolveCachedLocked(path); ino != 0) nodes_.at(ino).fh.Clear();
}

size_t MetadataCache::handles() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [ino, node] : nodes_) n += node.fh.empty() ? 0 : 1;
  return n;
}

}  // namespace spoke::agent
