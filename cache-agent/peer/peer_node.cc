#include "cache-agent/peer/peer_node.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "cache-agent/peer/peer_cert.h"
#include "cache-agent/peer/peer_token.h"
#include "cache-agent/peer/rendezvous.h"
#include "common/log.h"
#include "common/volume.h"

namespace spoke::agent {
namespace {

// A block is at most the largest NFSv3 read: 1 MiB, plus room for the message around it.
constexpr int kMaxMessageBytes = (1 << 20) + (64 << 10);

std::chrono::steady_clock::time_point SteadyDeadline(const grpc::ServerContext& ctx,
                                                     std::chrono::milliseconds cap) {
  auto now_sys = std::chrono::system_clock::now();
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline() - now_sys);
  return std::chrono::steady_clock::now() + std::clamp(left, std::chrono::milliseconds(0), cap);
}

// The client certificate (verified against the cluster CA by the TLS layer) names `name`.
bool PeerNamed(const grpc::AuthContext& auth, const std::string& name) {
  for (const auto& id : auth.GetPeerIdentity()) {
    if (std::string_view(id.data(), id.size()) == name) return true;
  }
  return false;
}

std::vector<std::string> AuthValues(const grpc::AuthContext& auth, const char* property) {
  std::vector<std::string> out;
  for (const auto& v : auth.FindPropertyValues(property)) out.emplace_back(v.data(), v.size());
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "(none)" : out;
}

}  // namespace

std::string PeerHubName(const std::string& server, uint16_t nfs_port, const std::string& share) {
  return server + ":" + std::to_string(nfs_port) + share;
}

std::string PeerAccessName(const HubIdentityParams& identity) {
  return std::string(ToString(identity.mode)) + "/" + std::to_string(identity.uid) + ":" +
         std::to_string(identity.gid) + (identity.allow_root ? "/root" : "/squash-root");
}

std::string PeerVolumeKey(const std::string& hub, const std::string& volume_path,
                          const std::string& access) {
  return hub + '\n' + volume_path + '\n' + access;
}

// The gRPC service: checks the token, finds the volume, hands the call to it.
class PeerNode::Service final : public peer::v1::Peer::Service {
 public:
  explicit Service(PeerNode& node) : node_(node) {}

  grpc::Status GetBlock(grpc::ServerContext* ctx, const peer::v1::GetBlockRequest* req,
                        peer::v1::GetBlockResponse* resp) override {
    return Serve(*ctx, req->hub(), req->volume_path(), req->access(),
                 [&](const PeerServing& from, std::chrono::steady_clock::time_point deadline) {
                   return from.volume->ServeBlock(from, *req, deadline, resp);
                 });
  }

  grpc::Status GetBlocks(grpc::ServerContext* ctx, const peer::v1::GetBlocksRequest* req,
                         grpc::ServerWriter<peer::v1::GetBlocksReply>* writer) override {
    return Serve(*ctx, req->hub(), req->volume_path(), req->access(),
                 [&](const PeerServing& from, std::chrono::steady_clock::time_point deadline) {
                   return from.volume->ServeBlocks(from, *req, deadline, *ctx, *writer);
                 });
  }

 private:
  // One call, counted while it runs (~PeerNode waits for none).
  template <typename ServeFn>
  grpc::Status Serve(grpc::ServerContext& ctx, const std::string& hub,
                     const std::string& volume_path, const std::string& access, ServeFn serve) {
    // The server listens before the member set exists (its own port comes from the bind).
    if (!node_.members_ready_.load(std::memory_order_acquire)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "peer node starting");
    }
    node_.BeginCall();
    auto st = ServeChecked(ctx, hub, volume_path, access, serve);
    node_.EndCall();
    return st;
  }

  // The caller's identity and token checked, the volume found and held for `serve`.
  template <typename ServeFn>
  grpc::Status ServeChecked(grpc::ServerContext& ctx, const std::string& hub,
                            const std::string& volume_path, const std::string& access,
                            ServeFn serve) {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kPeerTokenHeader);
    std::string_view presented;
    if (it != md.end()) presented = std::string_view(it->second.data(), it->second.size());
    if (node_.config_.tls) {
      if (auto refusal = node_.IdentityRefusal(ctx)) return *refusal;
    }
    if (!PeerTokenEquals(node_.config_.token, presented)) {
      node_.m_.auth_failures->Inc();
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "peer token missing or wrong");
    }
    PeerServing from = node_.Acquire(PeerVolumeKey(hub, volume_path, access));
    if (from.volume == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no volume of this hub path and access is mounted");
    }
    // The asker's own deadline bounds the work, and never more than a hub read's bound.
    auto st = serve(from, SteadyDeadline(ctx, std::chrono::seconds(60)));
    node_.Release(from.volume);
    return st;
  }

  PeerNode& node_;
};

std::optional<grpc::Status> PeerNode::IdentityRefusal(const grpc::ServerContext& ctx) {
  auto auth = ctx.auth_context();
  std::optional<grpc::Status> refusal;
  std::vector<std::string> ips, dns;
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    refusal = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no peer certificate");
  } else if (config_.tls->identity == Config::Tls::Identity::kName) {
    if (!PeerNamed(*auth, config_.tls->server_name)) {
      refusal = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                             "peer certificate does not name " + config_.tls->server_name);
    }
  } else {
    ips = AuthValues(*auth, GRPC_PEER_IP_PROPERTY_NAME);
    dns = AuthValues(*auth, GRPC_PEER_DNS_PROPERTY_NAME);
    if (!members_->NamesMember(ips, dns)) {
      // A member the DNS listed since the last refresh is known after the next one: ask it
      // now. Not UNAUTHENTICATED: the asker must not take this agent for dead meanwhile.
      members_->RefreshSoon();
      refusal = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                             "peer certificate names no current member (IP " + Joined(ips) +
                                 ", DNS " + Joined(dns) + ")");
    }
  }
  if (!refusal) return std::nullopt;
  m_.identity_failures->Inc();
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (last_refusal_log_s_.exchange(now) != now) {
    log::Warn("peer call refused: identity",
              {{"client", ctx.peer()}, {"reason", refusal->error_message()}});
  }
  return refusal;
}

