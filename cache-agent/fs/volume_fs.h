// VolumeFs: the filesystem semantics of one mounted volume, independent of FUSE (tests call
// it directly). FuseAdapter only translates callbacks and errno.
//
// Reads are split on block boundaries and served from the BlockCache, the hub on a miss
// (BlockFetcher); every read is reported to the PrefetchDriver. Metadata comes from the
// MetadataCache in the volume's consistency mode; strict volumes re-stat on open
// (close-to-open), and since a block's key carries the file's content version, blocks of an
// older version are never served.
//
// Writes (scratch volumes only; read-only volumes get kReadOnly = EROFS) drop the file's
// cached attributes and blocks. With write-back (Config::write_back) a write is answered once
// WriteBack holds it, and fsync, close (FLUSH) and a directory's fsync return once the hub has
// everything written before them; a write-back failure is returned by the file's next write,
// fsync or close. Reads, truncates, renames, links and unlinks of a file wait for its held
// writes first. Without write-back, each write returns only when the hub has it (RemoteFs).
//
// The hint control file `<root>/.spoke-hints` (kHintFileName, inode kHintIno) is the agent's
// own: lookup, create, open, write, setattr (truncate) and release work on it even on
// read-only volumes; it never appears in readdir and never reaches the hub. Each write's
// bytes go to PrefetchDriver::AddHints (one path per line), release flushes a last
// unterminated line; reads return nothing. Unlink/rename/mkdir of it: kPermissionDenied.
//
// Unlink of a file some handle of this mount holds open, or a rename over one, first renames
// it on the hub to `.spoke-unlinked-<id>` in the same directory (as the kernel NFS client's
// silly rename): the holders keep reading and writing it, its link count shows one less, and
// the last release removes it. Names with that prefix are never listed or looked up.
//
// All methods are thread-safe (FUSE calls them from several threads). Errors: kNotFound,
// kReadOnly, kInvalidArgument, kAlreadyExists, kNotEmpty, kNoSpace, kPermissionDenied and the
// hub's kTimeout/kUnavailable/kIo (EIO at the edge).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/clock.h"
#include "cache-agent/fs/metadata_cache.h"
#include "cache-agent/fs/open_records.h"
#include "cache-agent/fs/prefetch_driver.h"
#include "cache-agent/fs/write_back.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

namespace spoke::agent {

// The hint control file's inode: far above any inode MetadataCache hands out.
inline constexpr uint64_t kHintIno = 1ull << 62;

class VolumeFs {
 public:
  struct Config {
    std::string volume_id;
    bool read_only = true;  // dataset volume, or mounted read-only
    Consistency consistency = Consistency::kImmutable;
    // How long FSSTAT answers are reused (df in a loop must not hammer the WAN).
    std::chrono::milliseconds statfs_cache{5000};
    // Where the opener of each writable handle is kept for an agent that takes the mount
    // over (must outlive the VolumeFs). Null: writable handles of an earlier agent are
    // reopened as the agent.
    OpenRecords* open_records = nullptr;
    // Scratch volumes with writeMode writeback.
    bool write_back = false;
    WriteBack::Config write_back_config;
  };

  struct OpenFile {
    uint64_t handle = 0;
    bool keep_cache = false;  // the kernel may keep its page cache (immutable volumes)
    bool direct_io = false;   // bypass the kernel page cache (strict volumes)
    // The kernel may hold attributes an earlier agent gave it for this inode (a connection
    // taken over): the adapter invalidates them, so that its size is the one this open reads.
    bool kernel_attrs_stale = false;
    // close() must wait for the agent (FLUSH): the handle's held writes reach the hub first.
    bool flush = false;
  };

  // `prefetch` may be null (prefetch off). All references must outlive the VolumeFs.
  VolumeFs(const Config& config, RemoteFs& remote, MetadataCache& metadata, BlockFetcher& fetcher,
           PrefetchDriver* prefetch, Clock& clock);

