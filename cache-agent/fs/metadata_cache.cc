#include "cache-agent/fs/metadata_cache.h"

#include <functional>

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
  root.ino = kRootIno;
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
  std::lock_guard<std::mutex> lock(mu_);
  Node& root = nodes_[kRootIno];
  root.attr = st;
  root.attr_valid = true;
  root.attr_time = clock_.Now();
  by_file_id_[st.file_id] = kRootIno;
  return Ok();
}

std::string MetadataCache::PathLocked(uint64_t ino) const {
  std::vector<const std::string*> parts;
  while (ino != kRootIno) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) break;
    parts.push_back(&it->second.name);
    ino = it->second.parent;
  }
  std::string path;
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    if (!path.empty()) path += '/';
    path += **p;
  }
  return path;
}

Result<std::string> MetadataCache::PathOf(uint64_t ino) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!nodes_.contains(ino)) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  return PathLocked(ino);
}

// Inode numbers outlive the agent process in the kernel (until FORGET), so a new agent must
// give each file the number an earlier one gave it: a hash of the hub's fileid (the hub
// exports one file system per volume). Below kStableInoLimit (the hint file lives above);
// a collision with another file takes the next free number (vanishingly rare for 62 bits).
uint64_t MetadataCache::StableIno(uint64_t file_id) const {
  uint64_t x = file_id + 0x9e3779b97f4a7c15ull;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  uint64_t ino = x % (kStableInoLimit - kRootIno - 1) + kRootIno + 1;
  while (true) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end() || it->second.attr.file_id == file_id) {
      return ino;
    }
    ino = ino + 1 < kStableInoLimit ? ino + 1 : kRootIno + 1;
  }
}

Status MetadataCache::KnowInode(uint64_t ino) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (nodes_.contains(ino)) return Ok();
  }
  // Unknown: a number an earlier agent gave the kernel. The tree walk meets every file of the
  // volume and numbers it the same way; wait for it (bounded) to reach this one.
  {
    std::lock_guard<std::mutex> wl(walk_mu_);
    if (!walk_started_) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  }
  auto deadline = std::chrono::steady_clock::now() + config_.unknown_inode_wait;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (nodes_.contains(ino)) return Ok();
    }
    if (walk_done_.load() || stop_.load() || std::chrono::steady_clock::now() >= deadline) break;
    std::unique_lock<std::mutex> wl(walk_mu_);
    walk_cv_.wait_for(wl, std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (nodes_.contains(ino)) return Ok();
  return Fail(Code::kNotFound,
              "unknown inode " + std::to_string(ino) + " (not found by the walk of the volume)");
}

uint64_t MetadataCache::InodeFor(uint64_t parent, const std::string& name, const FileAttr& attr) {
  uint64_t ino;
  auto it = by_file_id_.find(attr.file_id);
  if (it != by_file_id_.end() && nodes_.contains(it->second) && it->second != kRootIno) {
    ino = it->second;
  } else {
    ino = StableIno(attr.file_id);
    by_file_id_[attr.file_id] = ino;
  }
  auto [slot, created] = nodes_.try_emplace(ino);
  Node& n = slot->second;
  n.ino = ino;
  // Until the walk has met every file, a number met may be one an earlier agent gave the
  // kernel (AdoptKernelReferences).
  if (created && adopted_ && !walk_done_.load()) n.uncounted = true;
  // A file seen under a new name (renamed by another client, or a hard link) follows the
  // most recent name.
  SetParentLocked(n, parent);
  n.name = name;
  if (n.attr_valid && n.attr.ContentVersion() != attr.ContentVersion()) {
    if (n.dir_data) n.dir_data->listed = n.dir_data->listed && attr.is_dir();
  }
  n.attr = attr;
  n.attr_valid = true;
  n.attr_time = clock_.Now();
  return ino;
}

void MetadataCache::ApplyListing(uint64_t ino, const std::vector<DirEntry>& entries) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  std::vector<std::string> order;
  std::unordered_map<std::string, uint64_t> children;
  order.reserve(entries.size());
  for (const auto& e : entries) {
    uint64_t child = InodeFor(ino, e.name, e.attr);
    order.push_back(e.name);
    children[e.name] = child;
  }
  Dir& d = nodes_[ino].dir();
  // Names gone from the hub (removed, replaced or renamed away by another client).
  std::vector<uint64_t> gone;
  for (const auto& [name, child] : d.children) {
    auto now = children.find(name);
    if (now == children.end() || now->second != child) gone.push_back(child);
  }
  d.order = std::move(order);
  d.children = std::move(children);
  d.unlisted.clear();
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