Status PeerNode::Config::Validate() const {
  if (listen_address.empty()) return Fail(Code::kInvalidArgument, "listen_address: is required");
  if (token.size() < kPeerTokenMinBytes)
    return Fail(Code::kInvalidArgument, "token: must be at least 16 bytes");
  if (tls && plaintext) return Fail(Code::kInvalidArgument, "plaintext: set together with tls");
  if (!tls && !plaintext) {
    return Fail(Code::kInvalidArgument,
                "tls: is required (the agent's certificate, key and the cluster CA); plaintext "
                "is for tests only and must be asked for");
  }
  if (tls && (tls->cert_pem.empty() || tls->key_pem.empty() || tls->ca_pem.empty() ||
              (tls->identity == Tls::Identity::kName && tls->server_name.empty()))) {
    return Fail(Code::kInvalidArgument, "tls: cert, key, CA and server name are all required");
  }
  if (timeout < std::chrono::milliseconds(1))
    return Fail(Code::kInvalidArgument, "timeout: must be >= 1 ms");
  if (absent_period < std::chrono::milliseconds(0))
    return Fail(Code::kInvalidArgument, "absent_period: must be >= 0");
#ifndef SPOKE_TEST_FAULTS
  if (fault_corrupt_served_blocks)
    return Fail(Code::kInvalidArgument,
                "fault_corrupt_served_blocks: this build has no test faults (SPOKE_TEST_FAULTS)");
#endif
  if (serve_max_asks < 1 || serve_max_bytes < 1)
    return Fail(Code::kInvalidArgument, "serve_max_asks, serve_max_bytes: must be >= 1");
  if (serve_background_max_asks < 0 || serve_background_max_asks > serve_max_asks ||
      serve_background_max_bytes > serve_max_bytes)
    return Fail(Code::kInvalidArgument,
                "serve_background_max_asks, serve_background_max_bytes: must be in 0..the "
                "bounds of both classes together");
  PeerSet::Config m = members;
  if (m.self_port == 0) m.self_port = 1;  // set from the bound port at Start
  SPOKE_RETURN_IF_ERROR_WRAP(m.Validate(), "members");
  return Ok();
}

PeerNode::PeerNode(const Config& config, metrics::Registry& registry) : config_(config) {
  auto counter = [&](const char* name, const char* help, metrics::Labels labels = {}) {
    return &registry.GetCounter(name, help, labels);
  };
  m_.hits = counter("spoke_peer_hits_total", "Blocks received from a peer (checksum verified)");
  m_.hit_bytes = counter("spoke_peer_hit_bytes_total", "Bytes received from peers");
  const char* fb = "Blocks asked of a peer and then read from the hub";
  m_.fallback_error = counter("spoke_peer_fallbacks_total", fb, {{"reason", "error"}});
  m_.fallback_refused = counter("spoke_peer_fallbacks_total", fb, {{"reason", "refused"}});
  m_.fallback_busy = counter("spoke_peer_fallbacks_total", fb, {{"reason", "busy"}});
  const char* busy = "Peer asks refused here: this owner's quota for their class was used up";
  m_.busy_demand = counter("spoke_peer_busy_refusals_total", busy, {{"class", "demand"}});
  m_.busy_background = counter("spoke_peer_busy_refusals_total", busy, {{"class", "background"}});
  m_.serving_bytes =
      &registry.GetGauge("spoke_peer_serving_bytes", "Bytes of peer asks being served here");
  m_.checksum_rejects = counter("spoke_peer_checksum_rejects_total",
                                "Blocks from peers rejected: checksum or length mismatch");
  m_.served_blocks = counter("spoke_peer_served_blocks_total", "Blocks served to peers");
  m_.served_bytes = counter("spoke_peer_served_bytes_total", "Bytes served to peers");
  const char* refused = "Peer asks refused: they disagree with this owner's own attributes";
  const char* previous = "Cached-only asks of a block's previous owner (docs/peers.md), by answer";
  m_.previous_hits =
      counter("spoke_peer_previous_owner_asks_total", previous, {{"result", "cached"}});
  m_.previous_misses =
      counter("spoke_peer_previous_owner_asks_total", previous, {{"result", "not_cached"}});
  m_.refused_file = counter("spoke_peer_refused_asks_total", refused, {{"reason", "file"}});
  m_.refused_length = counter("spoke_peer_refused_asks_total", refused, {{"reason", "length"}});
  const char* calls = "Calls made to peers: one block, or a batch of background asks";
  m_.calls_one = counter("spoke_peer_calls_total", calls, {{"kind", "block"}});
  m_.calls_batch = counter("spoke_peer_calls_total", calls, {{"kind", "batch"}});
  m_.auth_failures =
      counter("spoke_peer_auth_failures_total", "Peer calls refused for a missing or wrong token");
  m_.identity_failures =
      counter("spoke_peer_identity_failures_total",
              "Peer calls refused: the client certificate does not name a cluster peer");
  m_.members = &registry.GetGauge("spoke_peer_members", "Live peers, this agent included");
}

