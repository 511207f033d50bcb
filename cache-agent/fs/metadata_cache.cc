#include "cache-agent/fs/metadata_cache.h"

#include <algorithm>
#include <functional>
#include <string_view>
#include <utility>

#include "common/interrupt.h"
#include "common/log.h"

namespace spoke::agent {

Status MetadataCache::Config::Validate() const {
  if (consistency == Consistency::kTtl && ttl_seconds == 0)
    return Fail(Code::kInvalidArgument, "ttl_seconds: must be > 0 for consistency ttl");
  if (walk_concurrency < 1 || walk_concurrency > 256)
    return Fail(Code::kInvalidArgument, "walk_concurrency: must be in 1..256");
  return Ok();
}

MetadataCache::MetadataCache(RemoteFs& remote, const Config& config, Clock& clock)
    : remote_(remote), config_(config), clock_(clock) {
  Node root;
  root.parent = kRootIno;
  nodes_[kRootIno] = std::move(root);
}

MetadataCache::~MetadataCache() {
  stop_.store(true);
  walk_cv_.notify_all();
  for (auto& t : walkers_) t.join();
}

bool MetadataCache::Fresh(std::chrono::steady_clock::time_point t) const {
  switch (config_.consistency) {
    case Consistency::kImmutable:
      return true;
    case Consistency::kTtl:
      return clock_.Now() - t < std::chrono::seconds(config_.ttl_seconds);
    case Consistency::kStrict:
      return clock_.Now() - t < config_.strict_validity;
  }
  return false;
}

Status MetadataCache::Init() {
  stats_made_++;
  SPOKE_TRY(auto st, remote_.Stat(""));
  if (!st.is_dir()) return Fail(Code::kInvalidArgument, "volume root is not a directory");
  InitFrom(st);
  return Ok();
}

FileAttr MetadataCache::RootAttr() const {
  MutexLock lock(mu_);
  auto it = nodes_.find(kRootIno);
  return it == nodes_.end() ? FileAttr{} : AttrLocked(kRootIno, it->second);
}

void MetadataCache::InitFrom(const FileAttr& st) {
  MutexLock lock(mu_);
  Node& root = nodes_[kRootIno];
  root_fsid_ = st.fsid;  // before any file is numbered (see HomeIno)
  StoreAttrLocked(kRootIno, root, st);
  root.attr_valid = true;
  root.attr_time = clock_.Now();
}

std::string MetadataCache::PathLocked(uint64_t ino) const {
  std::vector<std::string_view> parts;
  while (ino != kRootIno) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) break;
    parts.push_back(it->second.name.view());
    ino = it->second.parent;
  }
  std::string path;
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    if (!path.empty()) path += '/';
    path += *p;
  }
  return path;
}

Result<std::string> MetadataCache::PathOf(uint64_t ino) const {
  MutexLock lock(mu_);
  if (!nodes_.contains(ino)) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  return PathLocked(ino);
}

// Inode numbers outlive the agent process in the kernel (until FORGET), so a new agent must
// give each file the number an earlier one gave it: a hash of the hub's fileid, and of the
// fsid for a file on another hub file system than the volume root's (an export spanning
// several, whose fileids may repeat; files on the root's keep the numbers they always had).
// Below kStableInoLimit (the hint file lives above); a collision with another file takes the
// next free number (vanishingly rare for 62 bits).
uint64_t MetadataCache::HomeIno(uint64_t fsid, uint64_t file_id) const {
  uint64_t x = file_id;
  if (fsid != root_fsid_) x ^= (fsid + 0x632be59bd9b4e019ull) * 0x9e3779b97f4a7c15ull;
  x += 0x9e3779b97f4a7c15ull;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x % (kStableInoLimit - kRootIno - 1) + kRootIno + 1;
}

