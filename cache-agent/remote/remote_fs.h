// RemoteFs: the hub's export as the agent sees it. Paths are relative to the volume root
// ("" is the root, "a/b.jpg" a file), already validated (no "..", no leading '/').
// Every call is bounded by the implementation's request timeout: a dead hub gives
// kTimeout or kUnavailable, never a hang.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace spoke::agent {

struct FileAttr {
  uint64_t file_id = 0;  // NFS fileid (inode number on the hub), unique within its fsid
  // NFS fsid: the hub file system the file is on. An export may span several (mounts under
  // the exported directory), whose file ids may repeat: a file is (fsid, file_id).
  uint64_t fsid = 0;
  uint32_t mode = 0;  // st_mode: type + permissions
  uint32_t nlink = 1;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t used = 0;  // bytes allocated on the hub
  uint64_t rdev = 0;  // device number of a character or block device
  struct timespec atime {};
  struct timespec mtime {};
  struct timespec ctime {};

  bool is_dir() const { return (mode & 0170000) == 0040000; }
  bool is_reg() const { return (mode & 0170000) == 0100000; }
  bool is_symlink() const { return (mode & 0170000) == 0120000; }
  // The content version a cached block is valid for: changes when the file changes.
  uint64_t ContentVersion() const;
};

struct DirEntry {
  std::string name;
  FileAttr attr;   // filled by READDIRPLUS
  std::string fh;  // the NFS handle READDIRPLUS gave (files and directories), or empty
};

// Where a RemoteFs finds the NFS file handles its listings gave (DirEntry::fh), by
// volume-relative path, so that a read of a listed file is one READ round trip and a listing
// of a listed directory one READDIRPLUS. The metadata cache is one: it keeps each handle in
// its inode (its tree resolves the path), so names and handles are stored once. A handle
// names one file for the file's whole life: users check the file id it was recorded with.
// Called from the RemoteFs's I/O threads: thread-safe, and never calls the RemoteFs.
class HandleStore {
 public:
  struct Entry {
    std::string fh;  // the opaque handle bytes
    uint64_t file_id = 0;
  };
  virtual ~HandleStore() = default;
  virtual std::optional<Entry> FindHandle(const std::string& path) = 0;
  // The hub called the handle of `path` stale, or it named another file: forget it (and
  // those under it when a store keeps them by path).
  virtual void DropHandles(const std::string& path) = 0;
};

struct FsStat {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t avail_bytes = 0;
  uint64_t total_files = 0;
  uint64_t free_files = 0;
};

// Who a request is made for: sent to the hub as AUTH_SYS, so the hub's permission checks,
// root squashing and ownership apply as for a kernel NFS client. At most 16 groups reach the
// hub (the AUTH_SYS limit); extra ones are dropped.
struct Credentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups
  bool operator==(const Credentials&) const = default;
};

enum class CreateMode {
  kUnchecked,  // an existing file is kept (open without O_EXCL)
  kExclusive,  // O_EXCL: NFSv3 CREATE GUARDED; an existing name gives kAlreadyExists
};

// Which attributes SetAttr changes. A time whose tv_nsec is UTIME_NOW is set to the hub's
// clock (SET_TO_SERVER_TIME); UTIME_OMIT (or no value) leaves it unchanged.
struct SetAttrRequest {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;  // truncate
  std::optional<struct timespec> atime;
  std::optional<struct timespec> mtime;
};

class RemoteFs {
 public:
  using ReadDone = std::function<void(Result<std::vector<char>>)>;

  virtual ~RemoteFs() = default;

