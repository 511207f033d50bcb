// Three PeerNodes in one process, each with its own BlockFetcher and cache over one shared
// in-memory hub, talking gRPC over loopback: ownership, one hub read per block for the
// cluster, checksum rejection, wrong tokens, dead peers and refused requests.
#include "cache-agent/peer/peer_node.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/peer/peer_cert.h"
#include "cache-agent/peer/peer_token.h"
#include "tests/cache-agent/fs/fakes.h"
#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace spoke::agent {
namespace {

// One channel that has made a callback call stays for the whole run and past it, as the
// agent's peer channels stay for its life. gRPC shares one callback completion queue among
// such channels, and every test tears all its agents down: without this, about 1 % of ASan
// runs showed a double free inside grpc_cq_internal_unref on a callback thread still returning
// from a peer call's last reactor as the last channel went. Releasing this one channel in the
// environment's TearDown moved the same double free there (once in a CI run), so it is never
// released: the process ends with it.
class CallbackQueueForTheWholeRun : public ::testing::Environment {
 public:
  void SetUp() override {
    // Never deleted, and reachable from this static: not a leak to LeakSanitizer.
    static auto* const channel = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
    auto stub = peer::v1::Peer::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now());
    peer::v1::GetBlockRequest req;
    peer::v1::GetBlockResponse resp;
    std::promise<void> done;
    stub->async()->GetBlock(&ctx, &req, &resp, [&](grpc::Status) { done.set_value(); });
    done.get_future().wait();
  }
};
const auto* const kCallbackQueueForTheWholeRun =
    ::testing::AddGlobalTestEnvironment(new CallbackQueueForTheWholeRun);

using namespace std::chrono_literals;
using testing::FakeBlockCache;
using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;
constexpr uint64_t kBlocks = 48;
const std::string kToken = "cluster-token-for-tests-0001";
const std::string kHub = "hub.example:2049/export";
const std::string kAccess = PeerAccessName(HubIdentityParams{});

std::string Pattern(uint64_t n) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / kBlock) & 0xff);
  return s;
}

// The cluster CA and one agent certificate every test agent uses, and a client with it.
struct Certs {
  spoke::testing::TempDir dir{"peer-certs"};
  spoke::testing::TestCa ca{dir.path()};
  spoke::testing::TestCert agent = ca.Issue("agent", "spoke-peer");
};
Certs& TestCerts() {
  static Certs* certs = new Certs();
  return *certs;
}
PeerNode::Config::Tls AgentTls() {
  return {.cert_pem = TestCerts().agent.cert_pem,
          .key_pem = TestCerts().agent.key_pem,
          .ca_pem = TestCerts().ca.ca_pem()};
}
std::shared_ptr<grpc::ChannelCredentials> ClientCreds(const spoke::testing::TestCert& cert,
                                                      const std::string& ca_pem) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem;
  o.pem_private_key = cert.key_pem;
  o.pem_cert_chain = cert.cert_pem;
  return grpc::SslCredentials(o);
}
std::unique_ptr<peer::v1::Peer::Stub> PeerStub(
    int port, std::shared_ptr<grpc::ChannelCredentials> creds = nullptr) {
  if (creds == nullptr) creds = ClientCreds(TestCerts().agent, TestCerts().ca.ca_pem());
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("spoke-peer");
  return peer::v1::Peer::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), creds, args));
}

// A stub dialing `target` as it is: no target-name override, so the client checks that the
// server's certificate names `target`'s host (a certificate per agent).
std::unique_ptr<peer::v1::Peer::Stub> AddressStub(const std::string& target,
                                                  std::shared_ptr<grpc::ChannelCredentials> creds) {
  return peer::v1::Peer::NewStub(grpc::CreateChannel(target, creds));
}

// An agent's own certificate, as the chart's init container mints it: signed by the test
// CA, naming `ip` (and `dns`).
spoke::testing::TestCert MintedCert(const std::string& ip, const std::string& dns = "") {
  PeerCertRequest r;
  r.ca_cert_pem = TestCerts().ca.ca_pem();
  r.ca_key_pem = spoke::testing::ReadWholeFile(TestCerts().ca.ca_key_file());
  r.ips = {ip};
  if (!dns.empty()) r.dns_names = {dns};
  auto c = MintPeerCert(r);
  EXPECT_TRUE(c) << c.error().ToString();
  spoke::testing::TestCert t;
  if (c) {
    t.cert_pem = c->cert_pem;
    t.key_pem = c->key_pem;
  }
  return t;
}

// The owner's file attributes, from the hub (exe/ takes them from the volume's metadata).
PeerFileLookup HubLookup(FakeRemoteFs& hub) {
  return [&hub](const std::string& path) -> Result<FileRef> {
    SPOKE_TRY(auto a, hub.Stat(path));
    return FileRef{
        .path = path, .file_id = a.file_id, .version = a.ContentVersion(), .size = a.size};
  };
}