bool MetadataCache::SameFileLocked(uint64_t ino, const Node& n, uint64_t fsid,
                                   uint64_t file_id) const {
  return n.attr.file_id == file_id && FsidLocked(ino, n) == fsid;
}

uint16_t MetadataCache::FsidIndexLocked(uint64_t fsid) {
  // Few per export (one per hub file system under the volume): a short linear search.
  for (size_t i = 0; i < fsids_.size(); ++i) {
    if (fsids_[i] == fsid) return static_cast<uint16_t>(i);
  }
  if (fsids_.size() >= kFarFsid) return kFarFsid;
  fsids_.push_back(fsid);
  return static_cast<uint16_t>(fsids_.size() - 1);
}

uint64_t MetadataCache::FsidLocked(uint64_t ino, const Node& n) const {
  if (n.attr.fsid != kFarFsid) return fsids_[n.attr.fsid];
  auto f = far_fsids_.find(ino);
  return f != far_fsids_.end() ? f->second : 0;
}

uint64_t MetadataCache::FindFileLocked(uint64_t fsid, uint64_t file_id) const {
  uint64_t ino = HomeIno(fsid, file_id);
  if (auto d = displaced_.find({fsid, file_id}); d != displaced_.end()) ino = d->second;
  auto it = nodes_.find(ino);
  // A removed file's node is not the file that has its identity now (Node::removed).
  return it != nodes_.end() && SameFileLocked(ino, it->second, fsid, file_id) && !it->second.removed
             ? ino
             : 0;
}

uint64_t MetadataCache::StableIno(uint64_t fsid, uint64_t file_id) const {
  uint64_t ino = HomeIno(fsid, file_id);
  while (true) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end() ||
        (SameFileLocked(ino, it->second, fsid, file_id) && !it->second.removed)) {
      return ino;
    }
    ino = ino + 1 < kStableInoLimit ? ino + 1 : kRootIno + 1;
  }
}

Status MetadataCache::KnowInode(uint64_t ino) {
  {
    MutexLock lock(mu_);
    if (nodes_.contains(ino)) return Ok();
  }
  // Unknown: a number an earlier agent gave the kernel. The tree walk meets every file of the
  // volume and numbers it the same way; wait for it (bounded) to reach this one.
  {
    MutexLock wl(walk_mu_);
    if (!walk_started_) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  }
  auto deadline = std::chrono::steady_clock::now() + config_.unknown_inode_wait;
  const Interrupt* interrupt = InterruptScope::Current();  // checked at each 20 ms turn
  while (true) {
    {
      MutexLock lock(mu_);
      if (nodes_.contains(ino)) return Ok();
    }
    if (interrupt != nullptr && interrupt->fired()) {
      return std::unexpected(
          Interrupted("the walk of the volume to reach inode " + std::to_string(ino)));
    }
    if (walk_done_.load() || stop_.load() || std::chrono::steady_clock::now() >= deadline) break;
    MutexLock wl(walk_mu_);
    walk_cv_.wait_for(wl, std::chrono::milliseconds(20));
  }
  MutexLock lock(mu_);
  if (nodes_.contains(ino)) return Ok();
  return Fail(Code::kNotFound,
              "unknown inode " + std::to_string(ino) + " (not found by the walk of the volume)");
}

