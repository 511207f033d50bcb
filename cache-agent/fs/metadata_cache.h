// MetadataCache: the volume's namespace as the agent serves it, so that lookups, getattr
// and readdir do not wait on the WAN.
//
// Consistency (VolumeContext.cache): kImmutable keeps what it learnt until it is told
// otherwise (our own writes, Invalidate); kTtl re-asks the hub after ttl_seconds; kStrict
// re-asks after a short time and always on open (close-to-open: Revalidate).
//
// Inode numbers (root = 1) are a hash of the hub file's (fsid, fileid), so an agent that takes
// over a live FUSE connection gives each file the number the kernel already holds; a number
// not met yet waits (bounded) for the tree walk. Each inode keeps its parent and name, so its
// path (for RemoteFs calls) follows renames of its ancestors. At mount StartWalk() lists the
// whole tree in the background; Files() exposes the walked files in directory order.
//
// An inode stays while a cached listing names it, the kernel holds it (AddKernelRef/Forget)
// or a handle has it open (Pin/Unpin); the rules, and those after a takeover:
// docs/design.md, "Which inodes the metadata cache keeps".
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache-agent/fs/caller.h"
#include "cache-agent/fs/clock.h"
#include "cache-agent/fs/dir_entries.h"
#include "cache-agent/fs/inode_table.h"
#include "cache-agent/fs/kernel_inode_log.h"
#include "cache-agent/fs/listing_flights.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

namespace spoke::agent {

inline constexpr uint64_t kRootIno = 1;
// Inode numbers of hub files are below this (see StableIno); the agent's own files above.
inline constexpr uint64_t kStableInoLimit = 1ull << 62;

struct InodeAttr {
  uint64_t ino = 0;
  FileAttr attr;
};

struct NamedInode {
  std::string name;
  uint64_t ino = 0;
  FileAttr attr;
};

// An immutable snapshot of a directory's entries in listing order, shared by every opendir
// that sees the same listing: copying it copies a pointer (a copy per opendir of a 1 M-entry
// directory would be ~150 MB).
class Listing {
 public:
  Listing() = default;
  explicit Listing(std::shared_ptr<const std::vector<NamedInode>> entries)
      : entries_(std::move(entries)) {}
  size_t size() const { return entries_ ? entries_->size() : 0; }
  bool empty() const { return size() == 0; }
  const NamedInode& operator[](size_t i) const { return (*entries_)[i]; }
  std::vector<NamedInode>::const_iterator begin() const {
    return entries_ ? entries_->begin() : std::vector<NamedInode>::const_iterator();
  }
  std::vector<NamedInode>::const_iterator end() const {
    return entries_ ? entries_->end() : std::vector<NamedInode>::const_iterator();
  }
  // The same snapshot (tests).
  const void* identity() const { return entries_.get(); }

 private:
  std::shared_ptr<const std::vector<NamedInode>> entries_;
};

struct WalkedFile {
  std::string path;
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t size = 0;
};

class MetadataCache final : public HandleStore {
 public:
  struct Config {
    Consistency consistency = Consistency::kImmutable;
    uint32_t ttl_seconds = 30;
    // Validity of attributes in strict mode between opens (opens always re-ask).
    std::chrono::milliseconds strict_validity{1000};
    // Directories listed at once by the mount-time walk.
    int walk_concurrency = 8;
    // How long a request for an inode number this process has not seen (one an earlier agent
    // gave the kernel) waits for the walk to meet it.
    std::chrono::milliseconds unknown_inode_wait{60000};
    Status Validate() const;
  };

  MetadataCache(RemoteFs& remote, const Config& config, Clock& clock);
  ~MetadataCache() override;  // stops the walk
  MetadataCache(const MetadataCache&) = delete;
  MetadataCache& operator=(const MetadataCache&) = delete;

  // Stats the root. kUnavailable/kTimeout when the hub does not answer.
  Status Init();
  // Starts from the root's attributes an earlier agent saw (a mount taken over, whose hub
  // may be unreachable): no hub round trip; the walk and lookups refresh them.
  void InitFrom(const FileAttr& root);
  // The root's attributes as known now (after Init or InitFrom).
  FileAttr RootAttr() const;
  // Starts the background walk of the whole tree (idempotent).
  void StartWalk();
  // Waits for the walk; false at the deadline.
  bool WaitWalk(std::chrono::milliseconds timeout);
  // Waits until the walk listed a directory beyond `cursor` (see WalkedSince) or ended;
  // false at the deadline.
  bool WaitWalkBeyond(size_t cursor, std::chrono::milliseconds timeout);
  bool walk_done() const { return walk_done_.load(); }
  // Files found by the walk (and since), in directory order, depth first.
  std::vector<WalkedFile> Files(const std::string& prefix = "") const;
  // The files of the directories the walk listed since `*cursor` (0 at first; advanced), in
  // listing order, so that prefetching starts on the first directories of a tree instead
  // of after the whole walk. Read walk_done() before calling: once it was true, the files
  // returned then complete the walk.
  std::vector<WalkedFile> WalkedSince(size_t* cursor) const;

