// PeerNode: this agent's place in the cluster's shared cache (docs/peers.md).
//
// - As a server (gRPC, peer.proto), it answers GetBlock and GetBlocks (several background
//   asks in one call) for the volumes this agent has mounted itself, by hub identity (hub +
//   volume path), from the volume's BlockFetcher: the cache, or one hub read that concurrent
//   askers share, stored in the cache. A file path outside the volume, a foreign block size
//   or a missing or wrong cluster token are refused. Only read-only volumes take part (exe/):
//   blocks written through a mount exist on that node alone.
// - As a client, each mounted volume gets a PeerVolume, the BlockSource its fetcher asks
//   before the hub: the block's owner among the live peers (rendezvous hashing) is asked
//   with a bounded deadline (a reader's ask in a call of its own, background asks to one
//   owner in shared calls), the answer's checksum is verified, and anything else (no
//   answer, refusal, wrong checksum, wrong length) sends the fetcher to the hub.
//
// Metrics (agent-wide): spoke_peer_hits_total, spoke_peer_hit_bytes_total,
// spoke_peer_fallbacks_total{reason}, spoke_peer_calls_total{kind},
// spoke_peer_checksum_rejects_total, spoke_peer_served_blocks_total,
// spoke_peer_served_bytes_total,
// spoke_peer_auth_failures_total, spoke_peer_identity_failures_total,
// spoke_peer_certificate_expiry_timestamp_seconds, spoke_peer_members.
#pragma once

#if !__has_include("spoke_layer/peer.h")
#error "wrong-way include: cache-agent/peer/ is not among this target's dependencies"
#endif

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache-agent/fs/block_fetcher.h"
#include "cache-agent/fs/block_source.h"
#include "cache-agent/peer/peer_set.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"
#include "peer.grpc.pb.h"

namespace spoke::agent {

class PeerVolume;

// The file a volume sees at `path` (relative to the volume), from the owner's own metadata:
// its id, content version and size decide what is served, never the request.
using PeerFileLookup = std::function<Result<FileRef>(const std::string& path)>;

// What one peer call serves from, taken with its use (PeerNode::Acquire): valid until
// Release, whatever PeerVolume::ServeBlocksFrom does meanwhile.
struct PeerServing {
  PeerVolume* volume = nullptr;
  BlockFetcher* fetcher = nullptr;
  std::shared_ptr<const PeerFileLookup> lookup;
};

class PeerNode {
 public:
  struct Config {
    std::string listen_address;  // "host:port" of the peer server
    std::string token;           // the cluster token (LoadPeerToken): a second factor
    // Mutual TLS on the peer channel: this agent's certificate and key, and the cluster CA
    // that signs every agent's. A peer is accepted (as server and as client) only with a
    // certificate of that CA that names it (`identity`).
    struct Tls {
      std::string cert_pem;
      std::string key_pem;
      std::string ca_pem;
      // kName: one certificate naming `server_name` is shared by every agent; a client
      // checks that name instead of the member's address, the server checks it on the
      // client's. kAddress: each agent's own certificate names its address; a client checks
      // that the certificate names the member it dials (gRPC matches the target's IP against
      // the IP SANs), the server accepts a client whose certificate names a current member.
      enum class Identity { kName, kAddress };
      Identity identity = Identity::kName;
      std::string server_name = "spoke-peer";  // kName only
    };
    std::optional<Tls> tls;
    // No TLS: tests only, and only when asked for explicitly; otherwise a config without
    // `tls` is refused.
    bool plaintext = false;
    // Bound on one ask of a peer; then the hub.
    std::chrono::milliseconds timeout{2000};
    // Store blocks from peers in the local cache too (admission policy permitting).
    bool keep_local_copy = true;
    PeerSet::Config members;  // self_port is set from listen_address
    // Bounds on the asks this owner serves at once, both classes together and background
    // (warm-up, prefetch) alone: asks beyond them are refused at once (the asker reads the
    // hub), so other nodes' reads never take more than this of the owner's threads and memory.
    // In a cold fill most background asks wait for this owner's hub read (a WAN round trip),
    // queued behind its own readers: the bound keeps that queue within the askers' deadline
    // (with 32 one-block asks, asks passed the 5 s deadline of PeerAgentsTest on a loaded
    // machine). A GetBlocks call counts as one ask of one block's bytes; askers send at most
    // 2 at a time, so 16 lets 8 askers ask at once (with 8, 6-agent cold fills were refused
    // 12-22 % of their calls and took about 5 % longer). A refusal halves the asker's peer
    // window and the ask is queued again (fetch_dispatcher.h), so a full quota slows askers,
    // not the WAN.
    int serve_max_asks = 64;
    uint64_t serve_max_bytes = 64ull << 20;
    int serve_background_max_asks = 16;
    uint64_t serve_background_max_bytes = 16ull << 20;
    // How long a member that answered "not mounted" for a volume is left out of its owners.
    std::chrono::milliseconds absent_period{10000};
    // Test-only fault: flips a byte of every served block after its checksum is taken, so
    // that receivers must reject it. Only builds with SPOKE_TEST_FAULTS have it; others
    // refuse the config.
    bool fault_corrupt_served_blocks = false;
    Status Validate() const;
  };