uint64_t MetadataCache::InodeFor(uint64_t parent, const std::string& name, const FileAttr& attr) {
  uint64_t ino = FindFileLocked(attr.fsid, attr.file_id);
  if (ino == 0) {
    ino = StableIno(attr.fsid, attr.file_id);
    if (ino != HomeIno(attr.fsid, attr.file_id)) {
      displaced_[{attr.fsid, attr.file_id}] = ino;
    } else if (!displaced_.empty()) {
      displaced_.erase(std::pair{attr.fsid, attr.file_id});  // it named a removed file's node
    }
  }
  auto [slot, created] = nodes_.try_emplace(ino);
  Node& n = slot->second;
  // Until the walk has met every file, a number met may be one an earlier agent gave the
  // kernel (AdoptKernelReferences).
  if (created && adopted_ && !walk_done_.load()) n.uncounted = n.kernel_copy_stale = true;
  // A file seen under a new name (renamed by another client, or a hard link) follows the
  // most recent name.
  const bool moved = n.parent != parent || !(n.name == name);
  SetParentLocked(ino, n, parent);
  if (!(n.name == name)) n.name = name;
  if (moved) LogMovedLocked(ino, n);
  if (n.attr_valid && AttrLocked(ino, n).ContentVersion() != attr.ContentVersion()) {
    if (n.dir_data) n.dir_data->listed = n.dir_data->listed && attr.is_dir();
    // An immutable volume's file keeps the version first known (after a takeover: the one
    // the last agent gave the kernel, whose pages the kernel may keep and handles read): a
    // listing that meets it changed on the hub must not mix the two. Its uncached blocks
    // answer ESTALE, as before the takeover.
    if (config_.consistency == Consistency::kImmutable && n.attr.is_reg() && attr.is_reg() &&
        SameFileLocked(ino, n, attr.fsid, attr.file_id)) {
      n.attr_time = clock_.Now();
      return ino;
    }
  }
  StoreAttrLocked(ino, n, attr);
  n.attr_valid = true;
  n.attr_time = clock_.Now();
  return ino;
}

void MetadataCache::ApplyListing(uint64_t ino, const std::vector<DirEntry>& entries) {
  MutexLock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  DirEntries children;
  children.Reserve(entries.size());
  for (const auto& e : entries) {
    const uint64_t child = InodeFor(ino, e.name, e.attr);
    // A listing by path brings no handles: a known one stays (it names the same file).
    if (!e.fh.empty()) nodes_[child].fh.Assign(e.fh);
    children.Set(e.name, child);
  }
  Dir& d = nodes_[ino].dir();
  // Names gone from the hub (removed, replaced or renamed away by another client).
  std::vector<uint64_t> gone;
  std::vector<NamedIno> removed;  // names no longer listed at all
  const bool report = report_removals_;
  d.children.ForEach([&](std::string_view name, uint64_t child) {
    const uint64_t now = children.Find(name);
    if (now == child) return;
    gone.push_back(child);
    if (report && now == 0) removed.emplace_back(std::string(name), child);
  });
  NoteRemovedLocked(ino, removed);
  d.children = std::move(children);
  d.snapshot.reset();
  d.listed = true;
  d.list_time = clock_.Now();
  for (uint64_t child : gone) MaybeDropLocked(child);
}

Result<std::string> MetadataCache::DirPathLocked(uint64_t ino) const {
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  if (it->second.attr_valid && !it->second.attr.is_dir()) {
    return Fail(Code::kInvalidArgument, "not a directory");
  }
  return PathLocked(ino);
}

Result<FileAttr> MetadataCache::HubStat(const std::string& path, const Caller& who) {
  return who.is_volume() ? remote_.Stat(path) : remote_.StatAs(who.credentials(), path);
}

Result<std::vector<DirEntry>> MetadataCache::HubReadDir(const std::string& path,
                                                        const Caller& who) {
  return who.is_volume() ? remote_.ReadDir(path) : remote_.ReadDirAs(who.credentials(), path);
}

Status MetadataCache::EnsureListed(uint64_t ino, bool force, bool wait_unknown, const Caller& who) {
  if (wait_unknown) SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  std::string path;
  {
    MutexLock lock(mu_);
    auto it = nodes_.find(ino);
    if (!force && it != nodes_.end() && it->second.entries().listed &&
        Fresh(it->second.entries().list_time)) {
      return Ok();
    }
    SPOKE_TRY(path, DirPathLocked(ino));
  }
  // One hub listing for the callers that ask while it runs. `force` callers (strict, the
  // walk) need one sent after their call; the others take any. It is made as the caller who
  // starts it and shared with the others, each of whom the kernel has let read the directory.
  return flights_.Run(ino, force, [&]() -> Status {
    if (!force) {
      MutexLock lock(mu_);
      auto it = nodes_.find(ino);
      if (it != nodes_.end() && it->second.entries().listed &&
          Fresh(it->second.entries().list_time)) {
        return Ok();  // listed by a run that ended while this caller was arriving
      }
    }
    listings_made_++;
    SPOKE_TRY(auto entries, HubReadDir(path, who));
    ApplyListing(ino, entries);
    return Ok();
  });
}