  // kNotFound, kInvalidArgument (not a directory), hub errors. Strict volumes ask the hub for
  // every name (a file another node created or replaced is seen at once, also when the
  // directory's listing is cached); other modes answer from the listing while it is fresh,
  // and ask the hub for the one name (LOOKUP) while the directory is not listed.
  // `hold`: the answer hands the kernel the inode (one reference, counted with the answer so
  // that the inode cannot be dropped in between); see AddKernelRef.
  // `who`, in this and the calls below: the caller the hub is asked for (none: the volume's
  // identity). What one caller's request fetched is shared with the others: the kernel
  // (default_permissions) checks each caller's search and read permission on the directory,
  // from the attributes the hub gave, before it asks for a lookup, a listing or an open.
  Result<InodeAttr> Lookup(uint64_t parent, const std::string& name, bool hold = false,
                           const Caller& who = {});
  // The name as the hub has it now, whatever the consistency mode (one round trip); the
  // cache takes the answer.
  Result<InodeAttr> LookupOnHub(uint64_t parent, const std::string& name, bool hold,
                                const Caller& who = {});
  // The inode the cache has for `name` in `parent`, without asking the hub (nullopt when it has
  // none): for our own changes, which need the inode the kernel was handed by the lookup it
  // made right before them, not a fresh one (a strict Lookup costs a hub round trip).
  std::optional<InodeAttr> Known(uint64_t parent, const std::string& name) const;
  Result<FileAttr> GetAttr(uint64_t ino, const Caller& who = {});
  // Strict volumes list the directory on the hub on every call. Callers share one snapshot
  // while the directory does not change, and concurrent listings of a directory on the hub
  // are one listing (ListingFlights).
  Result<Listing> ReadDir(uint64_t ino, const Caller& who = {});
  // Re-stats now whatever the mode (strict open, after writes).
  Result<FileAttr> Revalidate(uint64_t ino, const Caller& who = {});
  // The inode's path relative to the volume root. kNotFound for an unknown inode.
  Result<std::string> PathOf(uint64_t ino) const;
  // Resolves a relative path ("" = root) through the cache (may list directories).
  Result<InodeAttr> Resolve(const std::string& path);

  // Updates after our own namespace changes (already applied on the hub).
  // `hold`: as for Lookup.
  InodeAttr Added(uint64_t parent, const std::string& name, const FileAttr& attr,
                  bool hold = false);
  void Removed(uint64_t parent, const std::string& name);
  void Renamed(uint64_t parent, const std::string& name, uint64_t new_parent,
               const std::string& new_name);
  // The entry was renamed on the hub to `hidden_name` in the same directory, a name that is
  // never listed: the inode keeps a path for its open handles but leaves the namespace.
  void Hidden(uint64_t parent, const std::string& name, const std::string& hidden_name);
  void SetAttr(uint64_t ino, const FileAttr& attr);
  // Forgets the inode's attributes: the next GetAttr asks the hub. A hub answer about the
  // inode that was on its way meanwhile is not kept: the lookup or getattr that asked asks
  // again (BeginAttrAskLocked below).
  void Invalidate(uint64_t ino);

  // Kernel references (the FUSE lookup count). AddKernelRef: one more (an entry handed to the
  // kernel); false when the inode is not known (any more): no node id may be handed out for it.
  // Forget: the kernel returns `count` of them (FORGET); the inode goes when nothing keeps it.
  bool AddKernelRef(uint64_t ino);
  void Forget(uint64_t ino, uint64_t count);
  // An open handle keeps the inode (the kernel may FORGET it before RELEASE reaches us).
  void Pin(uint64_t ino);
  void Unpin(uint64_t ino);
  // The connection was taken over from an earlier agent: the kernel holds numbers with counts
  // this process never saw. Every inode known now or met before the walk completes (the walk
  // meets every file the volume has, so every number the kernel can hold) is kept from FORGET.
  void AdoptKernelReferences();
  // After a takeover, before AdoptKernelReferences: the inodes an earlier agent handed the
  // kernel (KernelInodeLog::Load), known at once without the hub. Their attributes are
  // trusted on immutable volumes and asked again elsewhere; entries whose parents are not
  // among them are left for the walk. Returns how many were taken.
  size_t AdoptLoggedInodes(const std::vector<KernelInodeLog::Entry>& entries);
  // From now on every inode handed to the kernel goes to `log`, with its renames and drops.
  void LogKernelInodes(std::unique_ptr<KernelInodeLog> log);
  // True once per inode the kernel may hold from an earlier agent (see
  // AdoptKernelReferences): what it cached of the file, attributes and pages, is of the
  // version that agent knew. The caller has the kernel drop it (Open).
  bool TakeKernelCopyStale(uint64_t ino);