Status MetadataCache::EnsureListed(uint64_t ino, bool force, bool wait_unknown) {
  if (wait_unknown) SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(ino);
    if (!force && it != nodes_.end() && it->second.entries().listed &&
        Fresh(it->second.entries().list_time)) {
      return Ok();
    }
    SPOKE_TRY(path, DirPathLocked(ino));
  }
  listings_made_++;
  SPOKE_TRY(auto entries, remote_.ReadDir(path));
  ApplyListing(ino, entries);
  return Ok();
}

Result<InodeAttr> MetadataCache::LookupOnHub(uint64_t parent, const std::string& name, bool hold) {
  SPOKE_RETURN_IF_ERROR(KnowInode(parent));
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SPOKE_TRY(path, DirPathLocked(parent));
  }
  path = path.empty() ? name : path + "/" + name;
  stats_made_++;
  auto st = remote_.Stat(path);
  std::lock_guard<std::mutex> lock(mu_);
  auto pit = nodes_.find(parent);
  if (pit == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(parent));
  if (!st) {
    if (st.error().code() == Code::kNotFound) {
      // Gone on the hub (another node removed or renamed it): forget the cached entry, and
      // the inode unless the kernel or a handle still holds it.
      auto c = pit->second.dir().children.find(name);
      if (c != pit->second.dir().children.end()) {
        uint64_t old = c->second;
        auto n = nodes_.find(old);
        if (n != nodes_.end() && n->second.parent == parent && n->second.name == name)
          n->second.attr_valid = false;
        Unlist(pit->second.dir(), name);
        MaybeDropLocked(old);
      }
    }
    return std::unexpected(st.error());
  }
  uint64_t replaced = 0;
  auto c = pit->second.dir().children.find(name);
  if (c != pit->second.dir().children.end()) {
    auto old = nodes_.find(c->second);
    if (old != nodes_.end() && old->second.attr.file_id != st->file_id &&
        old->second.parent == parent && old->second.name == name) {
      // Replaced on the hub (rename over it elsewhere): the old inode no longer has this name.
      old->second.attr_valid = false;
      replaced = c->second;
    }
  }
  uint64_t ino = InodeFor(parent, name, *st);
  List(nodes_[parent].dir(), name, ino);
  if (replaced != 0 && replaced != ino) MaybeDropLocked(replaced);
  Node& n = nodes_[ino];
  if (hold) HoldLocked(n);
  return InodeAttr{ino, n.attr};
}

Result<InodeAttr> MetadataCache::Lookup(uint64_t parent, const std::string& name, bool hold) {
  if (config_.consistency == Consistency::kStrict) return LookupOnHub(parent, name, hold);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = nodes_.find(parent);
    if (p != nodes_.end()) {
      const Dir& d = p->second.entries();
      auto it = d.children.find(name);
      auto c = it == d.children.end() ? nodes_.end() : nodes_.find(it->second);
      if (d.listed && Fresh(d.list_time)) {
        if (it == d.children.end()) return Fail(Code::kNotFound, "no entry " + name);
        if (c != nodes_.end()) {
          if (hold) HoldLocked(c->second);
          return InodeAttr{it->second, c->second.attr};
        }
      }
      // A name met before (an earlier lookup) while its attributes are fresh.
      if (c != nodes_.end() && c->second.attr_valid && Fresh(c->second.attr_time)) {
        if (hold) HoldLocked(c->second);
        return InodeAttr{it->second, c->second.attr};
      }
    }
  }
  // Not listed yet (or no longer fresh): one LOOKUP, not a listing of the whole directory,
  // which takes a round trip per page (a 20k-entry directory: ~25 s at 60 ms; one larger
  // than the hub timeout allows could never be listed). The walk and readdir list it.
  return LookupOnHub(parent, name, hold);
}

Result<FileAttr> MetadataCache::GetAttr(uint64_t ino) {
  SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
    if (it->second.attr_valid && Fresh(it->second.attr_time)) return it->second.attr;
  }
  return Revalidate(ino);
}