Result<std::unique_ptr<PeerNode>> PeerNode::Start(const Config& config,
                                                  metrics::Registry& registry) {
  SPOKE_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<PeerNode> node(new PeerNode(config, registry));
  node->service_ = std::make_unique<Service>(*node);
  // The client credentials once, before anything is served: the PEM is parsed here and not
  // on a reader's thread while gRPC's threads run handshakes.
  if (config.tls) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = config.tls->ca_pem;
    o.pem_private_key = config.tls->key_pem;
    o.pem_cert_chain = config.tls->cert_pem;
    node->channel_creds_ = grpc::SslCredentials(o);
  } else {
    node->channel_creds_ = grpc::InsecureChannelCredentials();
  }
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (config.tls) {
    // Only clients with a certificate of the cluster CA complete the handshake.
    grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    o.pem_root_certs = config.tls->ca_pem;
    o.pem_key_cert_pairs.push_back({config.tls->key_pem, config.tls->cert_pem});
    creds = grpc::SslServerCredentials(o);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  builder.AddListeningPort(config.listen_address, creds, &node->port_);
  builder.RegisterService(node->service_.get());
  builder.SetMaxReceiveMessageSize(64 << 10);  // requests are small
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ == 0) {
    return Fail(Code::kUnavailable, "peerListenAddress: cannot listen on " + config.listen_address);
  }
  PeerSet::Config mc = config.members;
  mc.self_port = node->port_;
  mc.self_host = CanonicalIp(config.listen_address.substr(0, config.listen_address.rfind(':')));
  node->members_ = std::make_unique<PeerSet>(mc);
  node->members_->Start();
  node->m_.members->Set(static_cast<int64_t>(node->members_->Live().members.size()));
  node->members_ready_.store(true, std::memory_order_release);
  log::Info("peer server listening", {{"address", config.listen_address},
                                      {"port", node->port_},
                                      {"tls", !config.tls ? "off (plaintext)"
                                              : config.tls->identity == Config::Tls::Identity::kName
                                                  ? "mutual, shared name"
                                                  : "mutual, per-agent address"},
                                      {"members", node->members_->resolved_count()}});
  if (!config.tls) log::Warn("peer channel in plaintext: a test configuration (peerPlaintext)");
  if (config.tls) node->CheckOwnCertificate(registry);
  if (config.fault_corrupt_served_blocks) {
    log::Warn("TEST FAULT: served peer blocks are corrupted on purpose");
  }
  return node;
}

void PeerNode::CheckOwnCertificate(metrics::Registry& registry) {
  const std::string& listen = config_.listen_address;
  const std::string host = CanonicalIp(listen.substr(0, listen.rfind(':')));
  if (config_.tls->identity == Config::Tls::Identity::kAddress && !host.empty() &&
      host != "0.0.0.0" && host != "::") {
    // Askers dial this address and check that the certificate names it.
    auto names = PeerCertSubjectAltNames(config_.tls->cert_pem);
    if (names && std::find(names->ips.begin(), names->ips.end(), host) == names->ips.end()) {
      log::Warn("peer certificate does not name this agent's address: peers will refuse it",
                {{"address", host}, {"certificate_ips", Joined(names->ips)}});
    }
  }
  auto not_after = PeerCertNotAfter(config_.tls->cert_pem);
  if (!not_after) {
    log::Warn("peer certificate: no expiry", {{"error", not_after.error().message()}});
    return;
  }
  const int64_t at =
      std::chrono::duration_cast<std::chrono::seconds>(not_after->time_since_epoch()).count();
  registry
      .GetGauge("spoke_peer_certificate_expiry_timestamp_seconds",
                "When this agent's peer certificate expires (Unix time): peers refuse it after")
      .Set(at);
  // A certificate minted at pod start is not renewed while the pod runs.
  if (*not_after - std::chrono::system_clock::now() < std::chrono::hours(24 * 7)) {
    log::Warn("peer certificate expires within 7 days (a minted one: restart the agent pod)",
              {{"expires_unix", at}});
  }
}

PeerNode::~PeerNode() {
  Shutdown();
  {
    // gRPC's Shutdown has waited for the calls already, in its own (uninstrumented) code; this
    // wait is what ThreadSanitizer sees order their use of members_ before it goes.
    MutexLock lock(vols_mu_);
    vols_cv_.wait(lock, [&]() REQUIRES(vols_mu_) { return calls_ == 0; });
  }
  members_.reset();
  MutexLock lock(vols_mu_);
  if (!volumes_.empty()) log::Error("peer node destroyed before its volumes");
}

void PeerNode::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

peer::v1::Peer::Stub* PeerNode::StubFor(const std::string& member) {
  MutexLock lock(stubs_mu_);
  auto& stub = stubs_[member];
  if (!stub) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    // A peer that went away is retried soon after it comes back (pod restart).
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    // The member is an address. A shared certificate names the cluster's peer name instead;
    // an agent's own names its address, which gRPC checks against the target's host.
    if (config_.tls && config_.tls->identity == Config::Tls::Identity::kName) {
      args.SetSslTargetNameOverride(config_.tls->server_name);
    }
    stub = peer::v1::Peer::NewStub(grpc::CreateCustomChannel(member, channel_creds_, args));
  }
  return stub.get();
}