  // HandleStore: the NFS handles listings gave (DirEntry::fh) live in the inodes, so a
  // handle costs its bytes only (no second table by path). A path resolves through the
  // cached tree as it is now: after a rename (ours, or one a relisting saw) the old path
  // finds nothing and the new one finds the file's handle, which names the file wherever it
  // is. The RemoteFs checks the file id it was recorded with against the file it means.
  std::optional<Entry> FindHandle(const std::string& path) override;
  void DropHandles(const std::string& path) override;
  // Inodes holding a handle (for tests and figures).
  size_t handles() const;

  // Files gone from the hub, for the prefetcher (whose access tracker would otherwise keep
  // them forever): while on, the volume-relative path of every regular file that a
  // relisting, a lookup or a revalidation finds gone from the hub (removed or renamed away
  // by another client, alone or with a directory; a name now naming another file is not
  // gone) is kept until TakeRemovedFiles hands it out. Off (the default), nothing is kept;
  // turning it off drops what was kept. A path may be handed out twice.
  void ReportRemovals(bool on);
  std::vector<std::string> TakeRemovedFiles();

  // Hub calls made (for figures and tests).
  uint64_t stats_made() const { return stats_made_.load(); }
  uint64_t listings_made() const { return listings_made_.load(); }
  // Inodes held (the agent's memory budget accounts an estimate per entry).
  size_t entries() const;
  Consistency consistency() const { return config_.consistency; }