  // `who`: the caller the hub is asked for, when the cache must ask (none: the volume's
  // identity).
  Result<InodeAttr> Lookup(uint64_t parent, const std::string& name, const Caller& who = {});
  Result<FileAttr> GetAttr(uint64_t ino, const Caller& who = {});
  // The metadata cache's shared snapshot; a copy only when names must be left out.
  Result<Listing> ReadDir(uint64_t ino, const Caller& who = {});
  // kInvalidArgument for a directory; kReadOnly for write access on a read-only volume.
  // O_TRUNC empties the file on the hub before returning (the kernel sends no SETATTR);
  // O_APPEND makes the handle's writes land at the hub's current size. `who` is the caller:
  // the handle's hub changes (truncate, writes) are made as `who`. Without `who`, as the
  // agent (root, which the hub sees as hubUid/hubGid unless the volume allows root).
  Result<OpenFile> Open(uint64_t ino, int flags, const Credentials& who);
  Result<OpenFile> Open(uint64_t ino, int flags) { return Open(ino, flags, Credentials{}); }
  // Reads up to `size` bytes at `offset` into `out`; short only at end of file.
  Result<size_t> Read(uint64_t handle, uint64_t offset, size_t size, char* out);
  // The same bytes, as pieces of the blocks that hold them (no copy): a FUSE reply gathers
  // them straight from the blocks, so a read holds no buffer of its own beside them.
  struct ReadPiece {
    BlockData block;
    size_t offset = 0;  // into *block
    size_t length = 0;
  };
  Result<std::vector<ReadPiece>> ReadPieces(uint64_t handle, uint64_t offset, size_t size);
  Status Release(uint64_t handle);
  Result<FsStat> StatFs();

