// VolumeFs: the filesystem semantics of one mounted volume, independent of FUSE (tests call
// it directly). FuseAdapter only translates callbacks and errno.
//
// Reads are split on block boundaries and served from the BlockCache, the hub on a miss
// (BlockFetcher); every read is reported to the PrefetchDriver. Metadata comes from the
// MetadataCache in the volume's consistency mode; strict volumes re-stat on open
// (close-to-open), and since a block's key carries the file's content version, blocks of an
// older version are never served.
//
// Writes (scratch volumes only; read-only volumes get kReadOnly = EROFS) go through to the
// hub and return only when the hub has them (RemoteFs contract); the file's cached
// attributes and blocks are dropped.
//
// The hint control file `<root>/.spoke-hints` (kHintFileName, inode kHintIno) is the agent's
// own: lookup, create, open, write, setattr (truncate) and release work on it even on
// read-only volumes; it never appears in readdir and never reaches the hub. Each write's
// bytes go to PrefetchDriver::AddHints (one path per line), release flushes a last
// unterminated line; reads return nothing. Unlink/rename/mkdir of it: kPermissionDenied.
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
#include "cache-agent/fs/prefetch_driver.h"
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
  };

  struct OpenFile {
    uint64_t handle = 0;
    bool keep_cache = false;  // the kernel may keep its page cache (immutable volumes)
    bool direct_io = false;   // bypass the kernel page cache (strict volumes)
  };

  // `prefetch` may be null (prefetch off). All references must outlive the VolumeFs.
  VolumeFs(const Config& config, RemoteFs& remote, MetadataCache& metadata, BlockFetcher& fetcher,
           PrefetchDriver* prefetch, Clock& clock);

  Result<InodeAttr> Lookup(uint64_t parent, const std::string& name);
  Result<FileAttr> GetAttr(uint64_t ino);
  Result<std::vector<NamedInode>> ReadDir(uint64_t ino);
  // kInvalidArgument for a directory; kReadOnly for write access on a read-only volume.
  Result<OpenFile> Open(uint64_t ino, int flags);
  // Reads up to `size` bytes at `offset` into `out`; short only at end of file.
  Result<size_t> Read(uint64_t handle, uint64_t offset, size_t size, char* out);
  Status Release(uint64_t handle);
  Result<FsStat> StatFs();

  Result<std::pair<InodeAttr, OpenFile>> Create(uint64_t parent, const std::string& name,
                                                uint32_t mode, int flags);
  Result<size_t> Write(uint64_t handle, uint64_t offset, const char* data, size_t size);
  Result<InodeAttr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode);
  Status Unlink(uint64_t parent, const std::string& name);
  Status Rmdir(uint64_t parent, const std::string& name);
  // flags (RENAME_NOREPLACE/EXCHANGE) are not supported: kInvalidArgument.
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags);
  Result<FileAttr> SetAttr(uint64_t ino, const SetAttrRequest& request);
  Status Fsync(uint64_t handle);

  const Config& config() const { return config_; }
  size_t open_handles() const;

 private:
  struct Handle {
    uint64_t ino = 0;
    FileRef file;
    bool writable = false;
    bool written = false;
    bool hints = false;  // the hint control file
    Mutex mu;
    BlockData last_block GUARDED_BY(mu);
    uint64_t last_index GUARDED_BY(mu) = UINT64_MAX;
  };
  std::shared_ptr<Handle> Get(uint64_t handle) const;
  Status CheckWritable() const;
  Result<std::string> ChildPath(uint64_t parent, const std::string& name) const;
  uint64_t NewHandle(std::shared_ptr<Handle> h);
  void DropBlocks(uint64_t file_id);
  void MarkChanged(uint64_t ino, std::optional<uint64_t> size);
  static bool IsHintName(uint64_t parent, const std::string& name);
  FileAttr HintAttr() const;
  OpenFile OpenHints();

  Config config_;
  RemoteFs& remote_;
  MetadataCache& metadata_;
  BlockFetcher& fetcher_;
  PrefetchDriver* prefetch_;
  Clock& clock_;

  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Handle>> handles_ GUARDED_BY(mu_);
  uint64_t next_handle_ GUARDED_BY(mu_) = 1;
  std::atomic<uint64_t> dirty_versions_{0};

  Mutex statfs_mu_;
  std::optional<FsStat> statfs_ GUARDED_BY(statfs_mu_);
  std::chrono::steady_clock::time_point statfs_time_ GUARDED_BY(statfs_mu_){};
};

}  // namespace spoke::agent