 private:
  // What only a directory has: most inodes are files, which carry none of it (a pointer).
  struct Dir {
    bool listed = false;
    std::chrono::steady_clock::time_point list_time{};
    DirEntries children;       // name -> ino, hub listing order
    uint32_t child_nodes = 0;  // nodes whose parent this is (kept ones may be unlisted)
    // The snapshot ReadDir handed out, while one of its users keeps it and nothing changed
    // (TouchLocked resets it): no copy of the listing stays with the directory.
    std::weak_ptr<const std::vector<NamedInode>> snapshot;
  };
  // FileAttr in 64 bytes instead of 96: times as 64-bit nanoseconds, the mode in 16 bits (type
  // and permissions), the fsid as an index in fsids_, and the device number (character and
  // block devices only) in a side table (rdevs_).
  struct StoredAttr {
    uint64_t file_id = 0;
    uint64_t size = 0;
    uint64_t used = 0;
    int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
    uint32_t nlink = 1;
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint16_t mode = 0;
    uint16_t fsid = 0;  // index in fsids_; kFarFsid: in far_fsids_ (by inode)
    bool is_dir() const { return (mode & 0170000) == 0040000; }
    bool is_reg() const { return (mode & 0170000) == 0100000; }
  };
  static constexpr uint16_t kFarFsid = 0xffff;
  // 120 bytes; its number is the InodeTable's key (not repeated here).
  struct Node {
    uint64_t parent = 0;
    CompactName name;
    StoredAttr attr;
    uint32_t lookups = 0;  // kernel references; saturated: uncounted
    uint16_t opens = 0;    // open handles; saturated: kept for good
    bool attr_valid : 1 = false;
    bool uncounted : 1 = false;  // the kernel's count is unknown (see AdoptKernelReferences)
    // An earlier agent may have given the kernel attributes and pages of this inode (a
    // version this agent may not serve); until the first open here has them dropped.
    bool kernel_copy_stale : 1 = false;
    // This agent removed its last name (unlink, rmdir, replaced by a rename): the hub file is
    // gone for good, and a hub file with its (fsid, fileid) is a new one that was given the
    // number again (ext4 and others reuse inode numbers at once). The kernel may still hold
    // this node (a deleted directory it keeps as dead): the new file gets a number of its
    // own, or the kernel would take it for the dead one (ENOENT for every create in it).
    bool removed : 1 = false;
    bool logged : 1 = false;  // in log_ (LogKernelInodes)
    std::chrono::steady_clock::time_point attr_time{};
    std::unique_ptr<Dir> dir_data;
    CompactHandle fh;  // from the listing that named it, if any
    Dir& dir() {
      if (!dir_data) dir_data = std::make_unique<Dir>();
      return *dir_data;
    }
    const Dir& entries() const;  // an empty Dir for a file
  };
  static_assert(sizeof(StoredAttr) == 64);
  static_assert(sizeof(Node) <= 120);
  // The directory's entries or an entry's attributes changed: its snapshot is not reused.
  void TouchLocked(uint64_t dir) REQUIRES(mu_);
  // The node's attributes as FileAttr, and storing them. Caller holds mu_.
  FileAttr AttrLocked(uint64_t ino, const Node& n) const REQUIRES(mu_);
  void StoreAttrLocked(uint64_t ino, Node& n, const FileAttr& attr) REQUIRES(mu_);
  // The node of a name our own unlink/rmdir removed goes when nothing else names it, so that
  // memory stays flat across create/unlink cycles. Caller holds mu_.
  void ForgetRemovedLocked(uint64_t parent, const std::string& name, uint64_t ino) REQUIRES(mu_);
  // Names in `parent` gone from the hub, each with the inode it named: kept for
  // TakeRemovedFiles when reporting, a regular file's path, or for a directory the regular
  // files cached under it. Before the inodes may be dropped.
  using NamedIno = std::pair<std::string, uint64_t>;
  void NoteRemovedLocked(uint64_t parent, const std::vector<NamedIno>& names) REQUIRES(mu_);
  // True when `n`'s directory's cached listing names it (or it may be: a hard-linked file).
  bool NamedLocked(uint64_t ino, const Node& n) const REQUIRES(mu_);
  // Drops `ino` when nothing keeps it (docs/design.md, "Which inodes the metadata cache
  // keeps"), then its parent if that was kept only for it. `dropping`: a directory dropping its
  // entries (not re-entered). Caller holds mu_.
  void MaybeDropLocked(uint64_t ino, uint64_t dropping = 0) REQUIRES(mu_);
  // Moves `n` under `parent`, keeping the directories' child_nodes right. Caller holds mu_.
  void SetParentLocked(uint64_t ino, Node& n, uint64_t parent) REQUIRES(mu_);
  void AddKernelRefLocked(uint64_t ino, Node& n) REQUIRES(mu_);
  // log_ lines for a logged node: its (new) place, and its end. LogKeptLocked also logs a node
  // not logged yet, and rewrites the log when it has grown far past the logged nodes.
  KernelInodeLog::Entry LogEntryLocked(uint64_t ino, const Node& n) const REQUIRES(mu_);
  void LogKeptLocked(uint64_t ino, Node& n) REQUIRES(mu_);
  void LogMovedLocked(uint64_t ino, const Node& n) REQUIRES(mu_);
  void LogDroppedLocked(uint64_t ino, Node& n) REQUIRES(mu_);
  bool Fresh(std::chrono::steady_clock::time_point t) const;
  std::string PathLocked(uint64_t ino) const REQUIRES(mu_);
  // The path of directory `ino`: kNotFound for an unknown inode, kInvalidArgument for a file.
  Result<std::string> DirPathLocked(uint64_t ino) const REQUIRES(mu_);
  uint64_t InodeFor(uint64_t parent, const std::string& name, const FileAttr& attr) REQUIRES(mu_);
  // A hub file is (fsid, file_id). Caller holds mu_ (all four).
  uint64_t StableIno(uint64_t fsid, uint64_t file_id) const REQUIRES(mu_);
  uint64_t HomeIno(uint64_t fsid, uint64_t file_id) const REQUIRES(mu_);
  // The inode of hub file (fsid, file_id), 0 when none (the root is never returned).
  uint64_t FindFileLocked(uint64_t fsid, uint64_t file_id) const REQUIRES(mu_);
  bool SameFileLocked(uint64_t ino, const Node& n, uint64_t fsid, uint64_t file_id) const
      REQUIRES(mu_);
  // The fsid's index (kFarFsid once fsids_ is full); the fsid of inode `ino`.
  uint16_t FsidIndexLocked(uint64_t fsid) REQUIRES(mu_);
  uint64_t FsidLocked(uint64_t ino, const Node& n) const REQUIRES(mu_);
  // Ok once `ino` is known, waiting (bounded) for the walk when it is not yet.
  Status KnowInode(uint64_t ino);
  void ApplyListing(uint64_t ino, const std::vector<DirEntry>& entries);
  // The inode `path` names in the cached tree, 0 when none. Caller holds mu_.
  uint64_t ResolveCachedLocked(std::string_view path) const REQUIRES(mu_);
  // `wait_unknown`: an unknown inode waits for the walk (KnowInode); else it is kNotFound.
  Status EnsureListed(uint64_t ino, bool force, bool wait_unknown = true, const Caller& who = {});
  // The hub's Stat / ReadDir, as `who` when there is one.
  Result<FileAttr> HubStat(const std::string& path, const Caller& who);
  Result<std::vector<DirEntry>> HubReadDir(const std::string& path, const Caller& who);
  void WalkWorker();