Result<InodeAttr> MetadataCache::LookupOnHub(uint64_t parent, const std::string& name, bool hold,
                                             const Caller& who) {
  SPOKE_RETURN_IF_ERROR(KnowInode(parent));
  for (int attempt = 1;; ++attempt) {
    std::string path;
    uint64_t since;
    {
      MutexLock lock(mu_);
      SPOKE_TRY(path, DirPathLocked(parent));
      since = BeginAttrAskLocked();
    }
    path = path.empty() ? name : path + "/" + name;
    stats_made_++;
    auto st = HubStat(path, who);
    MutexLock lock(mu_);
    const bool invalidated =
        EndAttrAskLocked(st ? FindFileLocked(st->fsid, st->file_id) : 0, since);
    if (invalidated && attempt < kAttrAskAttempts) continue;  // the answer predates our change
    return LookupAnsweredLocked(parent, name, hold, st, invalidated);
  }
}

Result<InodeAttr> MetadataCache::LookupAnsweredLocked(uint64_t parent, const std::string& name,
                                                      bool hold, const Result<FileAttr>& st,
                                                      bool invalidated) {
  auto pit = nodes_.find(parent);
  if (pit == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(parent));
  if (!st) {
    if (st.error().code() == Code::kNotFound) {
      // Gone on the hub (another node removed or renamed it): forget the cached entry, and
      // the inode unless the kernel or a handle still holds it.
      if (uint64_t old = pit->second.dir().children.Erase(name); old != 0) {
        NoteRemovedLocked(parent, {{name, old}});
        TouchLocked(parent);
        auto n = nodes_.find(old);
        if (n != nodes_.end() && n->second.parent == parent && n->second.name == name)
          n->second.attr_valid = false;
        MaybeDropLocked(old);
      }
    }
    return std::unexpected(st.error());
  }
  uint64_t replaced = 0;
  if (uint64_t c = pit->second.dir().children.Find(name); c != 0) {
    auto old = nodes_.find(c);
    if (old != nodes_.end() && !SameFileLocked(c, old->second, st->fsid, st->file_id) &&
        old->second.parent == parent && old->second.name == name) {
      // Replaced on the hub (rename over it elsewhere): the old inode no longer has this name.
      old->second.attr_valid = false;
      replaced = c;
    }
  }
  uint64_t ino = InodeFor(parent, name, *st);
  nodes_[parent].dir().children.Set(name, ino);
  TouchLocked(parent);
  if (replaced != 0 && replaced != ino) MaybeDropLocked(replaced);
  Node& n = nodes_[ino];
  if (invalidated) n.attr_valid = false;  // given as answered, not kept
  if (hold) AddKernelRefLocked(ino, n);
  return InodeAttr{ino, AttrLocked(ino, n)};
}