std::unique_ptr<PeerVolume> PeerNode::AttachVolume(const std::string& hub,
                                                   const std::string& volume_path,
                                                   const std::string& access, uint32_t block_size) {
  std::unique_ptr<PeerVolume> v(new PeerVolume(*this, hub, volume_path, access, block_size));
  Register(v.get());
  return v;
}

void PeerNode::Register(PeerVolume* v) {
  MutexLock lock(vols_mu_);
  volumes_.emplace(v->key_, v);
}

void PeerNode::Unregister(PeerVolume* v) {
  MutexLock lock(vols_mu_);
  v->node_.vols_mu_.AssertHeld();  // this node's vols_mu_
  v->fetcher_ = nullptr;
  vols_cv_.wait(lock, [&]() REQUIRES(v->node_.vols_mu_) { return v->uses_ == 0; });
  auto [b, e] = volumes_.equal_range(v->key_);
  for (auto it = b; it != e; ++it) {
    if (it->second == v) {
      volumes_.erase(it);
      break;
    }
  }
}

PeerServing PeerNode::Acquire(const std::string& key) {
  MutexLock lock(vols_mu_);
  auto [b, e] = volumes_.equal_range(key);
  for (auto it = b; it != e; ++it) {
    PeerVolume* v = it->second;
    v->node_.vols_mu_.AssertHeld();  // this node's vols_mu_
    if (v->fetcher_ != nullptr && v->lookup_ != nullptr) {
      // Taken here, under the lock the use is counted under: ServeBlocksFrom(nullptr) clears
      // them and then waits for this use to end.
      v->uses_++;
      return {.volume = v, .fetcher = v->fetcher_, .lookup = v->lookup_};
    }
  }
  return {};
}

grpc::Status PeerNode::AdmitAsk(bool background, uint64_t bytes, int blocks) {
  MutexLock lock(quota_mu_);
  const Load& all_bg = serving_[1];
  const int asks = serving_[0].asks + serving_[1].asks;
  const uint64_t held = serving_[0].bytes + serving_[1].bytes;
  bool room = asks < config_.serve_max_asks && held + bytes <= config_.serve_max_bytes;
  if (background) {
    room = room && all_bg.asks < config_.serve_background_max_asks &&
           all_bg.bytes + bytes <= config_.serve_background_max_bytes;
  }
  if (!room) {
    (background ? m_.busy_background : m_.busy_demand)->Inc(blocks);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        std::string("peer busy: its quota for ") +
                            (background ? "background" : "reader") + " asks is used up");
  }
  serving_[background].asks++;
  serving_[background].bytes += bytes;
  m_.serving_bytes->Set(static_cast<int64_t>(held + bytes));
  return grpc::Status::OK;
}

void PeerNode::EndAsk(bool background, uint64_t bytes) {
  MutexLock lock(quota_mu_);
  serving_[background].asks--;
  serving_[background].bytes -= bytes;
  m_.serving_bytes->Set(static_cast<int64_t>(serving_[0].bytes + serving_[1].bytes));
}

void PeerNode::BeginCall() {
  MutexLock lock(vols_mu_);
  calls_++;
}

void PeerNode::EndCall() {
  MutexLock lock(vols_mu_);  // notified under the lock, as in Release
  calls_--;
  vols_cv_.notify_all();
}

void PeerNode::Release(PeerVolume* v) {
  // Notified under the lock: ~PeerNode takes vols_mu_ last, so vols_cv_ is never destroyed
  // while a serving thread is still inside notify_all(). gRPC's Shutdown in ~PeerNode already
  // waits for the calls, but that wait is gRPC's own and invisible to ThreadSanitizer.
  MutexLock lock(vols_mu_);
  v->node_.vols_mu_.AssertHeld();  // this node's vols_mu_
  v->uses_--;
  vols_cv_.notify_all();
}

PeerVolume::PeerVolume(PeerNode& node, std::string hub, std::string volume_path, std::string access,
                       uint32_t block_size)
    : node_(node),
      hub_(std::move(hub)),
      volume_path_(std::move(volume_path)),
      access_(std::move(access)),
      key_(PeerVolumeKey(hub_, volume_path_, access_)),
      block_size_(block_size) {}

PeerVolume::~PeerVolume() {
  {
    // Every ask is answered before the fetcher goes, but a call may still be ending.
    MutexLock lock(lanes_mu_);
    lanes_cv_.wait(lock, [&]() REQUIRES(lanes_mu_) {
      return std::all_of(lanes_.begin(), lanes_.end(),
                         [](const auto& l) { return l.second.calls == 0; });
    });
  }
  node_.Unregister(this);
}

void PeerVolume::ServeBlocksFrom(BlockFetcher* fetcher, FileLookup lookup) {
  MutexLock lock(node_.vols_mu_);
  fetcher_ = fetcher;
  if (fetcher == nullptr || !lookup) {
    fetcher_ = nullptr;  // nothing is served without the owner's own file attributes
    lookup_ = nullptr;
    node_.vols_cv_.wait(lock, [&]() REQUIRES(node_.vols_mu_) { return uses_ == 0; });
  } else {
    lookup_ = std::make_shared<const FileLookup>(std::move(lookup));
  }
}

