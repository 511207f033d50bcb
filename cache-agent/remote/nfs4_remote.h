// Nfs4Remote: RemoteFs over NFSv4.1, for hubs that speak no NFSv3 (Amazon EFS,
// NAS exports configured v4-only). The protocol is spoke-nfs4 (cache-agent/remote/nfs4/, a
// Rust library on nfs-rs with a C interface); this class maps it onto RemoteFs:
//
// - one spoke-nfs4 client per AUTH_SYS identity (the client's uid/gid are fixed at mount):
//   the volume's own identity for the walk, prefetch and warm-up, and one per caller identity
//   for the *As calls, the least recently used idle one closed beyond max_identities. NFSv4.1
//   through nfs-rs carries no supplementary groups: a caller whose access rests on one of
//   them is refused by the hub (documented in docs/nfs4.md).
// - every call is bounded by the request timeout, inside the library (which mounts again
//   after a connection, session or lease loss and resends idempotent calls within the bound)
//   and again here;
// - handles from listings are kept in the HandleStore (the metadata cache's inodes, or the
//   remote's own table) so a read of a listed file is one READ by handle; checked reads
//   compare the file id the caller knows with the attributes fetched beside the READ.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache-agent/remote/handle_table.h"
#include "cache-agent/remote/hub_health.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"

struct spoke_nfs4_client;

namespace spoke::agent {

class Nfs4Remote final : public RemoteFs {
 public:
  // The hub settings are the v3 client's; those that apply here: connections (clients, each
  // its own connection and session, of the volume's identity: reads spread over them by
  // file), request_timeout_seconds, wait_for_mount, uid/gid, identity_mode,
  // fixed_uid/fixed_gid, allow_root, max_identities, fh_table_size. Calls in flight per client
  // are bounded by its session's slots (64 asked).
  using Config = LibnfsRemote::Config;

  // Mounts <share>/<root> of `hub` (hub.nfs_version 4.1). kUnavailable naming the hub
  // when it cannot be mounted within the request timeout (with wait_for_mount).
  static Result<std::unique_ptr<Nfs4Remote>> Connect(const HubAddress& hub, const std::string& root,
                                                     const Config& config,
                                                     metrics::Registry* registry,
                                                     const metrics::Labels& labels = {});
  ~Nfs4Remote() override;

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
  Result<FileAttr> LinkAs(const Credentials& who, const std::string& existing,
                          const std::string& path) override;
  Result<FileAttr> SetAttrAs(const Credentials& who, const std::string& path,
                             const SetAttrRequest& request) override;
  Status UnlinkAs(const Credentials& who, const std::string& path) override;
  Status RmdirAs(const Credentials& who, const std::string& path) override;
  Status RenameAs(const Credentials& who, const std::string& from, const std::string& to) override;
  Status FsyncAs(const Credentials& who, const std::string& path) override;
  Result<FileAttr> StatAs(const Credentials& who, const std::string& path) override;
  Result<std::vector<DirEntry>> ReadDirAs(const Credentials& who, const std::string& path) override;
  void ReadCheckedAsAsync(const Credentials& who, const std::string& path, uint64_t file_id,
                          uint64_t offset, uint32_t length, CheckedReadDone done) override;
  bool ActsAsSelf(const Credentials& who) const override;

  void UseHandleStore(HandleStore* store) override;
  bool Reachable() const override;
  std::string LastError() const override;

  // The identity a caller's request reaches the hub with (as LibnfsRemote, without groups).
  Credentials EffectiveIdentity(const Credentials& who) const;
  // Clients open for caller identities, and mounts made again after failures (tests, figures).
  size_t IdentityClients() const;
  uint64_t Reconnects() const;

  // What a finished library call gave; public for the C callback that builds it.
  struct Reply {
    int error = 0;  // errno
    std::string message;
    bool interrupted = false;  // the caller gave up waiting (FUSE INTERRUPT); the call goes on
    std::optional<FileAttr> attr;
    std::string fh;
    std::vector<char> data;
    std::vector<DirEntry> entries;
    uint64_t count = 0;
    FsStat fsstat;
  };

 private:
  class Client;
  using ReplyDone = std::function<void(Reply)>;