Result<InodeAttr> MetadataCache::Lookup(uint64_t parent, const std::string& name, bool hold,
                                        const Caller& who) {
  if (config_.consistency == Consistency::kStrict) return LookupOnHub(parent, name, hold, who);
  {
    MutexLock lock(mu_);
    auto p = nodes_.find(parent);
    if (p != nodes_.end()) {
      const Dir& d = p->second.entries();
      const uint64_t child = d.children.Find(name);
      auto c = child == 0 ? nodes_.end() : nodes_.find(child);
      if (d.listed && Fresh(d.list_time)) {
        if (child == 0) return Fail(Code::kNotFound, "no entry " + name);
        if (c != nodes_.end()) {
          if (hold) AddKernelRefLocked(child, c->second);
          return InodeAttr{child, AttrLocked(child, c->second)};
        }
      }
      // A name met before (an earlier lookup) while its attributes are fresh.
      if (c != nodes_.end() && c->second.attr_valid && Fresh(c->second.attr_time)) {
        if (hold) AddKernelRefLocked(child, c->second);
        return InodeAttr{child, AttrLocked(child, c->second)};
      }
    }
  }
  // Not listed yet (or no longer fresh): one LOOKUP, not a listing of the whole directory,
  // which is a round trip per READDIRPLUS page (the hub timeout bounds each page, so any
  // directory can be listed, but a big one takes many trips). The walk and readdir list it.
  return LookupOnHub(parent, name, hold, who);
}

std::optional<InodeAttr> MetadataCache::Known(uint64_t parent, const std::string& name) const {
  MutexLock lock(mu_);
  auto p = nodes_.find(parent);
  if (p == nodes_.end()) return std::nullopt;
  const uint64_t child = p->second.entries().children.Find(name);
  auto c = child == 0 ? nodes_.end() : nodes_.find(child);
  if (c == nodes_.end()) return std::nullopt;
  return InodeAttr{child, AttrLocked(child, c->second)};
}

Result<FileAttr> MetadataCache::GetAttr(uint64_t ino, const Caller& who) {
  SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  {
    MutexLock lock(mu_);
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
    if (it->second.attr_valid && Fresh(it->second.attr_time)) return AttrLocked(ino, it->second);
  }
  return Revalidate(ino, who);
}

Result<FileAttr> MetadataCache::Revalidate(uint64_t ino, const Caller& who) {
  SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  for (int attempt = 1;; ++attempt) {
    std::string path;
    uint64_t since;
    {
      MutexLock lock(mu_);
      if (!nodes_.contains(ino))
        return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
      path = PathLocked(ino);
      since = BeginAttrAskLocked();
    }
    stats_made_++;
    auto st = HubStat(path, who);
    MutexLock lock(mu_);
    const bool invalidated = EndAttrAskLocked(ino, since);
    if (invalidated && attempt < kAttrAskAttempts) continue;  // the answer predates our change
    return RevalidateAnsweredLocked(ino, path, st, invalidated);
  }
}

Result<FileAttr> MetadataCache::RevalidateAnsweredLocked(uint64_t ino, const std::string& path,
                                                         const Result<FileAttr>& st,
                                                         bool invalidated) {
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  Node& n = it->second;
  if (!st) {
    if (st.error().code() == Code::kNotFound && ino != kRootIno) {
      auto p = nodes_.find(n.parent);
      // Only the entry that still names this inode: the name may be another file's by now.
      if (p != nodes_.end() && p->second.entries().children.Find(n.name.view()) == ino) {
        NoteRemovedLocked(n.parent, {{std::string(n.name.view()), ino}});
        p->second.dir().children.Erase(n.name.view());
        TouchLocked(n.parent);
      }
      n.attr_valid = false;
      MaybeDropLocked(ino);  // `n` may be gone from here on
    }
    return std::unexpected(st.error());
  }
  if (n.attr_valid && !SameFileLocked(ino, n, st->fsid, st->file_id) && ino != kRootIno) {
    // Same path, different file (replaced on the hub): this inode is gone; a fresh lookup
    // will find the new file under a new inode.
    n.attr_valid = false;
    auto p = nodes_.find(n.parent);
    if (p != nodes_.end()) p->second.dir().listed = false;
    return Fail(Code::kNotFound, path + " was replaced on the hub");
  }
  if (invalidated) return *st;  // given as answered, not kept
  StoreAttrLocked(ino, n, *st);
  n.attr_valid = true;
  n.attr_time = clock_.Now();
  return *st;
}