// One agent: a peer node and one mounted volume (fetcher + cache) of the shared hub.
struct Agent {
  Agent(FakeRemoteFs& hub, const PeerNode::Config& pc, uint64_t volume_key,
        const std::string& access)
      : cache(kBlock) {
    auto n = PeerNode::Start(pc, registry);
    EXPECT_TRUE(n) << n.error().ToString();
    node = std::move(*n);
    peer = node->AttachVolume(kHub, "data", access, kBlock);
    BlockFetcher::Config fc;
    fc.block_size = kBlock;
    fc.source = peer.get();
    fetcher =
        std::make_unique<BlockFetcher>(hub, &cache, volume_key, fc, registry, metrics::Labels{});
    peer->ServeBlocksFrom(fetcher.get(), HubLookup(hub));
  }
  ~Agent() {
    peer->ServeBlocksFrom(nullptr);
    fetcher.reset();
    peer.reset();
    node.reset();
  }
  uint64_t Counter(const std::string& name, metrics::Labels labels = {}) {
    return registry.GetCounter(name, "", labels).Value();
  }
  metrics::Registry registry;
  FakeBlockCache cache;
  std::unique_ptr<PeerNode> node;
  std::unique_ptr<PeerVolume> peer;
  std::unique_ptr<BlockFetcher> fetcher;
};

class PeerNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hub_.PutFile("train/shard-0", Pattern(kBlocks * kBlock - 100));  // short last block
    auto a = hub_.Stat("train/shard-0");
    file_ = FileRef{"train/shard-0", a->file_id, a->ContentVersion(), a->size};
    want_ = hub_.Data("train/shard-0");
  }
  void TearDown() override {
    agents_.clear();
    hub_.WaitIdle();
  }

  // `n` agents on loopback listing each other; `extra` members nobody serves.
  void StartAgents(int n, std::vector<std::string> extra = {}, std::vector<bool> corrupt = {},
                   std::vector<std::string> tokens = {}) {
    std::vector<uint16_t> ports;
    std::vector<std::string> members = extra;
    for (int i = 0; i < n; ++i) {
      ports.push_back(spoke::testing::FreePort());
      members.push_back(Host(i) + ":" + std::to_string(ports.back()));
    }
    for (int i = 0; i < n; ++i) {
      PeerNode::Config pc;
      pc.listen_address = Host(i) + ":" + std::to_string(ports[i]);
      pc.token = i < static_cast<int>(tokens.size()) ? tokens[i] : kToken;
      pc.tls = AgentTls();
      if (!own_certs_.empty()) {
        pc.tls->cert_pem = own_certs_[i].cert_pem;
        pc.tls->key_pem = own_certs_[i].key_pem;
        pc.tls->identity = PeerNode::Config::Tls::Identity::kAddress;
      }
      pc.timeout = 2000ms;
      pc.members.static_peers = members;
      pc.members.failures_to_mark_down = 2;
      pc.members.down_period = 60s;
      pc.fault_corrupt_served_blocks = i < static_cast<int>(corrupt.size()) && corrupt[i];
      pc.keep_local_copy = keep_local_copy_;
      pc.absent_period = absent_period_;
      if (serve_max_asks_ > 0) {
        pc.serve_max_asks = serve_max_asks_;
        pc.serve_background_max_asks = 1;
      }
      // Different volume keys: agents name their volumes differently, the hub identity
      // is what peers agree on.
      agents_.push_back(std::make_unique<Agent>(
          hub_, pc, 100 + i, i < static_cast<int>(access_.size()) ? access_[i] : kAccess));
    }
  }

  // Reads the whole file through `a`, one block per call, checking every byte.
  void ReadAll(Agent& a) {
    for (uint64_t b = 0; b < kBlocks; ++b) {
      auto r = a.fetcher->GetBlocks(file_, b, 1);
      ASSERT_TRUE(r[0]) << "block " << b << ": " << r[0].error().ToString();
      std::string got((*r[0])->begin(), (*r[0])->end());
      ASSERT_EQ(got, want_.substr(b * kBlock, kBlock)) << "block " << b;
    }
  }

  // An ask for block `index` of file_ in volume "data" of kHub with kAccess, as an agent
  // sends it; tests change the fields they are about.
  peer::v1::GetBlockRequest BlockAsk(uint64_t index = 0) const {
    peer::v1::GetBlockRequest req;
    req.set_hub(kHub);
    req.set_volume_path("data");
    req.set_access(kAccess);
    req.set_file_path(file_.path);
    req.set_file_id(file_.file_id);
    req.set_version(file_.version);
    req.set_block_index(index);
    req.set_block_size(kBlock);
    req.set_length(kBlock);
    return req;
  }
  // Sends `req` with `token` (none when empty), bounded by `timeout`.
  static grpc::Status Ask(peer::v1::Peer::Stub& stub, const peer::v1::GetBlockRequest& req,
                          peer::v1::GetBlockResponse* resp, const std::string& token = kToken,
                          std::chrono::seconds timeout = 5s) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!token.empty()) ctx.AddMetadata(kPeerTokenHeader, token);
    return stub.GetBlock(&ctx, req, resp);
  }

  uint64_t Sum(const std::string& counter, metrics::Labels labels = {}) {
    uint64_t s = 0;
    for (auto& a : agents_) s += a->Counter(counter, labels);
    return s;
  }

  // With certificates per agent, agent i listens on 127.0.0.<i+1> (a loopback address of its
  // own, which its certificate names); with the shared one, all on 127.0.0.1.
  std::string Host(int i) const {
    return own_certs_.empty() ? "127.0.0.1" : "127.0.0." + std::to_string(i + 1);
  }

  std::vector<spoke::testing::TestCert> own_certs_;  // per agent; empty: the shared one
  bool keep_local_copy_ = true;
  std::chrono::milliseconds absent_period_{10000};
  int serve_max_asks_ = 0;           // > 0: that bound, and one background ask
  std::vector<std::string> access_;  // per agent; kAccess for the others
  FakeRemoteFs hub_;
  FileRef file_;
  std::string want_;
  std::vector<std::unique_ptr<Agent>> agents_;
};