  // Starts the server and the membership refresh. kInvalidArgument for a bad config,
  // kUnavailable when the listen address cannot be bound.
  static Result<std::unique_ptr<PeerNode>> Start(const Config& config, metrics::Registry& registry);
  ~PeerNode();  // Shutdown(), then waits for the membership thread
  PeerNode(const PeerNode&) = delete;
  PeerNode& operator=(const PeerNode&) = delete;

  // Stops answering peers (calls in progress get a short grace). Idempotent.
  void Shutdown();

  // The peer side of one mounted volume. `hub` is "server:nfsport/share", `volume_path`
  // the volume's directory under the share, `access` who it reads the hub as
  // (PeerAccessName). The PeerVolume must be destroyed before this node, and must outlive
  // the fetcher it is the source of.
  std::unique_ptr<PeerVolume> AttachVolume(const std::string& hub, const std::string& volume_path,
                                           const std::string& access, uint32_t block_size);

  int port() const { return port_; }
  PeerSet& members() { return *members_; }

 private:
  friend class PeerVolume;
  class Service;
  struct Metrics {
    metrics::Counter* hits;
    metrics::Counter* hit_bytes;
    metrics::Counter* fallback_error;
    metrics::Counter* fallback_refused;
    metrics::Counter* checksum_rejects;
    metrics::Counter* served_blocks;
    metrics::Counter* served_bytes;
    metrics::Counter* auth_failures;
    metrics::Counter* identity_failures;
    metrics::Counter* fallback_busy;
    metrics::Counter* busy_demand;  // asks refused here: the quota was used up
    metrics::Counter* busy_background;
    metrics::Gauge* serving_bytes;
    metrics::Counter* previous_hits;    // cached-only asks of a previous owner, answered
    metrics::Counter* previous_misses;  // ... and not cached there
    metrics::Counter* refused_file;     // the owner has another file or version there
    metrics::Counter* refused_length;   // the ask's length is not the block's here
    metrics::Counter* calls_one;        // calls made: one block (GetBlock) ...
    metrics::Counter* calls_batch;      // ... or a batch of background asks (GetBlocks)
    metrics::Gauge* members;
  };

  PeerNode(const Config& config, metrics::Registry& registry);
  // Why the client of `ctx` is not a peer (its certificate does not name the cluster's peer
  // name, or no current member); nullopt when it is one. Logs refusals, at most once a second.
  std::optional<grpc::Status> IdentityRefusal(const grpc::ServerContext& ctx);
  // Warns when this agent's certificate does not name its listen address (kAddress) or
  // expires within a week; exports spoke_peer_certificate_expiry_timestamp_seconds.
  void CheckOwnCertificate(metrics::Registry& registry);
  // The stub for `member` ("ip:port"), made on first use.
  peer::v1::Peer::Stub* StubFor(const std::string& member) EXCLUDES(stubs_mu_);
  void Register(PeerVolume* v) EXCLUDES(vols_mu_);
  void Unregister(PeerVolume* v) EXCLUDES(vols_mu_);
  // The serving volume for a peer key, with a use held (Release when done); a null volume
  // if none serves it.
  PeerServing Acquire(const std::string& key) EXCLUDES(vols_mu_);
  void Release(PeerVolume* v) EXCLUDES(vols_mu_);
  // Around every call the service answers (the destructor waits for them).
  void BeginCall() EXCLUDES(vols_mu_);
  void EndCall() EXCLUDES(vols_mu_);