Result<Listing> MetadataCache::ReadDir(uint64_t ino, const Caller& who) {
  // Strict: a listing (opendir) always reflects the hub now, as lookups do.
  bool force = config_.consistency == Consistency::kStrict;
  SPOKE_RETURN_IF_ERROR(EnsureListed(ino, force, /*wait_unknown=*/true, who));
  MutexLock lock(mu_);
  auto dir = nodes_.find(ino);
  if (dir == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  if (!dir->second.dir_data) return Listing();  // listed empty, or a file
  Dir& n = *dir->second.dir_data;
  if (auto shared = n.snapshot.lock()) return Listing(std::move(shared));
  auto out = std::make_shared<std::vector<NamedInode>>();
  out->reserve(n.children.size());
  n.children.ForEach([&](std::string_view name, uint64_t c) {
    mu_.AssertHeld();  // called by ForEach, under the lock above
    auto child = nodes_.find(c);
    if (child == nodes_.end()) return;
    out->push_back(NamedInode{std::string(name), c, AttrLocked(c, child->second)});
  });
  std::shared_ptr<const std::vector<NamedInode>> snapshot = std::move(out);
  n.snapshot = snapshot;
  return Listing(std::move(snapshot));
}

Result<InodeAttr> MetadataCache::Resolve(const std::string& path) {
  InodeAttr cur{kRootIno, {}};
  {
    MutexLock lock(mu_);
    cur.attr = AttrLocked(kRootIno, nodes_[kRootIno]);
  }
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(start, slash - start);
    start = slash + 1;
    if (part.empty()) continue;
    SPOKE_TRY_WRAP(cur, Lookup(cur.ino, part), path);
  }
  return cur;
}

InodeAttr MetadataCache::Added(uint64_t parent, const std::string& name, const FileAttr& attr,
                               bool hold) {
  MutexLock lock(mu_);
  uint64_t ino = InodeFor(parent, name, attr);
  const uint64_t old = nodes_[parent].dir().children.Set(name, ino);
  TouchLocked(parent);
  if (old != 0 && old != ino) MaybeDropLocked(old);
  if (hold) AddKernelRefLocked(ino, nodes_[ino]);
  return InodeAttr{ino, attr};
}

const MetadataCache::Dir& MetadataCache::Node::entries() const {
  static const Dir kNone;
  return dir_data ? *dir_data : kNone;
}

void MetadataCache::Removed(uint64_t parent, const std::string& name) {
  MutexLock lock(mu_);
  Node& p = nodes_[parent];
  const uint64_t ino = p.dir().children.Erase(name);
  if (ino == 0) return;
  p.dir().snapshot.reset();
  p.attr_valid = false;  // mtime/nlink changed
  ForgetRemovedLocked(parent, name, ino);
}

void MetadataCache::Renamed(uint64_t parent, const std::string& name, uint64_t new_parent,
                            const std::string& new_name) {
  MutexLock lock(mu_);
  Node& p = nodes_[parent];
  const uint64_t ino = p.dir().children.Erase(name);
  if (ino == 0) {
    // Not known here: make both directories list again.
    p.dir().listed = false;
    nodes_[new_parent].dir().listed = false;
    return;
  }
  p.dir().snapshot.reset();
  Node& np = nodes_[new_parent];
  const uint64_t old = np.dir().children.Set(new_name, ino);
  np.dir().snapshot.reset();
  const uint64_t replaced = old != ino ? old : 0;
  Node& n = nodes_[ino];
  SetParentLocked(ino, n, new_parent);
  n.name = new_name;
  LogMovedLocked(ino, n);
  n.attr_valid = false;  // ctime changed
  p.attr_valid = false;
  np.attr_valid = false;
  // Replaced (an open one was hidden first): forgotten once nothing else names or holds it.
  if (replaced != 0) ForgetRemovedLocked(new_parent, new_name, replaced);
}