Result<FileAttr> MetadataCache::Revalidate(uint64_t ino) {
  SPOKE_RETURN_IF_ERROR(KnowInode(ino));
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!nodes_.contains(ino)) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
    path = PathLocked(ino);
  }
  stats_made_++;
  auto st = remote_.Stat(path);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  Node& n = it->second;
  if (!st) {
    if (st.error().code() == Code::kNotFound && ino != kRootIno) {
      auto p = nodes_.find(n.parent);
      // Only the entry that still names this inode: the name may be another file's by now.
      if (p != nodes_.end()) {
        auto c = p->second.entries().children.find(n.name);
        if (c != p->second.entries().children.end() && c->second == ino) {
          Unlist(p->second.dir(), n.name);
        }
      }
      n.attr_valid = false;
      MaybeDropLocked(ino);  // `n` may be gone from here on
    }
    return std::unexpected(st.error());
  }
  if (n.attr_valid && n.attr.file_id != st->file_id && ino != kRootIno) {
    // Same path, different file (replaced on the hub): this inode is gone; a fresh lookup
    // will find the new file under a new inode.
    n.attr_valid = false;
    auto p = nodes_.find(n.parent);
    if (p != nodes_.end()) p->second.dir().listed = false;
    return Fail(Code::kNotFound, path + " was replaced on the hub");
  }
  n.attr = *st;
  n.attr_valid = true;
  n.attr_time = clock_.Now();
  by_file_id_[st->file_id] = ino;
  return n.attr;
}

Result<std::vector<NamedInode>> MetadataCache::ReadDir(uint64_t ino) {
  // Strict: a listing (opendir) always reflects the hub now, as lookups do.
  bool force = config_.consistency == Consistency::kStrict;
  SPOKE_RETURN_IF_ERROR(EnsureListed(ino, force));
  std::lock_guard<std::mutex> lock(mu_);
  auto dir = nodes_.find(ino);
  if (dir == nodes_.end()) return Fail(Code::kNotFound, "unknown inode " + std::to_string(ino));
  const Dir& n = dir->second.entries();
  std::vector<NamedInode> out;
  out.reserve(n.children.size());
  for (const auto& name : n.order) {
    auto c = n.children.find(name);
    if (c == n.children.end()) continue;
    auto child = nodes_.find(c->second);
    if (child == nodes_.end()) continue;
    out.push_back(NamedInode{name, c->second, child->second.attr});
  }
  return out;
}

Result<InodeAttr> MetadataCache::Resolve(const std::string& path) {
  InodeAttr cur{kRootIno, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    cur.attr = nodes_[kRootIno].attr;
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
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t ino = InodeFor(parent, name, attr);
  auto& p = nodes_[parent].dir();
  auto old = p.children.find(name);
  uint64_t replaced = old != p.children.end() && old->second != ino ? old->second : 0;
  List(p, name, ino);
  if (replaced != 0) MaybeDropLocked(replaced);
  if (hold) HoldLocked(nodes_[ino]);
  return InodeAttr{ino, attr};
}

const MetadataCache::Dir& MetadataCache::Node::entries() const {
  static const Dir kNone;
  return dir_data ? *dir_data : kNone;
}

void MetadataCache::List(Dir& p, const std::string& name, uint64_t ino) {
  if (!p.children.contains(name) && p.unlisted.erase(name) == 0) p.order.push_back(name);
  p.children[name] = ino;
}

bool MetadataCache::Unlist(Dir& p, const std::string& name) {
  if (p.children.erase(name) == 0) return false;
  p.unlisted.insert(name);
  if (p.unlisted.size() > p.children.size() + 64) {
    std::erase_if(p.order, [&p](const std::string& n) { return p.unlisted.contains(n); });
    p.unlisted.clear();
  }
  return true;
}

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
  MaybeDropLocked(ino);  // unless the kernel or a handle still holds it
}

bool MetadataCache::NamedLocked(uint64_t ino, const Node& n) const {
  // Another link may be an entry of a listing under a name this node no longer records.
  if (!n.attr.is_dir() && n.attr.nlink > 1) return true;
  auto p = nodes_.find(n.parent);
  if (p == nodes_.end() || n.parent == ino) return false;
  const Dir& d = p->second.entries();
  auto c = d.children.find(n.name);
  return c != d.children.end() && c->second == ino;
}

