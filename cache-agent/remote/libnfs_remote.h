// LibnfsRemote: RemoteFs over a pool of libnfs 4.0.0 async NFSv3 contexts.
//
// Each connection is one nfs_context driven by its own event-loop thread (libnfs 4.0.0 is
// not thread-safe: a context belongs to one thread). Other threads hand work to a loop
// through a mailbox + eventfd. Many reads are in flight per connection (bounded by a
// per-connection limit); reads go to the least loaded connection, writes and namespace
// changes to connection 0 so they are applied in order.
//
// Every call is bounded by the pool's deadline per request (request_timeout_seconds,
// retries included; a listing by handle gets it per READDIRPLUS page, so that a directory too
// big to list within one timeout is still listed). Idempotent calls (reads, stats, readdir,
// statfs) are retried with exponential backoff inside that bound.
// A context whose socket failed, or that received nothing for the RPC bound (about half the
// request bound) while calls were out, is destroyed and re-mounted by its loop with backoff,
// so the pool recovers after the hub restarts or the path goes dark. Its calls in flight are
// failed first, on the context that still exists, so each releases its file handle (closed
// before the context goes) and is retried on the new one. A call is never sent again on a
// connection that is still receiving: on a slow link its first reply may still be crossing,
// and a second copy would only queue behind it.
//
// File handles are opened lazily per connection (path -> nfsfh cache) and dropped on
// ESTALE/ENOENT and on local renames/unlinks. They are not shared between connections:
// struct nfsfh is private to libnfs and tied to its context. Besides, listings are raw
// READDIRPLUS calls by the directory's handle, and the handles they return are kept for all
// connections (a HandleStore: the metadata cache's inodes, or the remote's own HandleTable
// when none is attached): a listed small file is then read with one raw READ, the round
// trip a cold file costs over the WAN; what has no known handle goes by path as above.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache-agent/remote/handle_table.h"
#include "cache-agent/remote/hub_health.h"
#include "cache-agent/remote/nfs_connection.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

namespace spoke::agent {

class LibnfsRemote final : public RemoteFs {
 public:
  struct Config {
    // TCP connections (libnfs contexts + loop threads). Several connections spread the
    // hub's per-connection limits and the client's per-loop CPU.
    int connections = 4;
    // Reads in flight per connection: 64 x 1 MiB over a 60 ms RTT is ~1 GB/s.
    int inflight_per_connection = 128;
    // Bound on every call, retries included: a dead hub gives an error after this.
    double request_timeout_seconds = 10;
    // Retries of a failed idempotent call (reads, stats) within the bound.
    static constexpr int kMaxRetries = 10;
    int retries = 3;
    // Cached file handles per connection before unused ones are closed.
    size_t handle_cache_size = 8192;
    // Handles from READDIRPLUS, so that a read of a listed file is one READ round trip
    // instead of a LOOKUP per path component, an ACCESS and the READ. Kept in the attached
    // HandleStore (the agent attaches the volume's metadata cache: in its inodes, ~50 bytes
    // each), else in the remote's own table by path (handle_table.h, ~150 bytes each), of at
    // most this many. 0: none kept (strict volumes): reads go by path, a listing looks its
    // directory up at the time of the call.
    size_t fh_table_size = 65536;
    // Connect() waits until one connection is mounted (kUnavailable otherwise). false:
    // returns at once and calls fail with kTimeout until the hub answers (tests, lazy use).
    bool wait_for_mount = true;
    // AUTH_SYS uid/gid of the calls without Credentials (walk, prefetch, warm-up); -1 = the
    // process's own (root in the agent). Set from the volume's hubUid/hubGid unless it
    // allows root.
    int64_t uid = -1;
    int64_t gid = -1;
    // Identity of the *As calls on the hub. kCaller: the caller's Credentials (AUTH_SYS),
    // uid 0 mapped to fixed_uid/fixed_gid unless allow_root. kFixed: every call as
    // fixed_uid/fixed_gid with no groups (all-squash). The calls without Credentials
    // (Create, Write, ...) use the agent's own identity.
    enum class IdentityMode { kCaller, kFixed };
    IdentityMode identity_mode = IdentityMode::kCaller;
    uint32_t fixed_uid = 65534;
    uint32_t fixed_gid = 65534;
    bool allow_root = false;
    // Identity connections (one libnfs context carries one AUTH_SYS credential; each of an
    // identity's lanes is one); the least recently used idle one is closed beyond this.
    size_t max_identities = 64;
    // Connections per caller identity that its block reads (ReadCheckedAsAsync) and pipelined
    // WRITEs (WriteAsAsync) are spread over, by file and 1 MiB range: one connection's loop
    // thread carries less than the link does.
    int identity_lanes = 4;
    // kInvalidArgument naming the field.
    Status Validate() const;
  };