  // The entry's own attributes (a symbolic link is not followed). kNotFound, kTimeout,
  // kUnavailable, kIo.
  virtual Result<FileAttr> Stat(const std::string& path) = 0;
  // Entries without "." and "..". kNotFound, kTimeout, kUnavailable, kIo.
  virtual Result<std::vector<DirEntry>> ReadDir(const std::string& path) = 0;
  // Starts a read of up to `length` bytes (at most 1 MiB) at `offset`; `done` runs on an
  // I/O thread with the bytes (short at end of file) or kTimeout/kUnavailable/kIo/kNotFound.
  // Never blocks for the network: many reads may be in flight at once.
  virtual void ReadAsync(const std::string& path, uint64_t offset, uint32_t length,
                         ReadDone done) = 0;
  // A read of the file the caller knows by its id: bytes come only from the file whose NFS
  // fileid is `file_id`. Handles are cached by path, so after the name was replaced on the
  // hub (`mv new old` by another client) the handle is re-checked and re-opened; when the
  // path now names another file (or none), the error is kNotFound with errno ESTALE and no
  // bytes are delivered. `attr` are the file's attributes fetched together with the read
  // (GETATTR pipelined with the READs): compare attr.ContentVersion() with the version the
  // cached blocks belong to to detect a change of content. `data` has the full `length`
  // unless the file ends first (a short hub reply mid-file is continued, never returned).
  struct CheckedRead {
    std::vector<char> data;
    FileAttr attr;
  };
  using CheckedReadDone = std::function<void(Result<CheckedRead>)>;
  virtual void ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset,
                                uint32_t length, CheckedReadDone done);
  Result<CheckedRead> ReadChecked(const std::string& path, uint64_t file_id, uint64_t offset,
                                  uint32_t length);
  // Blocking read built on ReadAsync.
  Result<std::vector<char>> Read(const std::string& path, uint64_t offset, uint32_t length);

  // Write path (scratch volumes). Each returns only after the hub has the data stably
  // (NFS FILE_SYNC or WRITE + COMMIT). kReadOnly, kNoSpace, kNotFound, kTimeout, kIo.
  virtual Result<size_t> Write(const std::string& path, uint64_t offset, const char* data,
                               size_t length) = 0;
  virtual Result<FileAttr> Create(const std::string& path, uint32_t mode) = 0;
  virtual Result<FileAttr> Mkdir(const std::string& path, uint32_t mode) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  virtual Status Rmdir(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Result<FileAttr> SetAttr(const std::string& path, const SetAttrRequest& request) = 0;
  virtual Status Fsync(const std::string& path) = 0;
  virtual Result<FsStat> StatFs() = 0;

  // Namespace and data changes made for a caller (identity as in Credentials). The default
  // implementations answer ENOSYS (Code::kIo) so a RemoteFs without them still builds.
  // Codes beyond those of the calls above: kPermissionDenied (EACCES/EPERM from the hub),
  // kAlreadyExists, kNotEmpty.
  //
  // Create: kExclusive gives kAlreadyExists when the name exists, also when another client
  // created it first; exactly one of several racing exclusive creates succeeds.
  virtual Result<FileAttr> CreateAs(const Credentials& who, const std::string& path, uint32_t mode,
                                    CreateMode how);
  virtual Result<FileAttr> MkdirAs(const Credentials& who, const std::string& path, uint32_t mode);
  // Writes `length` bytes at `offset`, stably; the bytes are copied before the call returns
  // its first chunk, so `data` is not read after the call returned (also on timeout).
  virtual Result<size_t> WriteAs(const Credentials& who, const std::string& path, uint64_t offset,
                                 const char* data, size_t length);
  // Starts a stable write (FILE_SYNC: the hub has the bytes when `done` gets the count) of
  // `data` at `offset` as `who`; `done` runs on an I/O thread, within the request timeout.
  // Never blocks for the network: many writes may be in flight at once, and the hub may
  // apply them in any order (callers keep overlapping ones apart). The default runs WriteAs
  // and calls `done` before returning.
  using WriteDone = std::function<void(Result<size_t>)>;
  virtual void WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                            std::shared_ptr<const std::vector<char>> data, WriteDone done);
  // Unstable writes (writeMode unstable): the hub answers a WRITE before its bytes are on
  // stable storage, with the write verifier of its running instance; a COMMIT makes every
  // answered WRITE of the file stable and returns the verifier then. A WRITE answered with
  // another verifier than the COMMIT's was lost by a hub restart and must be sent again.
  // `stable` is true when the hub made the bytes stable anyway (then no COMMIT is needed).
  // The defaults (a RemoteFs without them) write stably and commit with FsyncAs.
  struct UnstableWrite {
    size_t count = 0;
    bool stable = false;
    // None when it changed between the WRITE's chunks: the WRITE is sent again whatever
    // the COMMIT answers.
    std::optional<uint64_t> verifier = std::nullopt;
  };
  using UnstableWriteDone = std::function<void(Result<UnstableWrite>)>;
  virtual void WriteUnstableAsAsync(const Credentials& who, const std::string& path,
                                    uint64_t offset, std::shared_ptr<const std::vector<char>> data,
                                    UnstableWriteDone done);
  // WriteAsAsync answered as an UnstableWrite that is stable (one reply type for both modes).
  void WriteStableAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                          std::shared_ptr<const std::vector<char>> data, UnstableWriteDone done);
  using CommitDone = std::function<void(Result<uint64_t>)>;
  virtual void CommitAsAsync(const Credentials& who, const std::string& path, CommitDone done);
  // O_APPEND: writes at the hub's current size (GETATTR, then WRITE at that offset) and
  // returns the size after the write. Not atomic against other clients appending at the
  // same moment (NFSv3 has no append).
  virtual Result<uint64_t> AppendAs(const Credentials& who, const std::string& path,
                                    const char* data, size_t length);
  // symlink(target, path): `target` is stored verbatim.
  virtual Result<FileAttr> SymlinkAs(const Credentials& who, const std::string& target,
                                     const std::string& path);
  virtual Result<std::string> ReadLink(const std::string& path);
  // readlink for a caller: a link inside a directory only they may search. The default (a
  // RemoteFs without identities) is ReadLink(path).
  virtual Result<std::string> ReadLinkAs(const Credentials& who, const std::string& path);
  // link(existing, path): a new name for the same file (same file_id, nlink + 1).
  virtual Result<FileAttr> LinkAs(const Credentials& who, const std::string& existing,
                                  const std::string& path);
  // mknod/mkfifo: `mode` carries the type (S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK); `rdev`
  // is used for devices.
  virtual Result<FileAttr> MknodAs(const Credentials& who, const std::string& path, uint32_t mode,
                                   uint64_t rdev);
  // chmod/chown/truncate/utimens, applied in that order; returns the attributes after.
  // Truncating to 0 is how open(O_TRUNC) is carried to the hub.
  virtual Result<FileAttr> SetAttrAs(const Credentials& who, const std::string& path,
                                     const SetAttrRequest& request);
  virtual Status UnlinkAs(const Credentials& who, const std::string& path);
  // kNotEmpty for a directory with entries.
  virtual Status RmdirAs(const Credentials& who, const std::string& path);
  // Atomic on the hub; replaces an existing file, or an empty directory when `from` is one.
  virtual Status RenameAs(const Credentials& who, const std::string& from, const std::string& to);
  // fsync for the writer `who`: the open behind the COMMIT is checked against its identity,
  // not the agent's. The default (a RemoteFs without identities) is Fsync(path).
  virtual Status FsyncAs(const Credentials& who, const std::string& path);

  // Lookups, listings and block reads made for a caller (identity as in Credentials), so the
  // hub's permission checks apply to them as to its changes. The defaults (a RemoteFs without
  // identities) are Stat, ReadDir and ReadCheckedAsync.
  virtual Result<FileAttr> StatAs(const Credentials& who, const std::string& path);
  virtual Result<std::vector<DirEntry>> ReadDirAs(const Credentials& who, const std::string& path);
  virtual void ReadCheckedAsAsync(const Credentials& who, const std::string& path, uint64_t file_id,
                                  uint64_t offset, uint32_t length, CheckedReadDone done);

  // True when the hub sees a request made for `who` as one made with the client's own
  // identity (no identities at all, root squashed to it, or the same uid, gid and no groups):
  // such a request need not carry the caller.
  virtual bool ActsAsSelf(const Credentials& who) const {
    (void)who;
    return true;
  }

  // From now on, handles are looked up in `store` (which records those of the listings it
  // applies); nullptr: back to the RemoteFs's own (if any). The store must outlive its use:
  // detach it before destroying it. A RemoteFs that reads by path only ignores the call.
  virtual void UseHandleStore(HandleStore* store) { (void)store; }

  // Health as last observed: false after a request failed with kTimeout/kUnavailable and no
  // request has succeeded since. `last_error` is empty when healthy.
  virtual bool Reachable() const = 0;
  virtual std::string LastError() const = 0;
};

}  // namespace spoke::agent