TEST_F(PeerNodeTest, ThreeReadersOfOneFileReadEachBlockFromTheHubOnce) {
  StartAgents(3);
  std::vector<std::thread> readers;
  for (auto& a : agents_) readers.emplace_back([&, p = a.get()] { ReadAll(*p); });
  for (auto& t : readers) t.join();
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
  EXPECT_EQ(Sum("spoke_hub_read_bytes_total"), want_.size());
  // Each agent owns about a third and got the other two thirds from peers.
  EXPECT_EQ(Sum("spoke_peer_hit_bytes_total"), 2 * want_.size());
  EXPECT_EQ(Sum("spoke_peer_served_bytes_total"), 2 * want_.size());
  EXPECT_EQ(Sum("spoke_peer_checksum_rejects_total"), 0u);
  for (auto& a : agents_) EXPECT_GT(a->Counter("spoke_peer_served_blocks_total"), 0u);
}

TEST_F(PeerNodeTest, ACorruptedBlockIsRejectedAndReadFromTheHub) {
#ifndef SPOKE_TEST_FAULTS
  GTEST_SKIP() << "built without the test faults (SPOKE_TEST_FAULTS=OFF)";
#endif
  StartAgents(2, {}, {false, true});  // agent 1 corrupts what it serves
  ReadAll(*agents_[0]);
  uint64_t rejects = agents_[0]->Counter("spoke_peer_checksum_rejects_total");
  EXPECT_GT(rejects, 0u);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_hits_total"), 0u);
  EXPECT_EQ(rejects, agents_[1]->Counter("spoke_peer_served_blocks_total"));
}

TEST_F(PeerNodeTest, APeerWithAnotherTokenIsRefusedAndTheHubServes) {
  StartAgents(2, {}, {}, {kToken, "some-other-cluster-token-99"});
  ReadAll(*agents_[0]);
  EXPECT_GT(agents_[1]->Counter("spoke_peer_auth_failures_total"), 0u);
  EXPECT_EQ(agents_[1]->Counter("spoke_peer_served_blocks_total"), 0u);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_hits_total"), 0u);
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
}

TEST_F(PeerNodeTest, ADeadPeerCostsABoundedNumberOfAsksThenIsLeftOut) {
  // A member that is listed but does not listen (a pod that died).
  std::string dead = "127.0.0.1:" + std::to_string(spoke::testing::FreePort());
  StartAgents(1, {dead});
  ReadAll(*agents_[0]);
  ReadAll(*agents_[0]);  // cached now
  uint64_t failed = agents_[0]->Counter("spoke_peer_fallbacks_total", {{"reason", "error"}});
  EXPECT_GE(failed, 1u);
  EXPECT_LE(failed, 2u);  // failures_to_mark_down
  EXPECT_EQ(agents_[0]->node->members().Live().members.size(), 1u);
}