  // Connects `config.connections` contexts to the hub's share; every path is taken
  // relative to `root` (the volume's directory inside the share, "" = the share). Then
  // waits until one is mounted. kUnavailable (message names the hub) when none is within
  // the request timeout; kInvalidArgument for a bad config. `registry` may be null; it
  // must outlive the remote. `labels` are added to every metric (e.g. {"hub", addr}).
  static Result<std::unique_ptr<LibnfsRemote>> Connect(const HubAddress& hub,
                                                       const std::string& root,
                                                       const Config& config,
                                                       metrics::Registry* registry,
                                                       const metrics::Labels& labels = {});
  ~LibnfsRemote() override;

  Result<FileAttr> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ReadDir(const std::string& path) override;
  void ReadAsync(const std::string& path, uint64_t offset, uint32_t length, ReadDone done) override;
  void ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset, uint32_t length,
                        CheckedReadDone done) override;
  Result<size_t> Write(const std::string& path, uint64_t offset, const char* data,
                       size_t length) override;
  Result<FileAttr> Create(const std::string& path, uint32_t mode) override;
  Result<FileAttr> Mkdir(const std::string& path, uint32_t mode) override;
  Status Unlink(const std::string& path) override;
  Status Rmdir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Result<FileAttr> SetAttr(const std::string& path, const SetAttrRequest& request) override;
  Status Fsync(const std::string& path) override;
  Result<FsStat> StatFs() override;

