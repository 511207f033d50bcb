// The fd keeper: a process that does not restart with the cache agent holds a duplicate of
// each /dev/fuse connection, so a mount keeps its connection while the agent is down and a new
// agent takes the same connection back.
//
// Protocol: one JSON object per SOCK_SEQPACKET record, descriptors as SCM_RIGHTS.
//   {"op":"put","key":K,"metadata":{...}} + 1 fd  ->  {"ok":true}
//   {"op":"list"}                                  ->  {"entry":{"key":K,"metadata":{...}}} + fd
//                                                      ... one record per entry, then
//                                                      {"ok":true,"count":N}
//   {"op":"del","key":K}                           ->  {"ok":true,"found":bool}
//   {"op":"hold"}                                  ->  {"ok":true}; the connection stays open
//                                                      as the agent's lease (see orphan_timeout)
//   any failure                                    ->  {"ok":false,"error":"..."}
// PUT of an existing key replaces (and closes) the old descriptor. Keys are 1..256 printable
// bytes; metadata is a JSON object of at most 32 KiB, opaque to the keeper.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd_passing.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke {

struct KeptFd {
  std::string key;
  std::string metadata_json;  // the JSON object given to Put, re-serialised
  UniqueFd fd;
};

class FdKeeperServer {
 public:
  struct Config {
    std::string socket_path;
    // Only peers with this uid may talk to the keeper (SO_PEERCRED): root, since a /dev/fuse
    // descriptor gives full control over a mount. Tests running as root keep the default.
    uid_t allowed_uid = 0;
    // Bound on answering one client; a client that stops reading is dropped.
    std::chrono::milliseconds io_timeout{5000};
    // Clients served at once; more wait in the listen backlog.
    size_t max_clients = 64;
    // While no agent holds a lease ("hold") and no client has asked anything for this long,
    // the kept descriptors are released: with no agent to serve them, their mounts would
    // otherwise make every access wait forever; released, they fail (ECONNABORTED). Counted
    // from the last lease's end (or the last request). 0 = keep them forever.
    std::chrono::milliseconds orphan_timeout{0};

    Status Validate() const;
  };

  explicit FdKeeperServer(Config config);
  ~FdKeeperServer();  // Stop()s
  FdKeeperServer(const FdKeeperServer&) = delete;
  FdKeeperServer& operator=(const FdKeeperServer&) = delete;

  // Binds the socket (mode 0600) and starts the serving thread. kAlreadyExists when another
  // keeper serves the path; kIo for socket errors.
  Status Start();
  // Stops serving and removes the socket file. Kept descriptors stay open until destruction,
  // so the mounts they belong to keep their connection until this process exits.
  void Stop();
  // Before Stop() at a graceful exit: while descriptors are kept and no agent holds the lease
  // (its agent is restarting too: a node plugin and an agent upgraded at once), the keeper is
  // the last holder of those connections, so it keeps serving until an agent takes the lease
  // (after its LIST took them over), at most `bound`. From then on it refuses PUTs: an agent
  // handing over retries them with the next keeper instead of leaving them to this one.
  void FinishServing(std::chrono::milliseconds bound);

  size_t size() const;

 private:
  // The serving thread: accepts clients and answers their requests until Stop().
  void PollLoop();
  // PollLoop's clients: their sockets, and what is known of each.
  struct Clients;
  // Answers what arrived on client `fd`; false when the client is to be dropped.
  bool ServeClient(Clients& clients, int fd, short revents);
  // Forgets client `fd` (the caller closes it); the orphan clock starts when it held the lease.
  void DropClient(Clients& clients, int fd);
  void AcceptClient(Clients& clients);
  // Releases every kept descriptor (the orphan timeout passed).
  void ReleaseOrphans(std::chrono::milliseconds idle);
  // Handles one request on `client`; false when the client should be dropped. Sets `*hold`
  // when the client took the agent's lease.
  bool HandleRequest(int client, bool* hold);
  Status Reply(int client, const std::string& json, std::span<const int> fds = {});

  Config config_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // eventfd: Stop() wakes the serving thread
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  mutable Mutex mu_;
  std::map<std::string, KeptFd> entries_ GUARDED_BY(mu_);
  CondVar lease_changed_;                  // lease_holders_ or entries_ changed
  int lease_holders_ GUARDED_BY(mu_) = 0;  // clients holding the agent's lease
  bool closing_ GUARDED_BY(mu_) = false;   // FinishServing decided: no more PUTs
};

// A client of the keeper: one connection per call, every call bounded by `timeout`.
class FdKeeperClient {
 public:
  FdKeeperClient(std::string socket_path, std::chrono::milliseconds timeout)
      : socket_path_(std::move(socket_path)), timeout_(timeout) {}

  // Stores a duplicate of `fd` under `key` with `metadata_json` (a JSON object).
  // kInvalidArgument for a bad key or metadata, kUnavailable when no keeper listens,
  // kPermissionDenied when the keeper refuses this uid, kTimeout, kIo.
  Status Put(const std::string& key, const std::string& metadata_json, int fd) const;
  // Every kept descriptor (fresh duplicates owned by the caller), in key order.
  Result<std::vector<KeptFd>> List() const;
  // Forgets `key` and closes the keeper's duplicate. Returns whether the key was kept.
  Result<bool> Del(const std::string& key) const;
  // Takes the agent's lease: the returned connection tells the keeper an agent serves the kept
  // descriptors for as long as it stays open (it closes with the process, however it ends).
  Result<UniqueFd> TakeLease() const;
  // Whether the keeper still has the lease `lease` (false once the keeper went away).
  static bool LeaseAlive(int lease);

 private:
  Result<UniqueFd> Connect() const;

  std::string socket_path_;
  std::chrono::milliseconds timeout_;
};

}  // namespace spoke