grpc::Status PeerVolume::CheckAsk(const Serving& from, const AskedBlock& a, Serve* s) {
  auto refuse = [&](metrics::Counter* counter, grpc::StatusCode code, std::string why) {
    counter->Inc();
    return grpc::Status(code, std::move(why));
  };
  // Only paths inside the volume, in their one normal form (no "..", no absolute path).
  auto path = NormalizeRelativePath(a.file_path, "file_path");
  if (!path || *path != a.file_path || path->empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "file_path: must be a normalised path inside the volume");
  }
  // The owner's own attributes decide what is read and cached: an ask naming another file,
  // version or length is refused, so that no asker sets what this cache holds.
  auto file = (*from.lookup)(*path);
  if (!file) {
    return refuse(node_.m_.refused_file, grpc::StatusCode::FAILED_PRECONDITION,
                  "file_path: " + file.error().message());
  }
  if (file->file_id != a.file_id || file->version != a.version) {
    return refuse(node_.m_.refused_file, grpc::StatusCode::FAILED_PRECONDITION,
                  "file_path: another version of " + *path + " is here");
  }
  const uint64_t bs = from.fetcher->block_size();
  uint64_t own_length = 0;  // 0: past the end of the file here
  if (a.block_index < file->size / bs + (file->size % bs != 0)) {
    own_length = std::min<uint64_t>(bs, file->size - a.block_index * bs);
  }
  if (own_length == 0 || a.length != own_length) {
    return refuse(node_.m_.refused_length, grpc::StatusCode::FAILED_PRECONDITION,
                  "length: this block is " + std::to_string(own_length) + " bytes here, not " +
                      std::to_string(a.length));
  }
  s->file = std::move(*file);
  s->index = a.block_index;
  s->length = own_length;
  s->key = BlockKey{from.fetcher->volume_key(), s->file.file_id, s->file.version, s->index};
  return grpc::Status::OK;
}

grpc::Status PeerVolume::BeginServe(BlockFetcher* fetcher, Serve& s, bool background,
                                    bool cached_only) {
  s.cached = fetcher->Cached(s.file, s.index);
  // The asker owns the block now; it reads the hub, not this agent for it.
  if (cached_only && !s.cached) {
    return grpc::Status(grpc::StatusCode::ABORTED, "cached_only: the block is not cached here");
  }
  {
    MutexLock lock(serving_mu_);
    serving_.insert(s.key);
  }
  s.begun = true;
  // A background ask in the owner's warm-up class: after its own readers, within its memory
  // budget. Then served from the cache like a hit.
  if (!s.cached && background) {
    s.warm = fetcher->StartWarm(s.file, s.index, 1);
    s.warming = true;
  }
  return grpc::Status::OK;
}

void PeerVolume::EndServe(Serve& s) {
  if (!s.begun) return;
  s.begun = false;
  MutexLock lock(serving_mu_);
  serving_.erase(serving_.find(s.key));
}

grpc::Status PeerVolume::FinishServe(BlockFetcher* fetcher, Serve& s,
                                     std::chrono::steady_clock::time_point deadline,
                                     std::string* data, uint64_t* xxh3) {
  if (s.warming) {
    // A block read for the ask but not kept here is not read again for it.
    const bool warmed = fetcher->WaitWarm(s.warm, deadline);
    if (!warmed || !fetcher->Cached(s.file, s.index)) {
      EndServe(s);
      return grpc::Status(
          warmed ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::DEADLINE_EXCEEDED,
          warmed ? "the block was read but not kept here"
                 : "the block was not read by the ask's deadline");
    }
  }
  auto blocks = fetcher->GetBlocks(s.file, s.index, 1, nullptr, nullptr, deadline);
  EndServe(s);
  if (!blocks[0]) {
    const Error& e = blocks[0].error();
    auto code = e.code() == Code::kTimeout ? grpc::StatusCode::DEADLINE_EXCEEDED
                                           : grpc::StatusCode::UNAVAILABLE;
    return grpc::Status(code, e.message());
  }
  const BlockBytes& bytes = **blocks[0];
  if (bytes.size() != s.length) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the block read here is " + std::to_string(bytes.size()) + " bytes, not " +
                            std::to_string(s.length));
  }
  *xxh3 = XXH3_64bits(bytes.data(), bytes.size());
  data->assign(bytes.data(), bytes.size());
#ifdef SPOKE_TEST_FAULTS
  if (node_.config_.fault_corrupt_served_blocks) (*data)[0] ^= 0x5a;
#endif
  node_.m_.served_blocks->Inc();
  node_.m_.served_bytes->Inc(bytes.size());
  return grpc::Status::OK;
}

namespace {

// FAILED_PRECONDITION unless the asker cuts files into blocks of this agent's size.
grpc::Status SameBlockSize(const BlockFetcher& fetcher, uint32_t asked) {
  if (asked == fetcher.block_size()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "block_size: this peer uses " + std::to_string(fetcher.block_size()));
}

}  // namespace

grpc::Status PeerVolume::ServeBlock(const Serving& from, const peer::v1::GetBlockRequest& req,
                                    std::chrono::steady_clock::time_point deadline,
                                    peer::v1::GetBlockResponse* resp) {
  BlockFetcher* fetcher = from.fetcher;
  if (grpc::Status st = SameBlockSize(*fetcher, req.block_size()); !st.ok()) return st;
  Serve s;
  grpc::Status st = CheckAsk(
      from, {req.file_path(), req.file_id(), req.version(), req.block_index(), req.length()}, &s);
  if (!st.ok()) return st;
  // Readers first: a background ask takes only the background quota, and an ask beyond its
  // class's quota is refused now rather than queued (the asker reads the hub at once).
  const bool background = req.background();
  st = node_.AdmitAsk(background, s.length, 1);
  if (!st.ok()) return st;
  st = BeginServe(fetcher, s, background, req.cached_only());
  if (st.ok()) {
    uint64_t xxh3 = 0;
    st = FinishServe(fetcher, s, deadline, resp->mutable_data(), &xxh3);
    resp->set_xxh3(xxh3);
    resp->set_from_cache(s.cached);
  }
  node_.EndAsk(background, s.length);
  return st;
}