  Result<FileAttr> CreateAs(const Credentials& who, const std::string& path, uint32_t mode,
                            CreateMode how) override;
  Result<FileAttr> MkdirAs(const Credentials& who, const std::string& path, uint32_t mode) override;
  Result<size_t> WriteAs(const Credentials& who, const std::string& path, uint64_t offset,
                         const char* data, size_t length) override;
  void WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                    std::shared_ptr<const std::vector<char>> data, WriteDone done) override;
  Result<uint64_t> AppendAs(const Credentials& who, const std::string& path, const char* data,
                            size_t length) override;
  Result<FileAttr> SymlinkAs(const Credentials& who, const std::string& target,
                             const std::string& path) override;
  Result<std::string> ReadLink(const std::string& path) override;
  Result<std::string> ReadLinkAs(const Credentials& who, const std::string& path) override;
  bool ActsAsSelf(const Credentials& who) const override { return AsPool(who); }
  Result<FileAttr> LinkAs(const Credentials& who, const std::string& existing,
                          const std::string& path) override;
  Result<FileAttr> MknodAs(const Credentials& who, const std::string& path, uint32_t mode,
                           uint64_t rdev) override;
  Result<FileAttr> SetAttrAs(const Credentials& who, const std::string& path,
                             const SetAttrRequest& request) override;
  Status UnlinkAs(const Credentials& who, const std::string& path) override;
  Status RmdirAs(const Credentials& who, const std::string& path) override;
  Status RenameAs(const Credentials& who, const std::string& from, const std::string& to) override;
  Status FsyncAs(const Credentials& who, const std::string& path) override;
  // Raw WRITE3 (UNSTABLE) and COMMIT3 by the file's handle, so the hub's write verifier
  // reaches the caller (libnfs' own calls drop it).
  void WriteUnstableAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                            std::shared_ptr<const std::vector<char>> data,
                            UnstableWriteDone done) override;
  void CommitAsAsync(const Credentials& who, const std::string& path, CommitDone done) override;
  Result<FileAttr> StatAs(const Credentials& who, const std::string& path) override;
  Result<std::vector<DirEntry>> ReadDirAs(const Credentials& who, const std::string& path) override;
  void ReadCheckedAsAsync(const Credentials& who, const std::string& path, uint64_t file_id,
                          uint64_t offset, uint32_t length, CheckedReadDone done) override;

  // The identity a caller's request reaches the hub with under this config.
  Credentials EffectiveIdentity(const Credentials& who) const;
  // Hub connections opened for caller identities so far (for tests and metrics).
  size_t IdentityConnections() const;

  bool Reachable() const override;
  std::string LastError() const override;

  // "127.0.0.1:2049" — used in error messages and metric labels.
  const std::string& hub_name() const { return hub_name_; }
  // Requests started but not finished, over all connections.
  int64_t InFlight() const;
  // Checked reads answered by a handle from a listing (one round trip), and handles known.
  uint64_t reads_by_handle() const { return reads_by_handle_.load(); }
  // Stats, creates and removals sent as one LOOKUP, CREATE or REMOVE by the handle of the
  // name's directory (for tests and figures).
  uint64_t names_by_handle() const { return names_by_handle_.load(); }
  // Handles in the remote's own table (none while another store is attached).
  size_t handles_known() const { return fh_table_.size(); }
  // Listed handles go to `store` (see RemoteFs); ignored when fh_table_size is 0 (by path).
  void UseHandleStore(HandleStore* store) override;

  // Internal: called by connections with each finished request.
  void Record(const char* op, double seconds, const Error* error);

 private:
  LibnfsRemote(const HubAddress& hub, const Config& config, metrics::Registry* registry,
               const metrics::Labels& labels);
  NfsConnection& LeastLoaded();
  // The connection a file's reads go to: the same one for a path while it has room, so a
  // file is opened (one LOOKUP per path component over the WAN) on one connection rather
  // than on each; spills to the least loaded one when that connection is full.
  NfsConnection& ForPath(const std::string& path);
  NfsConnection& Writer() { return *connections_[0]; }
  // The connection whose context carries `who` (mapped by EffectiveIdentity); opened on
  // first use. `lane` (< identity_lanes) picks one of the identity's connections.
  std::shared_ptr<NfsConnection> ForIdentity(const Credentials& who, int lane = 0);
  // One of identity_lanes, by file and MiB: a big file's range and many small files both
  // spread over them.
  int LaneFor(const std::string& path, uint64_t offset) const;
  // `who` reaches the hub as the pool's own credential (no groups): the pool may carry it.
  bool AsPool(const Credentials& who) const;
  NfsConnection::Options BaseOptions(int index) const;
  // Shared bodies of the calls with and without Credentials.
  Result<FileAttr> CreateOn(NfsConnection& c, const std::string& path, uint32_t mode,
                            CreateMode how);
  Result<FileAttr> MkdirOn(NfsConnection& c, const std::string& path, uint32_t mode);
  Result<size_t> WriteOn(NfsConnection& c, const std::string& path, uint64_t offset,
                         const char* data, size_t length);
  // One WRITE job's attempt: the payload in write_max() chunks, each FILE_SYNC.
  using WriteAttempt =
      std::function<void(NfsConnection&, nfs_context*, const std::shared_ptr<NfsJob>&,
                         const std::function<void(size_t)>& deliver)>;
  static WriteAttempt WriteChunks(const std::string& path, uint64_t offset,
                                  std::shared_ptr<const std::vector<char>> payload);
  Result<FileAttr> SetAttrOn(NfsConnection& c, const std::string& path,
                             const SetAttrRequest& request);
  Status UnlinkOn(NfsConnection& c, const std::string& path);
  Status RmdirOn(NfsConnection& c, const std::string& path);
  Status RenameOn(NfsConnection& c, const std::string& from, const std::string& to);
  Status FsyncOn(NfsConnection& c, const std::string& path);
  Result<FileAttr> StatOn(NfsConnection& c, const std::string& path);
  Result<std::string> ReadLinkOn(NfsConnection& c, const std::string& path);
  Result<std::vector<DirEntry>> ReadDirOn(NfsConnection& c, const std::string& path);
  void ReadCheckedOn(NfsConnection& c, const std::string& path, uint64_t file_id, uint64_t offset,
                     uint32_t length, CheckedReadDone done);
  void InvalidateEverywhere(const std::string& path);
  // Loop thread of `c`. Calls k with the directory's handle, or an empty one when it is
  // not known (the caller goes by path); the volume root's is looked up once.
  void DirHandle(NfsConnection& c, const std::string& path, std::function<void(std::string)> k);
  // Loop thread of `c`. Calls k with the handle of the directory at `path` looked up now, one
  // LOOKUP per component from the share's root (strict volumes: a handle remembered by path
  // lags behind renames by other clients), or an empty one when a LOOKUP fails (the caller
  // goes by path, which says why).
  void FreshDirHandle(NfsConnection& c, const std::string& path,
                      std::function<void(std::string)> k);
  // READDIRPLUS pages by handle; with `keep_handles`, records the entries' handles. Each page
  // that arrives moves the job's deadline to a request timeout from then. A stale handle, an
  // entry without attributes or a device entry hands over to `by_path`.
  void RecordListedHandles(const std::string& path, const std::vector<DirEntry>& entries);
  void ReadDirByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                       const std::string& fh, std::function<void(std::vector<DirEntry>)> deliver,
                       std::function<void()> by_path, bool keep_handles);
  // READs by handle with the reply's attributes as the checked read's; a stale handle (or
  // another file's) is dropped and the attempt fails with ESTALE, so the retry goes by path.
  void ReadByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                    const std::string& fh, uint64_t file_id, uint64_t offset, uint32_t length,
                    std::shared_ptr<CheckedReadDone> done);
  void ReadOpenedChecked(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                         std::shared_ptr<NfsHandle> h, const std::string& key, uint64_t file_id,
                         uint64_t offset, uint32_t length, std::shared_ptr<CheckedReadDone> done);
  // Loop thread of `c`. Calls k with the handle of the directory holding `path` (DirHandle:
  // the volume root's, or a listed directory's) and the last name; an empty handle when none
  // is known or `path` is the root (the caller goes by path).
  void ParentHandle(NfsConnection& c, const std::string& path,
                    std::function<void(std::string dir_fh, std::string name)> k);
  // One round trip each, by the directory's handle, where libnfs' path calls cost a LOOKUP
  // per component (and a GETATTR) before the call, and a LOOKUP + GETATTR after a create for
  // its attributes. A stale directory handle is dropped and hands over to `by_path` (nothing
  // was changed on the hub); a reply without attributes, or a device's (kept in libnfs'
  // encoding on the other path), too.
  void StatByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                    const std::string& dir_fh, const std::string& name,
                    std::function<void(FileAttr)> deliver, std::function<void()> by_path);
  void CreateByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                      const std::string& dir_fh, const std::string& name, uint32_t mode,
                      CreateMode how, std::function<void(FileAttr)> deliver,
                      std::function<void()> by_path);
  void RemoveByHandle(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                      const std::string& dir_fh, const std::string& name,
                      std::function<void()> deliver, std::function<void()> by_path);
  std::optional<HandleStore::Entry> FindHandle(const std::string& path);
  // Loop thread of `c`. Calls k with the handle of the file at `path` (remembered from an
  // earlier call, else a LOOKUP from its directory's handle or along the path from the
  // volume root) and 0, or an empty one and why the lookup failed (a negative errno: the
  // network's failures stay the network's, so that a write-back sends the WRITE again).
  void FileHandleForWrite(NfsConnection& c, const std::string& path,
                          std::function<void(std::string, int)> k);
  // One unstable WRITE or COMMIT job's attempt by handle; a stale handle is forgotten and
  // looked up again once.
  void UnstableWriteAttempt(NfsConnection& c, const std::shared_ptr<NfsJob>& j,
                            const std::string& path, uint64_t offset,
                            std::shared_ptr<const std::vector<char>> payload,
                            std::shared_ptr<UnstableWriteDone> done, bool looked_again);
  void CommitAttempt(NfsConnection& c, const std::shared_ptr<NfsJob>& j, const std::string& path,
                     std::shared_ptr<CommitDone> done, bool looked_again);
  void ForgetWriteHandles(const std::string& path);
  void DropHandles(const std::string& path);
  // The libnfs path of a volume-relative path ("/root/path").
  std::string Full(const std::string& path) const;

  Config config_;
  std::string hub_name_;
  std::string root_;      // "" or "/sub/dir": the volume's directory inside the share
  HandleTable fh_table_;  // before connections_: their loops use it until they stop
  // Handles of files written unstably, by path; dropped with the path's other handles.
  Mutex write_fh_mu_;
  std::map<std::string, std::string, std::less<>> write_fhs_ GUARDED_BY(write_fh_mu_);
  // Where handles are found: &fh_table_, an attached store, or nullptr (fh_table_size 0).
  // Held while the store is called, so that detaching waits for calls in progress.
  mutable Mutex store_mu_;
  HandleStore* store_ GUARDED_BY(store_mu_) = nullptr;
  std::string root_fh_ GUARDED_BY(store_mu_);        // the volume root's handle, once looked up
  std::unique_ptr<metrics::Registry> own_registry_;  // when none was given
  metrics::Registry* registry_;
  metrics::Labels labels_;
  metrics::Gauge* in_flight_;
  // Data bytes of every READ reply, whether its call is delivered, retried or over: what the
  // WAN carried, where the fetcher counts what it was given.
  metrics::Counter* read_reply_bytes_;
  std::vector<std::unique_ptr<NfsConnection>> connections_;
  HubAddress hub_;
  std::chrono::milliseconds request_timeout_{10000};
  std::chrono::milliseconds rpc_timeout_{5000};
  mutable Mutex identities_mu_;
  struct IdentityConn {
    std::shared_ptr<NfsConnection> conn;
    uint64_t last_use = 0;
  };
  std::map<std::string, IdentityConn> identities_ GUARDED_BY(identities_mu_);
  uint64_t identity_clock_ GUARDED_BY(identities_mu_) = 0;
  std::unique_ptr<HubHealth> health_;  // after registry_ and labels_
  std::atomic<uint64_t> reads_by_handle_{0};
  std::atomic<uint64_t> names_by_handle_{0};
};

}  // namespace spoke::agent