void MetadataCache::Hidden(uint64_t parent, const std::string& name,
                           const std::string& hidden_name) {
  MutexLock lock(mu_);
  Node& p = nodes_[parent];
  const uint64_t ino = p.dir().children.Erase(name);
  if (ino == 0) return;
  p.dir().snapshot.reset();
  p.attr_valid = false;  // mtime changed
  Node& n = nodes_[ino];
  SetParentLocked(ino, n, parent);
  n.name = hidden_name;
  LogMovedLocked(ino, n);
  n.attr_valid = false;  // ctime changed
}

void MetadataCache::SetAttr(uint64_t ino, const FileAttr& attr) {
  MutexLock lock(mu_);
  NoteInvalidatedLocked(ino);  // newer than any answer on its way
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  StoreAttrLocked(ino, it->second, attr);
  it->second.attr_valid = true;
  it->second.attr_time = clock_.Now();
}

void MetadataCache::Invalidate(uint64_t ino) {
  MutexLock lock(mu_);
  NoteInvalidatedLocked(ino);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) it->second.attr_valid = false;
}

uint64_t MetadataCache::BeginAttrAskLocked() {
  attr_asks_.insert(invalidations_);
  return invalidations_;
}

bool MetadataCache::EndAttrAskLocked(uint64_t ino, uint64_t since) {
  auto it = invalidated_at_.find(ino);
  const bool invalidated = it != invalidated_at_.end() && it->second > since;
  attr_asks_.erase(attr_asks_.find(since));
  if (attr_asks_.empty()) {
    invalidated_at_.clear();
  } else if (invalidated_at_.size() >= prune_invalidated_at_) {
    // Asks may overlap for a long time under load: no ask out needs what came before all.
    const uint64_t oldest = *attr_asks_.begin();
    std::erase_if(invalidated_at_, [&](const auto& e) { return e.second <= oldest; });
    prune_invalidated_at_ = std::max<size_t>(4096, 2 * invalidated_at_.size());
  }
  return invalidated;
}

void MetadataCache::NoteInvalidatedLocked(uint64_t ino) {
  ++invalidations_;
  if (!attr_asks_.empty()) invalidated_at_[ino] = invalidations_;
}

void MetadataCache::NoteRemovedLocked(uint64_t parent, const std::vector<NamedIno>& names) {
  if (!report_removals_ || names.empty()) return;
  const std::string dir = PathLocked(parent);  // once for a relisting's many
  std::vector<NamedIno> todo;
  for (const auto& [name, ino] : names)
    todo.emplace_back(dir.empty() ? name : dir + "/" + name, ino);
  // A directory gone takes the files cached under it along (a dated shard removed whole).
  while (!todo.empty()) {
    std::string p = std::move(todo.back().first);
    const uint64_t i = todo.back().second;
    todo.pop_back();
    auto it = nodes_.find(i);
    if (it == nodes_.end()) continue;
    if (it->second.attr.is_reg()) {
      removed_files_.push_back(std::move(p));
    } else if (it->second.attr.is_dir() && it->second.dir_data && i != parent) {
      it->second.dir_data->children.ForEach([&](std::string_view child, uint64_t c) {
        mu_.AssertHeld();  // called by ForEach, under the caller's lock
        if (c != i) todo.emplace_back(p + "/" + std::string(child), c);
      });
    }
  }
}

void MetadataCache::ReportRemovals(bool on) {
  MutexLock lock(mu_);
  report_removals_ = on;
  if (!on) removed_files_ = {};
}

std::vector<std::string> MetadataCache::TakeRemovedFiles() {
  MutexLock lock(mu_);
  return std::exchange(removed_files_, {});
}

size_t MetadataCache::entries() const {
  MutexLock lock(mu_);
  return nodes_.size();
}

}  // namespace spoke::agent