grpc::Status PeerVolume::ServeBlocks(const Serving& from, const peer::v1::GetBlocksRequest& req,
                                     std::chrono::steady_clock::time_point deadline,
                                     grpc::ServerContext& ctx,
                                     grpc::ServerWriter<peer::v1::GetBlocksReply>& writer) {
  BlockFetcher* fetcher = from.fetcher;
  if (grpc::Status st = SameBlockSize(*fetcher, req.block_size()); !st.ok()) return st;
  if (req.items_size() > kMaxBatchItems) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "items: at most " + std::to_string(kMaxBatchItems) + " per call");
  }
  // The call holds one ask of its class and one block's bytes at a time: it sends its blocks
  // one after the other. Their fetches here are in the warm-up class (background) or are
  // readers' (demand), bounded there like this agent's own.
  const bool background = req.background();
  const uint64_t held = fetcher->block_size();
  if (grpc::Status st = node_.AdmitAsk(background, held, req.items_size()); !st.ok()) return st;
  peer::v1::GetBlocksReply reply;
  bool open = true;  // the asker still reads the replies
  auto answer = [&](int i, const grpc::Status& st) {
    reply.set_item(static_cast<uint32_t>(i));
    reply.set_code(static_cast<int32_t>(st.error_code()));
    reply.set_message(st.ok() ? std::string() : st.error_message());
    if (!st.ok()) {
      reply.clear_data();
      reply.clear_xxh3();
      reply.clear_from_cache();
    }
    open = open && !ctx.IsCancelled() && writer.Write(reply);
  };
  std::vector<Serve> serves(req.items_size());
  for (int i = 0; i < req.items_size(); ++i) {
    const auto& it = req.items(i);
    grpc::Status st =
        CheckAsk(from, {it.file_path(), it.file_id(), it.version(), it.block_index(), it.length()},
                 &serves[i]);
    if (st.ok()) st = BeginServe(fetcher, serves[i], background, it.cached_only());
    if (!st.ok()) answer(i, st);
  }
  // Cached blocks first, then each as its fetch here completes.
  for (bool cached_pass : {true, false}) {
    for (size_t i = 0; i < serves.size(); ++i) {
      Serve& s = serves[i];
      if (!s.begun || s.cached != cached_pass) continue;
      if (!open) {
        EndServe(s);  // the asker is gone; a fetch started for it completes on its own
        continue;
      }
      uint64_t xxh3 = 0;
      grpc::Status st = FinishServe(fetcher, s, deadline, reply.mutable_data(), &xxh3);
      reply.set_xxh3(xxh3);
      reply.set_from_cache(s.cached);
      answer(static_cast<int>(i), st);
    }
  }
  node_.EndAsk(background, held);
  return grpc::Status::OK;
}