  // Takes room for one ask of `bytes` in its class; RESOURCE_EXHAUSTED when the quota is used
  // up (the refusal counted for `blocks` blocks).
  grpc::Status AdmitAsk(bool background, uint64_t bytes, int blocks) EXCLUDES(quota_mu_);
  void EndAsk(bool background, uint64_t bytes) EXCLUDES(quota_mu_);

  Config config_;
  Metrics m_;
  Mutex quota_mu_;
  struct Load {
    int asks = 0;
    uint64_t bytes = 0;
  };
  Load serving_[2] GUARDED_BY(quota_mu_);  // [0] readers waiting, [1] background
  int port_ = 0;
  std::unique_ptr<PeerSet> members_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> members_ready_{false};      // members_ is set: the service may use it
  std::atomic<int64_t> last_refusal_log_s_{0};  // steady clock, seconds

  std::shared_ptr<grpc::ChannelCredentials> channel_creds_;  // set in Start, then read-only
  Mutex stubs_mu_;
  std::map<std::string, std::unique_ptr<peer::v1::Peer::Stub>> stubs_ GUARDED_BY(stubs_mu_);

  // Also the lock of each PeerVolume's fetcher_, lookup_ and uses_, which name it
  // node_.vols_mu_. A PeerNode function holding vols_mu_ tells the analysis that
  // v->node_.vols_mu_ is the same lock (AssertHeld): every PeerVolume is made by this node's
  // AttachVolume.
  Mutex vols_mu_;
  CondVar vols_cv_;
  std::multimap<std::string, PeerVolume*> volumes_ GUARDED_BY(vols_mu_);  // by identity
  int calls_ GUARDED_BY(vols_mu_) = 0;  // calls the service is answering
};

// One mounted volume's peer side: the BlockSource of its fetcher, and (after ServeBlocksFrom) the
// volume peers are answered from.
class PeerVolume final : public BlockSource {
 public:
  ~PeerVolume() override;  // ServeBlocksFrom(nullptr), then leaves the node

  bool Takes(const Block& block) const override;
  bool FetchAsync(const Block& block, Done done) override;
  bool keep_local_copy() const override { return node_.config_.keep_local_copy; }

  using FileLookup = PeerFileLookup;
  // Answers peers from `fetcher` from now on, looking files up with `lookup`; nullptr stops
  // and waits for the calls in progress (each bounded by its deadline). `fetcher` and what
  // `lookup` uses must stay valid until then; to change the fetcher, pass nullptr first.
  void ServeBlocksFrom(BlockFetcher* fetcher, FileLookup lookup = {}) EXCLUDES(node_.vols_mu_);

  const std::string& identity() const { return key_; }

  using Serving = PeerServing;
  // Serves one block to a peer (the node's service calls it with a use held); the gRPC
  // status of the answer.
  grpc::Status ServeBlock(const Serving& from, const peer::v1::GetBlockRequest& req,
                          std::chrono::steady_clock::time_point deadline,
                          peer::v1::GetBlockResponse* resp) EXCLUDES(serving_mu_);
  // Serves a batch (GetBlocks): one reply per item through `writer`, cached blocks first.
  grpc::Status ServeBlocks(const Serving& from, const peer::v1::GetBlocksRequest& req,
                           std::chrono::steady_clock::time_point deadline, grpc::ServerContext& ctx,
                           grpc::ServerWriter<peer::v1::GetBlocksReply>& writer)
      EXCLUDES(serving_mu_);