TEST_F(PeerNodeTest, PeersServeOnlyPathsInsideVolumesTheyMounted) {
  StartAgents(1);
  Agent& a = *agents_[0];
  uint64_t version = file_.version;
  auto ask = [&](std::string hub, std::string volume_path, std::string path,
                 std::string token = kToken, uint64_t index = 0, uint32_t length = kBlock) {
    auto req = BlockAsk(index);
    req.set_hub(hub);
    req.set_volume_path(volume_path);
    req.set_file_path(path);
    req.set_version(version);
    req.set_length(length);
    peer::v1::GetBlockResponse resp;
    return Ask(*PeerStub(a.node->port()), req, &resp, token).error_code();
  };
  EXPECT_EQ(ask(kHub, "data", "train/shard-0"), grpc::StatusCode::OK);
  EXPECT_EQ(ask(kHub, "data", "train/shard-0", ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ask(kHub, "data", "train/shard-0", kToken + "x"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ask(kHub, "other", "train/shard-0"), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ask("elsewhere:2049/export", "data", "train/shard-0"), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ask(kHub, "data", "../etc/passwd"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ask(kHub, "data", "/etc/passwd"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ask(kHub, "data", "train/./shard-0"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(a.Counter("spoke_peer_auth_failures_total"), 2u);
  version = file_.version + 1;  // a version the owner does not have
  EXPECT_EQ(ask(kHub, "data", "train/shard-0"), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(a.Counter("spoke_peer_served_blocks_total"), 1u);
  EXPECT_EQ(a.Counter("spoke_peer_refused_asks_total", {{"reason", "file"}}), 1u);
}

TEST_F(PeerNodeTest, AVolumeReadingTheHubAsAnotherIdentityGetsNoBlocksFromPeers) {
  HubIdentityParams strong{.mode = HubIdentity::kFixed, .uid = 0, .gid = 0, .allow_root = true};
  HubIdentityParams weak{.mode = HubIdentity::kFixed, .uid = 1000, .gid = 1000};
  HubIdentityParams root_squashed = strong;
  root_squashed.allow_root = false;
  HubIdentityParams by_caller = weak;
  by_caller.mode = HubIdentity::kCaller;
  // Every field that decides what the hub lets a volume read is in the key.
  const std::vector<std::string> names = {PeerAccessName(strong), PeerAccessName(weak),
                                          PeerAccessName(root_squashed), PeerAccessName(by_caller)};
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
  }
  // Agent 0 mounts the hub path as root, agent 1 as uid 1000: same hub, same path.
  access_ = {PeerAccessName(strong), PeerAccessName(weak)};
  StartAgents(2);
  ReadAll(*agents_[0]);
  ReadAll(*agents_[1]);
  EXPECT_EQ(Sum("spoke_peer_served_blocks_total"), 0u);
  EXPECT_EQ(Sum("spoke_peer_hits_total"), 0u);
  EXPECT_EQ(hub_.read_bytes.load(), 2 * want_.size());  // each read it as itself
  // Asked directly with the weaker access, the stronger volume's owner has nothing to serve.
  auto req = BlockAsk();
  req.set_access(PeerAccessName(weak));
  peer::v1::GetBlockResponse resp;
  EXPECT_EQ(Ask(*PeerStub(agents_[0]->node->port()), req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(resp.data().empty());
}

TEST_F(PeerNodeTest, AMemberThatDoesNotServeTheVolumeIsAskedOnceThenLeftOutOfItsOwners) {
  // A live member with the cluster token that never mounted this volume.
  uint16_t port = spoke::testing::FreePort();
  PeerNode::Config pc;
  pc.listen_address = "127.0.0.1:" + std::to_string(port);
  pc.token = kToken;
  pc.tls = AgentTls();
  pc.members.static_peers = {pc.listen_address};
  metrics::Registry registry;
  auto bare = PeerNode::Start(pc, registry);
  ASSERT_TRUE(bare) << bare.error().ToString();
  StartAgents(2, {pc.listen_address});
  ReadAll(*agents_[0]);  // one block at a time: one refused ask teaches the asker
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_fallbacks_total", {{"reason", "refused"}}), 1u);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_fallbacks_total", {{"reason", "error"}}), 0u);
  // Its share of the blocks went to the member that serves the volume instead.
  EXPECT_GT(agents_[0]->Counter("spoke_peer_hits_total"), 0u);
  ReadAll(*agents_[1]);
  EXPECT_EQ(agents_[1]->Counter("spoke_peer_fallbacks_total", {{"reason", "refused"}}), 1u);
  // At most the block first asked of it twice (none when that first ask was a cached-only
  // one for a block its asker owns: then no other agent had read it yet).
  EXPECT_GE(hub_.read_bytes.load(), want_.size());
  EXPECT_LE(hub_.read_bytes.load(), want_.size() + kBlock);
  agents_.clear();
  (*bare)->Shutdown();
}

TEST_F(PeerNodeTest, AnOwnerRefusesAsksBeyondItsQuotaAtOnceAndChargesEachToItsClass) {
  serve_max_asks_ = 2;  // two asks at once, one of them background
  StartAgents(1);
  Agent& a = *agents_[0];
  auto ask = [&](uint64_t index, bool background) {
    auto req = BlockAsk(index);
    req.set_background(background);
    peer::v1::GetBlockResponse resp;
    auto st = Ask(*PeerStub(a.node->port()), req, &resp, kToken, 10s);
    EXPECT_TRUE(!st.ok() || resp.data() == want_.substr(index * kBlock, kBlock)) << index;
    return st.error_code();
  };
  auto serving = [&] { return a.registry.GetGauge("spoke_peer_serving_bytes", "").Value(); };
  auto wait_serving = [&](int64_t bytes) {
    for (int i = 0; i < 1000 && serving() != bytes; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_EQ(serving(), bytes);
  };
  hub_.HoldReads(true);  // the asks admitted stay in flight
  std::thread reader_ask([&] { EXPECT_EQ(ask(0, false), grpc::StatusCode::OK); });
  wait_serving(kBlock);
  std::thread background_ask([&] { EXPECT_EQ(ask(1, true), grpc::StatusCode::OK); });
  wait_serving(2 * kBlock);
  // Both quotas are used up: the next asks are answered now, not queued behind the hub.
  EXPECT_EQ(ask(2, true), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ask(3, false), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(a.Counter("spoke_peer_busy_refusals_total", {{"class", "background"}}), 1u);
  EXPECT_EQ(a.Counter("spoke_peer_busy_refusals_total", {{"class", "demand"}}), 1u);
  hub_.HoldReads(false);
  reader_ask.join();
  background_ask.join();
  wait_serving(0);
  EXPECT_EQ(a.Counter("spoke_peer_served_blocks_total"), 2u);
  // The background ask was fetched in the owner's warm-up class, then served from its cache:
  // one reader's miss (the reader's ask), not two.
  EXPECT_EQ(a.Counter("spoke_cache_misses_total"), 1u);
  EXPECT_EQ(hub_.read_bytes.load(), 2u * kBlock);
}

// GetBlocks: each item answered once, by its own status; cached blocks before the ones the
// owner has to read; only the one block asked for and not cached read from the hub.
TEST_F(PeerNodeTest, ABatchIsAnsweredItemByItemCachedBlocksFirst) {
  StartAgents(1);
  Agent& a = *agents_[0];
  for (uint64_t b : {0, 2}) ASSERT_TRUE(a.fetcher->GetBlocks(file_, b, 1)[0]);
  const uint64_t read_before = hub_.read_bytes.load();
  peer::v1::GetBlocksRequest req;
  req.set_hub(kHub);
  req.set_volume_path("data");
  req.set_access(kAccess);
  req.set_block_size(kBlock);
  req.set_background(true);
  auto item = [&](uint64_t index, uint32_t length, bool cached_only = false) {
    auto* it = req.add_items();
    it->set_file_path(file_.path);
    it->set_file_id(file_.file_id);
    it->set_version(file_.version);
    it->set_block_index(index);
    it->set_length(length);
    it->set_cached_only(cached_only);
  };
  item(10, kBlock);                        // 0: read here for the ask
  item(0, kBlock);                         // 1: cached
  item(1, 100);                            // 2: a length the owner disagrees with
  item(11, kBlock, /*cached_only=*/true);  // 3: not cached: not read for a cached-only ask
  item(2, kBlock);                         // 4: cached
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  ctx.AddMetadata(kPeerTokenHeader, kToken);
  auto stub = PeerStub(a.node->port());
  auto reader = stub->GetBlocks(&ctx, req);
  std::vector<uint32_t> order;
  std::map<uint32_t, peer::v1::GetBlocksReply> replies;
  peer::v1::GetBlocksReply r;
  while (reader->Read(&r)) {
    order.push_back(r.item());
    EXPECT_TRUE(replies.emplace(r.item(), r).second) << "item " << r.item() << " twice";
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(replies.size(), 5u);
  for (uint32_t i : {0u, 1u, 4u}) {
    const uint64_t index = req.items(i).block_index();
    EXPECT_EQ(replies[i].code(), 0) << i << ": " << replies[i].message();
    EXPECT_EQ(replies[i].data(), want_.substr(index * kBlock, kBlock)) << i;
    EXPECT_EQ(replies[i].xxh3(), XXH3_64bits(replies[i].data().data(), replies[i].data().size()));
  }
  EXPECT_EQ(replies[2].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(replies[3].code(), grpc::StatusCode::ABORTED);
  EXPECT_TRUE(replies[1].from_cache() && replies[4].from_cache() && !replies[0].from_cache());
  auto pos = [&](uint32_t i) { return std::find(order.begin(), order.end(), i) - order.begin(); };
  EXPECT_LT(pos(1), pos(0));
  EXPECT_LT(pos(4), pos(0));
  EXPECT_EQ(hub_.read_bytes.load() - read_before, kBlock);  // block 10 only
  EXPECT_EQ(a.Counter("spoke_peer_refused_asks_total", {{"reason", "length"}}), 1u);
  EXPECT_EQ(a.Counter("spoke_peer_served_blocks_total"), 3u);
}

// An asker's background asks to one owner go in a few GetBlocks calls, not one call per block:
// while its first calls wait (the hub is held), the rest queue and go together.
TEST_F(PeerNodeTest, BackgroundAsksToOneOwnerShareCalls) {
  StartAgents(2);
  Agent& asker = *agents_[0];
  hub_.HoldReads(true);
  std::thread warm([&] { EXPECT_TRUE(asker.fetcher->Warm(file_, 0, kBlocks)); });
  std::this_thread::sleep_for(300ms);  // every ask made; the calls in flight wait for the hub
  hub_.HoldReads(false);
  warm.join();
  const uint64_t hits = asker.Counter("spoke_peer_hits_total");
  const uint64_t batches = asker.Counter("spoke_peer_calls_total", {{"kind", "batch"}});
  EXPECT_GT(hits, 8u);  // about half the file is the other agent's
  // Shared: a call per block would be `hits` calls. Asks that come in while both calls of the
  // lane are out wait for one to end, so how many share a call depends on timing (at least
  // three each, also under ASan).
  EXPECT_LE(batches, hits / 3) << hits << " blocks in " << batches << " calls";
  EXPECT_EQ(asker.Counter("spoke_peer_calls_total", {{"kind", "block"}}), 0u);
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());  // once for the two
  ReadAll(asker);                                   // the right bytes, from its cache
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
}

// An owner reads a block a peer asked for from the hub at once: not first from the block's
// previous owner, which its own asks of peers may hold up (agents then waited on each other
// until the ask's deadline in 3-agent cold fills).
TEST_F(PeerNodeTest, ABlockAPeerAsksForIsReadFromTheHubByItsOwner) {
  StartAgents(3);
  ASSERT_TRUE(agents_[0]->fetcher->Warm(file_, 0, kBlocks));
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
  for (int i : {1, 2}) {
    EXPECT_GT(agents_[i]->Counter("spoke_peer_served_blocks_total"), 0u) << i;
    for (const char* result : {"cached", "not_cached"}) {
      EXPECT_EQ(agents_[i]->Counter("spoke_peer_previous_owner_asks_total", {{"result", result}}),
                0u)
          << i << " " << result;
    }
  }
}

// An owner of a version without GetBlocks (a rolling upgrade) answers UNIMPLEMENTED: the
// asker asks it one block per call instead, and reads nothing twice.
class SingleBlockOwner final : public peer::v1::Peer::Service {
 public:
  explicit SingleBlockOwner(const std::string& data) : data_(data) {}
  grpc::Status GetBlock(grpc::ServerContext*, const peer::v1::GetBlockRequest* req,
                        peer::v1::GetBlockResponse* resp) override {
    resp->set_data(data_.substr(req->block_index() * kBlock, req->length()));
    resp->set_xxh3(XXH3_64bits(resp->data().data(), resp->data().size()));
    served++;
    served_bytes += resp->data().size();
    return grpc::Status::OK;
  }
  std::atomic<int> served{0};
  std::atomic<uint64_t> served_bytes{0};

 private:
  std::string data_;
};

TEST_F(PeerNodeTest, AnOwnerWithoutGetBlocksIsAskedOneBlockPerCall) {
  SingleBlockOwner old_owner(want_);
  grpc::ServerBuilder builder;
  int port = 0;
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = TestCerts().ca.ca_pem();
  o.pem_key_cert_pairs.push_back({TestCerts().agent.key_pem, TestCerts().agent.cert_pem});
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(o), &port);
  builder.RegisterService(&old_owner);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  StartAgents(1, {"127.0.0.1:" + std::to_string(port)});
  Agent& asker = *agents_[0];
  ASSERT_TRUE(asker.fetcher->Warm(file_, 0, kBlocks));
  EXPECT_GT(old_owner.served.load(), 0);
  EXPECT_EQ(asker.Counter("spoke_peer_hits_total"), static_cast<uint64_t>(old_owner.served));
  EXPECT_EQ(asker.Counter("spoke_peer_calls_total", {{"kind", "block"}}),
            static_cast<uint64_t>(old_owner.served));
  EXPECT_EQ(hub_.read_bytes.load() + old_owner.served_bytes, want_.size());
  ReadAll(asker);
  server->Shutdown();
}

TEST_F(PeerNodeTest, ThePeerChannelRefusesPlaintextAndCertificatesOfAnotherCaOrName) {
  StartAgents(1);
  Agent& a = *agents_[0];
  auto ask = [&](std::unique_ptr<peer::v1::Peer::Stub> stub) {
    peer::v1::GetBlockResponse resp;  // the right token: TLS refuses them anyway
    auto st = Ask(*stub, BlockAsk(), &resp);
    EXPECT_TRUE(st.ok() || resp.data().empty());
    return st.error_code();
  };
  const int port = a.node->port();
  // A plaintext client never reaches the service: the handshake fails.
  {
    auto plain = peer::v1::Peer::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                             grpc::InsecureChannelCredentials()));
    peer::v1::GetBlockResponse resp;
    auto st = Ask(*plain, BlockAsk(), &resp);
    std::printf("[plaintext client] status %d (%s), %zu bytes received\n",
                static_cast<int>(st.error_code()), st.error_message().c_str(), resp.data().size());
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(resp.data().empty());
  }
  // A client whose certificate another CA signed, or with none.
  spoke::testing::TempDir dir("peer-other-ca");
  spoke::testing::TestCa other(dir.path(), "other-ca");
  auto foreign = other.Issue("foreign", "spoke-peer");
  EXPECT_EQ(ask(PeerStub(port, ClientCreds(foreign, TestCerts().ca.ca_pem()))),
            grpc::StatusCode::UNAVAILABLE);
  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = TestCerts().ca.ca_pem();
  EXPECT_EQ(ask(PeerStub(port, grpc::SslCredentials(no_cert))), grpc::StatusCode::UNAVAILABLE);
  // The cluster CA's certificate for something else than a peer.
  auto other_name = TestCerts().ca.Issue("not-a-peer", "metrics-scraper");
  EXPECT_EQ(ask(PeerStub(port, ClientCreds(other_name, TestCerts().ca.ca_pem()))),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(a.Counter("spoke_peer_identity_failures_total"), 1u);
  EXPECT_EQ(a.Counter("spoke_peer_served_blocks_total"), 0u);
  EXPECT_EQ(ask(PeerStub(port)), grpc::StatusCode::OK);  // a peer's certificate
  // A server whose certificate is not the cluster's is not asked either (the asker checks).
  EXPECT_EQ(ask(PeerStub(port, ClientCreds(TestCerts().agent, other.ca_pem()))),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(PeerNodeTest, WithACertificatePerAgentTheClusterStillReadsEachBlockFromTheHubOnce) {
  // Each names its own address only: askers dial members by address and check it.
  own_certs_ = {MintedCert("127.0.0.1", "node-0"), MintedCert("127.0.0.2", "node-1"),
                MintedCert("127.0.0.3", "node-2")};
  StartAgents(3);
  std::vector<std::thread> readers;
  for (auto& a : agents_) readers.emplace_back([&, p = a.get()] { ReadAll(*p); });
  for (auto& t : readers) t.join();
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
  EXPECT_EQ(Sum("spoke_peer_hit_bytes_total"), 2 * want_.size());
  EXPECT_EQ(Sum("spoke_peer_identity_failures_total"), 0u);
  EXPECT_EQ(Sum("spoke_peer_fallbacks_total", {{"reason", "error"}}), 0u);
  for (auto& a : agents_) EXPECT_GT(a->Counter("spoke_peer_served_blocks_total"), 0u);
}

TEST_F(PeerNodeTest, AnAgentWithAnotherAgentsCertificateIsNeitherAskedNorAnswered) {
  // Agent 1 listens on 127.0.0.2 but holds the certificate of the agent at 127.0.0.3.
  own_certs_ = {MintedCert("127.0.0.1"), MintedCert("127.0.0.3")};
  StartAgents(2);
  // As a server: agent 0's asks fail the handshake (it dialed 127.0.0.2), the hub serves.
  ReadAll(*agents_[0]);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_hits_total"), 0u);
  EXPECT_GT(agents_[0]->Counter("spoke_peer_fallbacks_total", {{"reason", "error"}}), 0u);
  EXPECT_EQ(agents_[1]->Counter("spoke_peer_served_blocks_total"), 0u);
  EXPECT_EQ(hub_.read_bytes.load(), want_.size());
  // As a client: 127.0.0.3 is no member, so agent 0 refuses it and counts the refusal.
  ReadAll(*agents_[1]);
  EXPECT_EQ(agents_[1]->Counter("spoke_peer_hits_total"), 0u);
  EXPECT_GT(agents_[1]->Counter("spoke_peer_fallbacks_total", {{"reason", "refused"}}), 0u);
  EXPECT_GT(agents_[0]->Counter("spoke_peer_identity_failures_total"), 0u);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_served_blocks_total"), 0u);
}

TEST_F(PeerNodeTest, WithACertificatePerAgentBothEndsCheckTheAddress) {
  // 127.0.0.2 is a member that does not serve: a certificate naming it is a member's.
  own_certs_ = {MintedCert("127.0.0.1", "node-0")};
  const std::string member2 = "127.0.0.2:" + std::to_string(spoke::testing::FreePort());
  StartAgents(1, {member2});
  Agent& a = *agents_[0];
  const std::string ca = TestCerts().ca.ca_pem();
  const std::string target = "127.0.0.1:" + std::to_string(a.node->port());
  auto ask = [&](std::unique_ptr<peer::v1::Peer::Stub> stub) {
    peer::v1::GetBlockResponse resp;
    auto st = Ask(*stub, BlockAsk(), &resp);
    EXPECT_TRUE(st.ok() || resp.data().empty());
    return st.error_code();
  };
  auto creds = [&](const spoke::testing::TestCert& c) { return ClientCreds(c, ca); };
  const auto m2 = MintedCert("127.0.0.2");
  EXPECT_EQ(ask(AddressStub(target, creds(m2))), grpc::StatusCode::OK);
  // The server's certificate names 127.0.0.1 and node-0, not the name this client expects
  // (set as the target name: dialing "localhost" would resolve it through c-ares, whose
  // resolver leaks under LeakSanitizer).
  {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    EXPECT_EQ(ask(peer::v1::Peer::NewStub(grpc::CreateCustomChannel(target, creds(m2), args))),
              grpc::StatusCode::UNAVAILABLE);
  }
  // Clients of the cluster CA naming no member: another address, the shared name.
  EXPECT_EQ(ask(AddressStub(target, creds(MintedCert("127.0.0.9")))),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ask(AddressStub(target, creds(TestCerts().agent))),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(a.Counter("spoke_peer_identity_failures_total"), 2u);
  // Another CA's certificate naming a member, and a plaintext client: the handshake fails.
  spoke::testing::TempDir dir("peer-other-ca");
  spoke::testing::TestCa other(dir.path(), "other-ca");
  EXPECT_EQ(ask(AddressStub(target, creds(other.Issue("foreign", "", {"127.0.0.2"})))),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ask(AddressStub(target, grpc::InsecureChannelCredentials())),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(a.Counter("spoke_peer_served_blocks_total"), 1u);
}

TEST_F(PeerNodeTest, AnIpv6MemberIsCheckedAgainstItsIpv6Certificate) {
  uint16_t port = spoke::testing::FreePort();
  PeerNode::Config pc;
  pc.listen_address = "[::1]:" + std::to_string(port);
  pc.token = kToken;
  pc.tls = AgentTls();
  const auto own = MintedCert("::1");
  pc.tls->cert_pem = own.cert_pem;
  pc.tls->key_pem = own.key_pem;
  pc.tls->identity = PeerNode::Config::Tls::Identity::kAddress;
  pc.members.static_peers = {pc.listen_address};
  metrics::Registry registry;
  auto node = PeerNode::Start(pc, registry);
  if (!node) GTEST_SKIP() << "no IPv6 loopback: " << node.error().ToString();
  const std::string ca = TestCerts().ca.ca_pem();
  peer::v1::GetBlockResponse resp;
  // Not mounted there: NOT_FOUND is an answer past both certificate checks.
  EXPECT_EQ(
      Ask(*AddressStub(pc.listen_address, ClientCreds(MintedCert("::1"), ca)), BlockAsk(), &resp)
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(
      Ask(*AddressStub(pc.listen_address, ClientCreds(MintedCert("::2"), ca)), BlockAsk(), &resp)
          .error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  (*node)->Shutdown();
}

TEST(PeerNodeConfigTest, PlaintextOnlyWhenAskedFor) {
  metrics::Registry registry;
  PeerNode::Config pc;
  pc.listen_address = "127.0.0.1:0";
  pc.token = kToken;
  pc.members.static_peers = {"127.0.0.1:1"};
  auto refused = PeerNode::Start(pc, registry);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("tls: is required"), std::string::npos)
      << refused.error().message();
  pc.tls = AgentTls();
  pc.tls->ca_pem.clear();
  EXPECT_FALSE(PeerNode::Start(pc, registry));
  pc.tls.reset();
  pc.plaintext = true;  // a test configuration that asks for it
  EXPECT_TRUE(PeerNode::Start(pc, registry));
}

TEST_F(PeerNodeTest, TheOwnerDecidesTheBlockLengthAndRefusesAsksThatDisagree) {
  StartAgents(1);
  Agent& a = *agents_[0];
  auto ask = [&](uint64_t index, uint32_t length) {
    auto req = BlockAsk(index);
    req.set_length(length);
    peer::v1::GetBlockResponse resp;
    auto st = Ask(*PeerStub(a.node->port()), req, &resp);
    return std::make_pair(st.error_code(), resp.data());
  };
  const uint32_t last_length = static_cast<uint32_t>(want_.size() - (kBlocks - 1) * kBlock);
  // An asker claiming the file ends inside block 0 would plant a short block for good.
  EXPECT_EQ(ask(0, 100).first, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ask(kBlocks - 1, kBlock).first, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ask(kBlocks, kBlock).first, grpc::StatusCode::FAILED_PRECONDITION);  // past the end
  EXPECT_EQ(a.Counter("spoke_peer_refused_asks_total", {{"reason", "length"}}), 3u);
  EXPECT_EQ(hub_.read_bytes.load(), 0u);  // nothing read or cached for a refused ask
  auto first = ask(0, kBlock);
  EXPECT_EQ(first.first, grpc::StatusCode::OK);
  EXPECT_EQ(first.second, want_.substr(0, kBlock));
  auto last = ask(kBlocks - 1, last_length);
  EXPECT_EQ(last.first, grpc::StatusCode::OK);
  EXPECT_EQ(last.second, want_.substr((kBlocks - 1) * kBlock));
  ReadAll(a);  // the owner's own reads are whole blocks
}

TEST_F(PeerNodeTest, AShortCachedBlockIsNeverAShortRead) {
  StartAgents(1);
  Agent& a = *agents_[0];
  // A block cached shorter than the file's block (planted by an older agent's peer ask).
  BlockKey key{a.fetcher->volume_key(), file_.file_id, file_.version, 0};
  ASSERT_TRUE(a.cache.Put(key, want_.data(), 100, AdmissionHint{}));
  auto r = a.fetcher->GetBlocks(file_, 0, 1);
  ASSERT_TRUE(r[0]) << r[0].error().ToString();
  EXPECT_EQ(std::string((*r[0])->begin(), (*r[0])->end()), want_.substr(0, kBlock));
}

TEST_F(PeerNodeTest, UnmountingWhilePeersStreamServesEveryReaderTheRightBytes) {
  keep_local_copy_ = false;  // every read of agent 0 asks the owner again
  absent_period_ = 0ms;      // and goes on asking it after it answered "not mounted"
  StartAgents(2);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        ReadAll(*agents_[0]);
        if (::testing::Test::HasFatalFailure()) return;
      }
    });
  }
  // Agent 1 stops and resumes serving (an unmount, then a mount) while agent 0 streams.
  Agent& owner = *agents_[1];
  for (int i = 0; i < 1000; ++i) {
    owner.peer->ServeBlocksFrom(nullptr);
    std::this_thread::yield();
    owner.peer->ServeBlocksFrom(owner.fetcher.get(), HubLookup(hub_));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Then the whole unmount: serving stops, the fetcher and the peer side go.
  agents_[1].reset();
  for (int i = 0; i < 2; ++i) ReadAll(*agents_[0]);
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(agents_[0]->Counter("spoke_peer_hits_total"), 0u);
}

TEST_F(PeerNodeTest, ACachedOnlyAskIsAnsweredFromTheCacheOrRefusedWithoutReadingTheHub) {
  StartAgents(1);
  Agent& a = *agents_[0];
  auto req = BlockAsk(0);
  req.set_cached_only(true);
  peer::v1::GetBlockResponse resp;
  EXPECT_EQ(Ask(*PeerStub(a.node->port()), req, &resp).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(hub_.read_bytes.load(), 0u);  // not cached: the asker reads the hub, not this agent
  ReadAll(a);
  const uint64_t read = hub_.read_bytes.load();
  ASSERT_TRUE(Ask(*PeerStub(a.node->port()), req, &resp).ok());
  EXPECT_EQ(resp.data(), want_.substr(0, kBlock));
  EXPECT_EQ(hub_.read_bytes.load(), read);
}

// A member that serves the volume late (it mounted it after the others read it) owns about a
// third of the blocks, which the others fetched and kept while it was left out: it gets them
// from their previous owner's cache, and its read costs the hub nothing.
TEST_F(PeerNodeTest, AMemberThatServesLateGetsItsBlocksFromTheirPreviousOwners) {
  StartAgents(3);
  agents_[0]->peer->ServeBlocksFrom(nullptr);  // not mounted yet: "not mounted" to askers
  ReadAll(*agents_[1]);
  ReadAll(*agents_[2]);
  const uint64_t before = hub_.read_bytes.load();
  EXPECT_GE(before, want_.size());
  agents_[0]->peer->ServeBlocksFrom(agents_[0]->fetcher.get(), HubLookup(hub_));
  ReadAll(*agents_[0]);
  EXPECT_EQ(hub_.read_bytes.load(), before);
  EXPECT_GT(agents_[0]->Counter("spoke_peer_previous_owner_asks_total", {{"result", "cached"}}),
            0u);
  EXPECT_EQ(agents_[0]->Counter("spoke_peer_previous_owner_asks_total", {{"result", "not_cached"}}),
            0u);
}

}  // namespace
}  // namespace spoke::agent