  RemoteFs& remote_;
  Config config_;
  Clock& clock_;
  mutable Mutex mu_;
  InodeTable<Node> nodes_ GUARDED_BY(mu_);
  // Inodes not at their file's StableIno home number (taken by another file when they were
  // numbered: vanishingly rare), by file id; every other file is found at its home number.
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> displaced_ GUARDED_BY(mu_);  // (fsid, file id)
  std::vector<uint64_t> fsids_ GUARDED_BY(mu_){0};  // hub file systems met (StoredAttr::fsid)
  uint64_t root_fsid_ = 0;  // the volume root's; set by Init before any numbering
  std::unordered_map<uint64_t, uint64_t> rdevs_ GUARDED_BY(mu_);  // device numbers by inode
  // Fsids of inodes on the 65,536th and later hub file system met (StoredAttr::kFarFsid).
  std::unordered_map<uint64_t, uint64_t> far_fsids_ GUARDED_BY(mu_);
  bool adopted_ GUARDED_BY(mu_) = false;
  // Set with adopted_: lets TakeKernelCopyStale skip mu_ on every open of a volume that was
  // never taken over.
  std::atomic<bool> kernel_copies_stale_{false};
  std::unique_ptr<KernelInodeLog> log_ GUARDED_BY(mu_);
  size_t logged_ GUARDED_BY(mu_) = 0;  // nodes with Node::logged
  bool report_removals_ GUARDED_BY(mu_) = false;
  std::vector<std::string> removed_files_ GUARDED_BY(mu_);  // ReportRemovals
  ListingFlights flights_;  // taken before mu_, never while holding it
  std::atomic<uint64_t> stats_made_{0};
  std::atomic<uint64_t> listings_made_{0};

  // The hub's answer to a lookup / getattr taken into the cache; `invalidated`: the inode
  // was invalidated while it was on its way (given to the caller, not kept).
  Result<InodeAttr> LookupAnsweredLocked(uint64_t parent, const std::string& name, bool hold,
                                         const Result<FileAttr>& st, bool invalidated)
      REQUIRES(mu_);
  Result<FileAttr> RevalidateAnsweredLocked(uint64_t ino, const std::string& path,
                                            const Result<FileAttr>& st, bool invalidated)
      REQUIRES(mu_);

  // Hub answers about attributes (LOOKUP, GETATTR) are taken without mu_: one that was on
  // its way while our own change invalidated the inode (a write landed, a setattr) predates
  // the change, and kept it would stand for the file until the next revalidation (for good
  // on an immutable volume): a size from before the write makes the kernel cut reads short.
  // Each ask notes the count of invalidations when it goes out; inodes invalidated while
  // asks are out are noted with the count, so that an ask sees whether its inode was
  // invalidated after it went. Notes older than every ask out go.
  uint64_t BeginAttrAskLocked() REQUIRES(mu_);
  // Whether `ino` was invalidated after the ask that began at `since`; ends that ask.
  bool EndAttrAskLocked(uint64_t ino, uint64_t since) REQUIRES(mu_);
  void NoteInvalidatedLocked(uint64_t ino) REQUIRES(mu_);
  // Times an ask is sent at most while its inode keeps being invalidated meanwhile; the last
  // answer is returned uncached.
  static constexpr int kAttrAskAttempts = 3;
  uint64_t invalidations_ GUARDED_BY(mu_) = 0;
  std::multiset<uint64_t> attr_asks_ GUARDED_BY(mu_);  // each ask's count when it went out
  std::unordered_map<uint64_t, uint64_t> invalidated_at_ GUARDED_BY(mu_);
  size_t prune_invalidated_at_ GUARDED_BY(mu_) = 4096;  // size of invalidated_at_ to prune at

  // Walk state.
  mutable Mutex walk_mu_;
  std::vector<uint64_t> walked_dirs_ GUARDED_BY(walk_mu_);  // listed by the walk, in order
  CondVar walk_cv_;
  std::deque<uint64_t> walk_queue_ GUARDED_BY(walk_mu_);
  int walk_active_ GUARDED_BY(walk_mu_) = 0;
  bool walk_started_ GUARDED_BY(walk_mu_) = false;
  std::atomic<bool> walk_done_{false};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> walkers_;
};

}  // namespace spoke::agent