  // Background asks in one GetBlocks call at most, and such calls in flight to one member:
  // further asks for it queue and go together when one of its calls ends.
  static constexpr int kMaxBatchItems = 32;
  static constexpr int kBatchCallsPerMember = 2;

 private:
  friend class PeerNode;
  PeerVolume(PeerNode& node, std::string hub, std::string volume_path, std::string access,
             uint32_t block_size);

  PeerNode& node_;
  std::string hub_;
  std::string volume_path_;
  std::string access_;
  std::string key_;  // PeerVolumeKey(hub_, volume_path_, access_)
  uint32_t block_size_;

  // The fetcher peers are answered from, and calls using it.
  BlockFetcher* fetcher_ GUARDED_BY(node_.vols_mu_) = nullptr;
  std::shared_ptr<const FileLookup> lookup_ GUARDED_BY(node_.vols_mu_);
  int uses_ GUARDED_BY(node_.vols_mu_) = 0;

  // What a peer asks for, as the request names it.
  struct AskedBlock {
    const std::string& file_path;
    uint64_t file_id;
    uint64_t version;
    uint64_t block_index;
    uint32_t length;
  };
  // One ask being served here, as this owner's own attributes say.
  struct Serve {
    FileRef file;
    uint64_t index = 0;
    uint64_t length = 0;
    BlockKey key;
    bool cached = false;   // when serving began
    bool begun = false;    // in serving_
    bool warming = false;  // `warm` holds its fetch in the warm-up class
    BlockFetcher::WarmTicket warm;
  };
  // Checks an ask against the owner's own attributes (path, file, version, length) and fills
  // `s`; else the refusal.
  grpc::Status CheckAsk(const Serving& from, const AskedBlock& a, Serve* s);
  // Marks `s` as served to a peer (its fetch then goes to the hub, never to another peer)
  // and, for a background ask not cached here, starts its fetch in the warm-up class. ABORTED
  // for a cached-only ask of a block not cached here.
  grpc::Status BeginServe(BlockFetcher* fetcher, Serve& s, bool background, bool cached_only)
      EXCLUDES(serving_mu_);
  // The block of a begun `s` by `deadline`: from the cache, after its warm-up fetch, or by a
  // demand fetch. Ends `s`.
  grpc::Status FinishServe(BlockFetcher* fetcher, Serve& s,
                           std::chrono::steady_clock::time_point deadline, std::string* data,
                           uint64_t* xxh3) EXCLUDES(serving_mu_);
  void EndServe(Serve& s) EXCLUDES(serving_mu_);

  // A member that answered "not mounted" for this volume is left out of its owners for
  // Config::absent_period, then asked again (it may have mounted it since).
  void MarkAbsent(const std::string& member) EXCLUDES(absent_mu_);
  // `view` without the members known not to serve this volume (self is never among them).
  void LeaveOutAbsent(PeerSet::View& view) const EXCLUDES(absent_mu_);