  // O_EXCL: an exclusive create on the hub (kAlreadyExists when the name exists there, also
  // when another node created it); O_TRUNC empties a file that exists on the hub.
  Result<std::pair<InodeAttr, OpenFile>> Create(uint64_t parent, const std::string& name,
                                                uint32_t mode, int flags, const Credentials& who);
  Result<std::pair<InodeAttr, OpenFile>> Create(uint64_t parent, const std::string& name,
                                                uint32_t mode, int flags) {
    return Create(parent, name, mode, flags, Credentials{});
  }
  // `resent`: the kernel resent this write after a takeover, and the earlier agent may have
  // made it already. An O_APPEND handle then writes it at `offset` (the kernel's end of file
  // when it was first sent) instead of at the hub's end: made again in place, not appended
  // twice.
  Result<size_t> Write(uint64_t handle, uint64_t offset, const char* data, size_t size,
                       bool resent = false);
  // Namespace and attribute changes, made on the hub as `who` (the overloads without it: as
  // the agent, see Open). Rmdir of a non-empty directory: kNotEmpty.
  Result<InodeAttr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode,
                          const Credentials& who);
  Status Unlink(uint64_t parent, const std::string& name, const Credentials& who);
  Status Rmdir(uint64_t parent, const std::string& name, const Credentials& who);
  // Replaces an existing file or empty directory atomically on the hub. flags
  // (RENAME_NOREPLACE/EXCHANGE) are not supported: kInvalidArgument.
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags, const Credentials& who);
  // Times with tv_nsec UTIME_NOW take the hub's clock; UTIME_OMIT leaves them.
  Result<FileAttr> SetAttr(uint64_t ino, const SetAttrRequest& request, const Credentials& who);
  Result<InodeAttr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode) {
    return Mkdir(parent, name, mode, Credentials{});
  }
  Status Unlink(uint64_t parent, const std::string& name) {
    return Unlink(parent, name, Credentials{});
  }
  Status Rmdir(uint64_t parent, const std::string& name) {
    return Rmdir(parent, name, Credentials{});
  }
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags) {
    return Rename(parent, name, new_parent, new_name, flags, Credentials{});
  }
  Result<FileAttr> SetAttr(uint64_t ino, const SetAttrRequest& request) {
    return SetAttr(ino, request, Credentials{});
  }
  Status Fsync(uint64_t handle);
  // close(): the handle's file's held writes are on the hub, or their error.
  Status Flush(uint64_t handle);
  // fsync of a directory: every held write of the volume is on the hub (a file renamed into
  // it included).
  Status FsyncDir(uint64_t ino);
  // Handles (fh) outlive the agent process in the kernel: each encodes what reopens it (bit 0:
  // writable, bit 1: the hint file, then a tag of the content version it was opened on; ids
  // count from the wall clock so no process reuses one).
  // A handle unknown here is an earlier agent's: reopened for `ino` under the same id. If the
  // file's version is no longer the one the id was issued for, its reads fail with ESTALE.
  Status EnsureHandle(uint64_t handle, uint64_t ino);
  // symlink(target, parent/name): `target` is stored verbatim on the hub.
  Result<InodeAttr> Symlink(uint64_t parent, const std::string& name, const std::string& target,
                            const Credentials& who);
  // The link's target, read on the hub as `who` (a link in a directory only they may search).
  Result<std::string> ReadLink(uint64_t ino, const Caller& who = {});
  // A new name for the file `ino` (NFSv3 LINK).
  Result<InodeAttr> Link(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                         const Credentials& who);
  // mknod/mkfifo: `mode` carries the type (FIFO, socket, char/block device).
  Result<InodeAttr> Mknod(uint64_t parent, const std::string& name, uint32_t mode, uint64_t rdev,
                          const Credentials& who);

  // Outcome checks for a request the kernel resent after a takeover (the earlier agent may
  // have carried it out on the hub before it died) whose hub call failed as it fails once
  // done: each asks the hub whether the change is there. Removed: unlink/rmdir that found
  // no name. Renamed: a rename whose source is gone and whose target exists. Made: a mkdir,
  // symlink, mknod or exclusive create that found the name taken, by an entry of that type
  // owned by the caller (and, for a symlink, with its target), which is answered as made.
  // Linked: a link whose new name is the file `ino`. Each asks as the caller `who`, who may be
  // the only one allowed to search the directories.
  bool RemovedBefore(uint64_t parent, const std::string& name, const Credentials& who);
  // The target must be the file the source named when this agent knew it.
  bool RenamedBefore(uint64_t parent, const std::string& name, uint64_t new_parent,
                     const std::string& new_name, const Credentials& who);
  Result<InodeAttr> MadeBefore(uint64_t parent, const std::string& name, uint32_t type,
                               const Credentials& who, const std::string& symlink_target = "");
  Result<InodeAttr> LinkedBefore(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                                 const Credentials& who);

  // Kernel references (the FUSE lookup count, docs in metadata_cache.h): Lookup, Create, Mkdir,
  // Symlink, Link and Mknod hand the caller one reference on the inode they answer; AddKernelRef
  // adds one for an entry handed out otherwise (readdirplus) and is false when the inode is no
  // longer known (hand out no node id for it then); Forget returns `count` of them (FORGET, or
  // a reply the kernel did not take). An inode no reference, open handle or cached listing
  // keeps is forgotten.
  bool AddKernelRef(uint64_t ino);
  void Forget(uint64_t ino, uint64_t count);

  const Config& config() const { return config_; }
  size_t open_handles() const;

 private:
  // A file unlinked while open: where it lives on the hub until its last handle closes.
  struct Unlinked {
    std::string path;
    Credentials who;  // who unlinked it: the final removal is made as them
    uint64_t file_id = 0;
  };
  struct Handle {
    uint64_t ino = 0;
    FileRef file;
    bool writable = false;
    bool written = false;
    bool hints = false;   // the hint control file
    bool append = false;  // O_APPEND: writes go to the hub's current end of file
    // An earlier agent's handle whose file changed on the hub since it was opened (its
    // version tag): reads fail, never the new version's bytes beside the kernel's old pages.
    bool changed_before_reopen = false;
    // An earlier agent's writable handle whose opener is not known (no open record): its
    // writes are refused rather than made as anyone else.
    bool opener_unknown = false;
    Credentials who;  // the opener: the handle's reads and writes reach the hub as this caller
    std::atomic<bool> recorded{false};  // OpenRecords holds the opener (for a takeover)
    // Write-back: the open record carries the held mark (OpenRecords::MarkHeld).
    std::atomic<bool> marked{false};
    // An earlier agent's handle that had answered writes not known to be on the hub: the next
    // write, fsync or close fails with EIO once, so that the writer learns of a possible loss.
    std::atomic<bool> lost_writes{false};
    Mutex mu;
    BlockData last_block GUARDED_BY(mu);
    uint64_t last_index GUARDED_BY(mu) = UINT64_MAX;
  };
  // Versions for files written through this mount: never equal to a hub content version, so
  // blocks read through a handle that wrote are never taken from (or left for) other readers.
  static constexpr uint64_t kDirtyVersionBit = 1ull << 63;

  std::shared_ptr<Handle> Get(uint64_t handle) const;
  Status CheckWritable() const;
  Result<std::string> ChildPath(uint64_t parent, const std::string& name) const;
  uint64_t NewHandle(std::shared_ptr<Handle> h);
  // Keeps the opener of a writable handle for a successor agent (OpenRecords).
  void RecordOpener(uint64_t id, Handle& h);
  static Status CheckOpenerKnown(const Handle& h);
  // `who`: the opener; the handle's hub reads go as them (null: as the volume's identity).
  Result<std::shared_ptr<Handle>> MakeHandle(uint64_t ino, bool write, const Credentials* who);
  void DropBlocks(uint64_t file_id);
  // Write-back: waits for the held writes of `ino` (no-op without write-back).
  Status WaitForWrites(uint64_t ino);
  // fsync/close: the file's held writes on the hub (or their error), the handle's mark settled.
  Status SettleWrites(uint64_t id, Handle& h);
  void MarkChanged(uint64_t ino, std::optional<uint64_t> size);
  static bool IsHintName(uint64_t parent, const std::string& name);
  static bool IsHiddenName(const std::string& name);
  bool HasHandles(uint64_t ino) const;
  // Renames parent/name (the file `ino`, open here) to a hidden name (returned); see the
  // header note.
  Result<std::string> HideOpenFile(uint64_t parent, const std::string& name, uint64_t ino,
                                   const Credentials& who);
  // Gives a file moved aside by HideOpenFile its name back (the rename it made room for failed).
  void RestoreAside(uint64_t parent, const std::string& hidden_name, const std::string& name,
                    const InodeAttr& file, const Credentials& who);
  // Removes a hidden file whose last handle has closed (no-op for other inodes).
  void RemoveIfUnlinked(uint64_t ino);
  FileAttr HintAttr() const;
  OpenFile OpenHints();

  Config config_;
  RemoteFs& remote_;
  MetadataCache& metadata_;
  BlockFetcher& fetcher_;
  PrefetchDriver* prefetch_;
  Clock& clock_;
  std::unique_ptr<WriteBack> write_back_;  // null without write-back

  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Handle>> handles_ GUARDED_BY(mu_);
  uint64_t next_handle_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Unlinked> unlinked_ GUARDED_BY(mu_);  // by inode
  std::atomic<uint64_t> dirty_versions_{0};

  Mutex statfs_mu_;
  CondVar statfs_cv_;  // a refresh ended
  std::optional<FsStat> statfs_ GUARDED_BY(statfs_mu_);
  std::chrono::steady_clock::time_point statfs_time_ GUARDED_BY(statfs_mu_){};
  bool statfs_refreshing_ GUARDED_BY(statfs_mu_) = false;
  std::optional<Error> statfs_error_ GUARDED_BY(statfs_mu_);  // the last refresh's failure
};

}  // namespace spoke::agent