void MetadataCache::SetParentLocked(Node& n, uint64_t parent) {
  if (n.parent == parent) return;
  if (n.parent != 0 && n.parent != n.ino) {
    auto old = nodes_.find(n.parent);
    if (old != nodes_.end() && old->second.dir_data && old->second.dir_data->child_nodes > 0) {
      old->second.dir_data->child_nodes--;
    }
  }
  n.parent = parent;
  if (parent != 0 && parent != n.ino) {
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
    for (const auto& [name, child] : d.children) entries.push_back(child);
    d.children.clear();
    d.order.clear();
    d.unlisted.clear();
    d.listed = false;
    for (uint64_t child : entries) MaybeDropLocked(child, ino);  // not back into this one
    // A child still kept (held by the kernel or open) needs this node for its path.
    if (d.child_nodes > 0) return;
  }
  uint64_t parent = n.parent;
  SetParentLocked(n, 0);
  auto f = by_file_id_.find(n.attr.file_id);
  if (f != by_file_id_.end() && f->second == ino) by_file_id_.erase(f);
  nodes_.erase(it);
  // A directory kept only for this child's path may go now (unless it is the one dropping
  // its entries: it decides for itself once they are done).
  if (parent != ino) MaybeDropLocked(parent, dropping);
}

void MetadataCache::HoldLocked(Node& n) {
  if (n.lookups == UINT32_MAX) {
    n.uncounted = true;  // a count we can no longer keep: never dropped by FORGET
    return;
  }
  n.lookups++;
}

bool MetadataCache::Hold(uint64_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return false;
  HoldLocked(it->second);
  return true;
}

void MetadataCache::Forget(uint64_t ino, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  if (it->second.opens < UINT16_MAX) it->second.opens++;  // saturated: kept for good
}

void MetadataCache::Unpin(uint64_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  if (n.opens == 0 || n.opens == UINT16_MAX) return;
  n.opens--;
  MaybeDropLocked(ino);
}

void MetadataCache::AdoptKernelReferences() {
  std::lock_guard<std::mutex> lock(mu_);
  adopted_ = true;
  for (auto& [ino, n] : nodes_) n.uncounted = true;
}

void MetadataCache::Removed(uint64_t parent, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Node& p = nodes_[parent];
  auto it = p.dir().children.find(name);
  if (it == p.dir().children.end()) return;
  uint64_t ino = it->second;
  Unlist(p.dir(), name);
  p.attr_valid = false;  // mtime/nlink changed
  ForgetRemovedLocked(parent, name, ino);
}

void MetadataCache::Renamed(uint64_t parent, const std::string& name, uint64_t new_parent,
                            const std::string& new_name) {
  std::lock_guard<std::mutex> lock(mu_);
  Node& p = nodes_[parent];
  auto it = p.dir().children.find(name);
  if (it == p.dir().children.end()) {
    // Not known here: make both directories list again.
    p.dir().listed = false;
    nodes_[new_parent].dir().listed = false;
    return;
  }
  uint64_t ino = it->second;
  Unlist(p.dir(), name);
  Node& np = nodes_[new_parent];
  auto old = np.dir().children.find(new_name);
  uint64_t replaced = old != np.dir().children.end() && old->second != ino ? old->second : 0;
  List(np.dir(), new_name, ino);
  Node& n = nodes_[ino];
  SetParentLocked(n, new_parent);
  n.name = new_name;
  n.attr_valid = false;  // ctime changed
  p.attr_valid = false;
  np.attr_valid = false;
  // Replaced (an open one was hidden first): forgotten once nothing else names or holds it.
  if (replaced != 0) ForgetRemovedLocked(new_parent, new_name, replaced);
}

void MetadataCache::Hidden(uint64_t parent, const std::string& name,
                           const std::string& hidden_name) {
  std::lock_guard<std::mutex> lock(mu_);
  Node& p = nodes_[parent];
  auto it = p.dir().children.find(name);
  if (it == p.dir().children.end()) return;
  uint64_t ino = it->second;
  Unlist(p.dir(), name);
  p.attr_valid = false;  // mtime changed
  Node& n = nodes_[ino];
  SetParentLocked(n, parent);
  n.name = hidden_name;
  n.attr_valid = false;  // ctime changed
}

void MetadataCache::SetAttr(uint64_t ino, const FileAttr& attr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  it->second.attr = attr;
  it->second.attr_valid = true;
  it->second.attr_time = clock_.Now();
}