void PeerVolume::MarkAbsent(const std::string& member) {
  MutexLock lock(absent_mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(absent_, [&](const auto& a) { return a.second <= now; });
  absent_[member] = now + node_.config_.absent_period;
}

void PeerVolume::LeaveOutAbsent(PeerSet::View& view) const {
  MutexLock lock(absent_mu_);
  if (absent_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const std::string self = view.self >= 0 ? view.members[view.self] : std::string();
  std::erase_if(view.members, [&](const std::string& m) REQUIRES(absent_mu_) {
    auto a = absent_.find(m);
    return a != absent_.end() && a->second > now;
  });
  auto it = std::find(view.members.begin(), view.members.end(), self);
  view.self =
      self.empty() || it == view.members.end() ? -1 : static_cast<int>(it - view.members.begin());
}

struct PeerVolume::Call {
  grpc::ClientContext ctx;
  peer::v1::GetBlockRequest req;
  peer::v1::GetBlockResponse resp;
  std::string member;
  Pending ask;
};

// One GetBlocks call: its replies complete its asks one by one, as the owner sends them.
class PeerVolume::BatchCall final : public grpc::ClientReadReactor<peer::v1::GetBlocksReply> {
 public:
  BatchCall(PeerVolume& volume, std::string member, std::vector<Pending> asks)
      : volume_(volume),
        member_(std::move(member)),
        asks_(std::move(asks)),
        answered_(asks_.size(), false) {}

  void Start(peer::v1::Peer::Stub* stub) {
    stub->async()->GetBlocks(&ctx_, &req_, this);
    StartRead(&reply_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    const uint32_t i = reply_.item();
    if (i < asks_.size() && !answered_[i]) {
      answered_[i] = true;
      grpc::Status st(static_cast<grpc::StatusCode>(reply_.code()), reply_.message());
      volume_.Complete(member_, asks_[i], st, reply_.data(), reply_.xxh3());
    }
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& st) override {
    std::vector<Pending> unanswered;
    for (size_t i = 0; i < asks_.size(); ++i) {
      if (!answered_[i]) unanswered.push_back(std::move(asks_[i]));
    }
    volume_.OnBatchDone(member_, st, std::move(unanswered));
    delete this;
  }

  const std::vector<Pending>& asks() const { return asks_; }

  grpc::ClientContext ctx_;
  peer::v1::GetBlocksRequest req_;

 private:
  PeerVolume& volume_;
  const std::string member_;
  std::vector<Pending> asks_;
  std::vector<bool> answered_;
  peer::v1::GetBlocksReply reply_;
};

bool PeerVolume::FetchAsync(const Block& block, Done done) {
  std::optional<Ask> ask = PeerToAsk(block);
  if (!ask) return false;
  Pending p{.block = block,
            .cached_only = ask->cached_only,
            .done = std::move(done),
            .queued_at = std::chrono::steady_clock::now()};
  // A reader waiting goes now, in a call of its own; background asks share calls per owner.
  if (!block.background || BatchesRefused(ask->member)) {
    SendOne(ask->member, std::move(p));
    return true;
  }
  std::vector<Pending> batch, stale;
  {
    MutexLock lock(lanes_mu_);
    Lane& lane = lanes_[ask->member];
    lane.queued.push_back(std::move(p));
    if (lane.calls >= kBatchCallsPerMember) return true;  // goes when a call ends
    TakeBatchLocked(lane, batch, stale);
    if (!batch.empty()) lane.calls++;
  }
  if (!batch.empty()) SendBatch(ask->member, std::move(batch));
  FailQueuedTooLong(node_.m_.fallback_error, stale);
  return true;
}

void PeerVolume::TakeBatchLocked(Lane& lane, std::vector<Pending>& batch,
                                 std::vector<Pending>& stale) {
  const auto now = std::chrono::steady_clock::now();
  while (!lane.queued.empty() && batch.size() < static_cast<size_t>(kMaxBatchItems)) {
    Pending& p = lane.queued.front();
    // It waited for the owner's earlier calls for as long as an ask may take: the hub now.
    (now - p.queued_at >= node_.config_.timeout ? stale : batch).push_back(std::move(p));
    lane.queued.pop_front();
  }
}

void PeerVolume::FailQueuedTooLong(metrics::Counter* counter, std::vector<Pending>& stale) {
  for (Pending& p : stale) {
    counter->Inc();
    p.done(std::unexpected(
        Error(Code::kTimeout, "peer ask queued behind the owner's calls past peerTimeoutMs")));
  }
}

namespace {

// A block asked for, into a GetBlockRequest or a GetBlocksRequest item.
template <typename Message>
void SetAskedBlock(Message& m, const BlockSource::Block& block, bool cached_only) {
  m.set_file_path(block.path);
  m.set_file_id(block.key.file_id);
  m.set_version(block.key.version);
  m.set_block_index(block.key.index);
  m.set_length(block.length);
  m.set_cached_only(cached_only);
}

// The call's bound and token, and the volume a GetBlock or GetBlocks request asks of.
template <typename Request>
void SetCallAndVolume(grpc::ClientContext& ctx, Request& r, const PeerNode::Config& config,
                      const std::string& hub, const std::string& volume_path,
                      const std::string& access, uint32_t block_size, bool background) {
  ctx.set_deadline(std::chrono::system_clock::now() + config.timeout);
  ctx.AddMetadata(kPeerTokenHeader, config.token);
  r.set_hub(hub);
  r.set_volume_path(volume_path);
  r.set_access(access);
  r.set_background(background);
  r.set_block_size(block_size);
}

}  // namespace

void PeerVolume::SendOne(const std::string& member, Pending p) {
  auto call = std::make_shared<Call>();
  call->member = member;
  SetCallAndVolume(call->ctx, call->req, node_.config_, hub_, volume_path_, access_, block_size_,
                   p.block.background);
  SetAskedBlock(call->req, p.block, p.cached_only);
  call->ask = std::move(p);
  node_.m_.calls_one->Inc();
  // Outlives the call: its fetcher waits for every fetch it started before it goes.
  PeerVolume* self = this;
  node_.StubFor(member)->async()->GetBlock(
      &call->ctx, &call->req, &call->resp, [call, self](grpc::Status st) {
        self->Complete(call->member, call->ask, st, call->resp.data(), call->resp.xxh3());
      });
}

void PeerVolume::SendBatch(const std::string& member, std::vector<Pending> batch) {
  auto* call = new BatchCall(*this, member, std::move(batch));
  SetCallAndVolume(call->ctx_, call->req_, node_.config_, hub_, volume_path_, access_, block_size_,
                   /*background=*/true);
  for (const Pending& p : call->asks()) {
    SetAskedBlock(*call->req_.add_items(), p.block, p.cached_only);
  }
  node_.m_.calls_batch->Inc();
  call->Start(node_.StubFor(member));
}

std::optional<PeerVolume::Ask> PeerVolume::PeerToAsk(const Block& block) const {
  bool serving = false;
  {
    MutexLock lock(serving_mu_);
    serving = serving_.contains(block.key);  // a peer asked us: we own it, whatever we think
  }
  if (node_.shut_down_.load()) return std::nullopt;
  PeerSet::View view = node_.members_->Live();
  node_.m_.members->Set(static_cast<int64_t>(view.members.size()));
  LeaveOutAbsent(view);
  uint64_t h = PeerBlockHash(key_, block.key.file_id, block.key.version, block.key.index);
  int owner = RendezvousOwner(view.members, h);
  if (owner < 0) return std::nullopt;
  if (!serving && owner != view.self) return Ask{view.members[owner]};
  // Asked by a peer: the hub at once. Queued behind this agent's own asks of peers, which wait
  // for those peers' hub reads, such a fetch made agents wait on each other until deadlines.
  if (serving) return std::nullopt;
  // Ours: the runner-up (the owner while this agent was not among the members) may have it.
  if (view.self < 0 || !PreviousOwnerOpen()) return std::nullopt;
  view.members.erase(view.members.begin() + view.self);
  int previous = RendezvousOwner(view.members, h);
  if (previous < 0) return std::nullopt;
  return Ask{view.members[previous], /*cached_only=*/true};
}

bool PeerVolume::Takes(const Block& block) const { return PeerToAsk(block).has_value(); }

bool PeerVolume::PreviousOwnerOpen() const {
  MutexLock lock(previous_mu_);
  return std::chrono::steady_clock::now() >= previous_paused_until_;
}

void PeerVolume::PreviousOwnerAnswered(bool hit) {
  (hit ? node_.m_.previous_hits : node_.m_.previous_misses)->Inc();
  MutexLock lock(previous_mu_);
  previous_hits_ += hit ? 1 : 0;
  if (++previous_asks_ < kPreviousOwnerProbe) return;
  if (previous_hits_ < kPreviousOwnerMinHits) {
    previous_paused_until_ = std::chrono::steady_clock::now() + kPreviousOwnerPause;
  }
  previous_asks_ = previous_hits_ = 0;
}

void PeerVolume::OnBatchDone(const std::string& member, const grpc::Status& st,
                             std::vector<Pending> unanswered) {
  // This call counts in its lane until the lane is settled below, and the destructor waits for
  // that count: everything that uses this volume comes first.
  const bool unimplemented = st.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  if (unimplemented) {
    // An agent of a version without GetBlocks (a rolling upgrade): one call per block.
    {
      MutexLock lock(lanes_mu_);
      batches_refused_until_[member] = std::chrono::steady_clock::now() + kBatchesRefusedPeriod;
      Lane& lane = lanes_[member];
      for (Pending& p : lane.queued) unanswered.push_back(std::move(p));
      lane.queued.clear();
    }
    for (Pending& p : unanswered) SendOne(member, std::move(p));
  } else if (!unanswered.empty()) {
    // One failed call says one thing of the member: counted once, not per ask.
    if (!st.ok()) CountFailedAsk(member, st);
    grpc::Status each = st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                               "the peer ended the call without this block")
                                : st;
    for (Pending& p : unanswered) Complete(member, p, each, std::string(), 0, /*counted=*/true);
  }
  std::vector<Pending> next, stale;
  metrics::Counter* const stale_counter = node_.m_.fallback_error;
  bool ended = false;
  {
    MutexLock lock(lanes_mu_);
    Lane& lane = lanes_[member];
    TakeBatchLocked(lane, next, stale);
    if (next.empty()) {
      lane.calls--;
      ended = true;
      // Under the lock: the destructor may go as soon as it sees it.
      lanes_cv_.notify_all();
    }
  }
  if (!ended) SendBatch(member, std::move(next));  // takes this call's place
  // Nothing of this volume from here on when the call ended.
  FailQueuedTooLong(stale_counter, stale);
}

bool PeerVolume::BatchesRefused(const std::string& member) {
  MutexLock lock(lanes_mu_);
  auto it = batches_refused_until_.find(member);
  if (it == batches_refused_until_.end()) return false;
  if (std::chrono::steady_clock::now() < it->second) return true;
  batches_refused_until_.erase(it);
  return false;
}

void PeerVolume::Complete(const std::string& member, Pending& ask, const grpc::Status& st,
                          const std::string& data, uint64_t xxh3, bool counted) {
  auto fail = [&](std::string why, int err = 0) {
    std::string what = "peer " + member + ": " + why;
    ask.done(std::unexpected(err != 0 ? Error::FromErrno(err, std::move(what))
                                      : Error(Code::kUnavailable, std::move(what))));
  };
  if (ask.cached_only && st.error_code() == grpc::StatusCode::ABORTED) {
    node_.members_->ReportSuccess(member);
    PreviousOwnerAnswered(false);
    return fail(st.error_message());
  }
  if (!st.ok()) {
    if (ask.cached_only) PreviousOwnerAnswered(false);
    if (!counted) CountFailedAsk(member, st);
    // Busy (the owner's serving quota is used up): the fetcher's peer window narrows.
    const bool busy = st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    return fail(st.error_message(), busy ? EBUSY : 0);
  }
  node_.members_->ReportSuccess(member);
  if (data.size() != ask.block.length || XXH3_64bits(data.data(), data.size()) != xxh3) {
    node_.m_.checksum_rejects->Inc();
    log::Warn("block from peer rejected: checksum or length mismatch",
              {{"peer", member}, {"path", ask.block.path}});
    return fail("checksum mismatch");
  }
  node_.m_.hits->Inc();
  node_.m_.hit_bytes->Inc(data.size());
  if (ask.cached_only) PreviousOwnerAnswered(true);
  ask.done(std::vector<char>(data.begin(), data.end()));
}

void PeerVolume::CountFailedAsk(const std::string& member, const grpc::Status& st) {
  // A refusal is an answer (the peer is alive); silence or a broken link is not.
  bool refused = st.error_code() == grpc::StatusCode::NOT_FOUND ||
                 st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                 st.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                 st.error_code() == grpc::StatusCode::PERMISSION_DENIED;
  if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    node_.members_->ReportSuccess(member);  // alive, only busy
    node_.m_.fallback_busy->Inc();
  } else if (refused) {
    node_.members_->ReportSuccess(member);
    node_.m_.fallback_refused->Inc();
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) MarkAbsent(member);
  } else {
    node_.members_->ReportFailure(member);
    node_.m_.fallback_error->Inc();
  }
  if (log::Enabled(log::Level::kDebug)) {
    log::Debug("peer ask failed", {{"peer", member}, {"error", st.error_message()}});
  }
}

}  // namespace spoke::agent