  // One ask of a peer, from FetchAsync until its `done`.
  struct Pending {
    Block block;
    bool cached_only = false;
    Done done;
    std::chrono::steady_clock::time_point queued_at;
  };
  struct Call;      // a GetBlock call: one ask
  class BatchCall;  // a GetBlocks call: background asks of one member
  // Whom to ask for a block, and how.
  struct Ask {
    std::string member;
    // The member is the block's previous owner, asked for its cached copy only: this agent
    // owns the block (or is serving it to a peer as its owner) and has not got it.
    bool cached_only = false;
  };
  // The member that owns `block`; else, when this agent owns it, its previous owner while
  // asking those pays (PreviousOwnerOpen); nullopt when the hub is read instead (always for a
  // block a peer asked this agent for). Takes answers with it.
  std::optional<Ask> PeerToAsk(const Block& block) const
      EXCLUDES(serving_mu_, absent_mu_, previous_mu_);
  void SendOne(const std::string& member, Pending ask);
  void SendBatch(const std::string& member, std::vector<Pending> asks);
  // Background asks queued for one member, and its GetBlocks calls in flight.
  struct Lane {
    int calls = 0;
    std::deque<Pending> queued;
  };
  // Up to kMaxBatchItems asks off `lane`'s queue into `batch`; those queued for longer than
  // an ask may take into `stale`.
  void TakeBatchLocked(Lane& lane, std::vector<Pending>& batch, std::vector<Pending>& stale)
      REQUIRES(lanes_mu_);
  // Sends `stale` to the hub (fails them to their fetcher), counted in `counter` (the node's
  // fallback_error). Static: OnBatchDone calls it when the volume may already be gone.
  static void FailQueuedTooLong(metrics::Counter* counter, std::vector<Pending>& stale);
  // A GetBlocks call to `member` ended with `st`: fails its asks the owner did not answer
  // (or asks them one by one of an owner without GetBlocks) and sends the lane's next batch.
  void OnBatchDone(const std::string& member, const grpc::Status& st,
                   std::vector<Pending> unanswered) EXCLUDES(lanes_mu_, absent_mu_);
  // `member` answered GetBlocks with UNIMPLEMENTED lately: one call per block to it.
  bool BatchesRefused(const std::string& member) EXCLUDES(lanes_mu_);
  static constexpr std::chrono::seconds kBatchesRefusedPeriod{60};
  // Completes `ask` with the peer's block, or an error that sends the read to the hub
  // (EBUSY: the owner refused it for its serving quota). `counted`: the failure was already
  // told to the member set (a whole call failed).
  void Complete(const std::string& member, Pending& ask, const grpc::Status& st,
                const std::string& data, uint64_t xxh3, bool counted = false) EXCLUDES(absent_mu_);
  // Tells the member set and the metrics what a failed ask says of the member.
  void CountFailedAsk(const std::string& member, const grpc::Status& st) EXCLUDES(absent_mu_);
  mutable Mutex absent_mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> absent_ GUARDED_BY(absent_mu_);

  Mutex lanes_mu_;
  CondVar lanes_cv_;  // a lane's calls went down (the destructor waits for none)
  std::map<std::string, Lane> lanes_ GUARDED_BY(lanes_mu_);
  std::map<std::string, std::chrono::steady_clock::time_point> batches_refused_until_
      GUARDED_BY(lanes_mu_);

  // Previous owners: when a member joins (mounts the volume late, or comes back), the blocks
  // it now owns were fetched and kept by the member that owned them before (the runner-up of
  // the rendezvous). The new owner asks it for its cached copy before the hub. In a cluster
  // whose members all served from the start the runner-up has none of them: after each run
  // of kPreviousOwnerProbe asks with fewer than kPreviousOwnerMinHits answers, the asks stop
  // for kPreviousOwnerPause.
  bool PreviousOwnerOpen() const EXCLUDES(previous_mu_);
  void PreviousOwnerAnswered(bool hit) EXCLUDES(previous_mu_);
  static constexpr int kPreviousOwnerProbe = 64;
  static constexpr int kPreviousOwnerMinHits = 4;
  static constexpr std::chrono::seconds kPreviousOwnerPause{30};
  mutable Mutex previous_mu_;
  int previous_asks_ GUARDED_BY(previous_mu_) = 0;
  int previous_hits_ GUARDED_BY(previous_mu_) = 0;
  std::chrono::steady_clock::time_point previous_paused_until_ GUARDED_BY(previous_mu_){};

  // Blocks being fetched to answer a peer: their fetch goes to the hub, never to another
  // peer (no ask loops when two agents briefly disagree about the member set).
  mutable Mutex serving_mu_;
  std::unordered_multiset<BlockKey, BlockKeyHash> serving_ GUARDED_BY(serving_mu_);
};

// "server:nfsport/share": how peers name a hub export.
std::string PeerHubName(const std::string& server, uint16_t nfs_port, const std::string& share);
// Everything that decides what the hub lets a volume read besides its path: the identity
// mode, the uid:gid and whether root is sent as root ("caller/65534:65534/squash-root").
std::string PeerAccessName(const HubIdentityParams& identity);
// The key peers agree on for one volume: blocks are shared only between equal keys.
std::string PeerVolumeKey(const std::string& hub, const std::string& volume_path,
                          const std::string& access);

}  // namespace spoke::agent