void MetadataCache::Invalidate(uint64_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) it->second.attr_valid = false;
}

// ---- walk -----------------------------------------------------------------------------

void MetadataCache::StartWalk() {
  std::lock_guard<std::mutex> lock(walk_mu_);
  if (walk_started_) return;
  walk_started_ = true;
  walk_queue_.push_back(kRootIno);
  for (int i = 0; i < config_.walk_concurrency; ++i) {
    walkers_.emplace_back([this] { WalkWorker(); });
  }
}

void MetadataCache::WalkWorker() {
  while (true) {
    uint64_t ino;
    {
      std::unique_lock<std::mutex> lock(walk_mu_);
      walk_cv_.wait(lock,
                    [&] { return stop_.load() || !walk_queue_.empty() || walk_active_ == 0; });
      if (stop_.load()) return;
      if (walk_queue_.empty()) {
        // Nothing queued and nobody listing: the walk is over.
        walk_done_.store(true);
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
    std::vector<uint64_t> subdirs;
    if (!st && st.error().code() == Code::kNotFound) {
      log::Debug("metadata walk: a directory went meanwhile", {{"error", st.error().ToString()}});
    } else if (!st) {
      log::Warn("metadata walk: listing failed", {{"error", st.error().ToString()}});
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto dir = nodes_.find(ino); dir != nodes_.end()) {
        const Dir& n = dir->second.entries();
        for (const auto& name : n.order) {
          auto c = n.children.find(name);
          if (c == n.children.end()) continue;
          auto child = nodes_.find(c->second);
          if (child != nodes_.end() && child->second.attr.is_dir()) subdirs.push_back(c->second);
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(walk_mu_);
      for (uint64_t d : subdirs) walk_queue_.push_back(d);
      if (st) walked_dirs_.push_back(ino);
      walk_active_--;
    }
    walk_cv_.notify_all();
  }
}

bool MetadataCache::WaitWalk(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(walk_mu_);
  return walk_cv_.wait_for(lock, timeout, [&] { return walk_done_.load() || stop_.load(); }) &&
         walk_done_.load();
}

std::vector<WalkedFile> MetadataCache::Files(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WalkedFile> out;
  std::function<void(uint64_t, const std::string&)> visit = [&](uint64_t ino,
                                                                const std::string& path) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return;
    const Dir& n = it->second.entries();
    for (const auto& name : n.order) {
      auto c = n.children.find(name);
      if (c == n.children.end()) continue;
      auto child = nodes_.find(c->second);
      if (child == nodes_.end()) continue;
      std::string child_path = path.empty() ? name : path + "/" + name;
      const Node& cn = child->second;
      if (cn.attr.is_dir()) {
        if (c->second != ino) visit(c->second, child_path);
      } else if (cn.attr.is_reg()) {
        bool match = prefix.empty() || child_path == prefix ||
                     child_path.starts_with(prefix.back() == '/' ? prefix : prefix + "/");
        if (match) {
          out.push_back(
              WalkedFile{child_path, cn.attr.file_id, cn.attr.ContentVersion(), cn.attr.size});
        }
      }
    }
  };
  visit(kRootIno, "");
  return out;
}

std::vector<WalkedFile> MetadataCache::WalkedSince(size_t* cursor) const {
  std::vector<uint64_t> dirs;
  {
    std::lock_guard<std::mutex> lock(walk_mu_);
    if (*cursor < walked_dirs_.size()) {
      dirs.assign(walked_dirs_.begin() + static_cast<std::ptrdiff_t>(*cursor), walked_dirs_.end());
    }
    *cursor = walked_dirs_.size();
  }
  std::vector<WalkedFile> out;
  if (dirs.empty()) return out;
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t ino : dirs) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) continue;
    const std::string dir = PathLocked(ino);
    const Dir& n = it->second.entries();
    for (const auto& name : n.order) {
      auto c = n.children.find(name);
      if (c == n.children.end()) continue;
      const Node& cn = nodes_.at(c->second);
      if (!cn.attr.is_reg()) continue;
      out.push_back(WalkedFile{dir.empty() ? name : dir + "/" + name, cn.attr.file_id,
                               cn.attr.ContentVersion(), cn.attr.size});
    }
  }
  return out;
}

size_t MetadataCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

}  // namespace spoke::agent