  Nfs4Remote(const HubAddress& hub, const std::string& root, const Config& config,
             metrics::Registry* registry, const metrics::Labels& labels);
  std::string UrlFor(uint32_t uid, uint32_t gid) const;
  Result<std::shared_ptr<Client>> ClientFor(const Credentials& who);
  // The volume identity's first client (changes, in order) and the one a file's reads use.
  std::shared_ptr<Client> Own() const { return own_.front(); }
  std::shared_ptr<Client> OwnFor(const std::string& path) const;
  // Starts a library call on `client`: `start(ctx)` passes ctx to a spoke_nfs4_* function.
  void Start(const std::shared_ptr<Client>& client, const char* op,
             const std::function<void(void* ctx)>& start, ReplyDone done);
  // The same, waited for: bounded by the request timeout, and ended at once (kInterrupted)
  // when the thread's request is interrupted (InterruptScope); the call then goes on to its
  // own bound.
  Reply Call(const std::shared_ptr<Client>& client, const char* op,
             const std::function<void(void* ctx)>& start);
  Error ToError(const Reply& r) const;

  // A file's handle: from the store, else looked up now (and its attributes checked against
  // `file_id` when not 0). kNotFound with ESTALE when the path names another file.
  void HandleOf(const std::shared_ptr<Client>& client, const std::string& path, uint64_t file_id,
                std::function<void(Result<std::string>)> k);
  void ReadCheckedOn(const std::shared_ptr<Client>& client, const std::string& path,
                     uint64_t file_id, uint64_t offset, uint32_t length, CheckedReadDone done);
  Result<FileAttr> StatOn(const std::shared_ptr<Client>& client, const std::string& path);
  Result<std::vector<DirEntry>> ReadDirOn(const std::shared_ptr<Client>& client,
                                          const std::string& path);
  Result<FileAttr> CreateOn(const std::shared_ptr<Client>& client, const std::string& path,
                            uint32_t mode, CreateMode how);
  Result<FileAttr> MkdirOn(const std::shared_ptr<Client>& client, const std::string& path,
                           uint32_t mode);
  Result<size_t> WriteOn(const std::shared_ptr<Client>& client, const std::string& path,
                         uint64_t offset, const char* data, size_t length);
  Status RemoveOn(const std::shared_ptr<Client>& client, const std::string& path, bool directory);
  Status RenameOn(const std::shared_ptr<Client>& client, const std::string& from,
                  const std::string& to);
  Result<FileAttr> SetAttrOn(const std::shared_ptr<Client>& client, const std::string& path,
                             const SetAttrRequest& request);
  Status FsyncOn(const std::shared_ptr<Client>& client, const std::string& path);
  Result<std::string> ReadLinkOn(const std::shared_ptr<Client>& client, const std::string& path);
  void RecordListedHandles(const std::string& path, const std::vector<DirEntry>& entries);
  std::optional<HandleStore::Entry> FindHandle(const std::string& path);
  void DropHandles(const std::string& path);

  const Config config_;
  const HubAddress hub_;
  const std::string root_;  // the volume's directory inside the share ("" = the share)
  const std::string hub_name_;
  const uint32_t deadline_ms_;
  metrics::Registry* registry_;
  std::unique_ptr<metrics::Registry> own_registry_;
  const metrics::Labels labels_;
  metrics::Counter* read_reply_bytes_ = nullptr;
  std::unique_ptr<HubHealth> health_;

  std::vector<std::shared_ptr<Client>> own_;  // the volume's identity, config.connections
  mutable Mutex identities_mu_;
  struct IdentityClient {
    std::shared_ptr<Client> client;
    uint64_t last_used = 0;  // for closing the least recently used
  };
  std::map<std::pair<uint32_t, uint32_t>, IdentityClient> identities_ GUARDED_BY(identities_mu_);
  uint64_t identity_clock_ GUARDED_BY(identities_mu_) = 0;

  HandleTable own_handles_;
  Mutex store_mu_;
  // own_handles_, an attached store, or none (fh_table_size 0: by path only).
  HandleStore* store_ GUARDED_BY(store_mu_) = nullptr;

  // Calls in flight, waited for by the destructor (each answers within the request timeout).
  Mutex calls_mu_;
  CondVar calls_cv_;
  int64_t calls_ GUARDED_BY(calls_mu_) = 0;
};

}  // namespace spoke::agent
