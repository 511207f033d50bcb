#include "csi-node/node_server.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/csi_identity.h"
#include "tests/csi-node/fake_agent.h"
#include "tests/csi-node/fake_mounter.h"

namespace spoke::node {
namespace {

namespace fs = std::filesystem;
using csi::v1::VolumeCapability;
using testing::FakeAgent;
using testing::FakeMounter;

HubAddress Hub() {
  HubAddress h;
  h.server = "10.0.0.5";
  h.nfs_port = 2049;
  h.mount_port = 20048;
  h.share = "/srv/export";
  return h;
}

std::string MakeId(VolumeMode mode, std::string path) {
  VolumeId id;
  id.hub = Hub();
  id.mode = mode;
  id.path = std::move(path);
  return id.Encode();
}

StringMap MakeContext(VolumeMode mode, std::string path) {
  VolumeContext c;
  c.hub = Hub();
  c.mode = mode;
  c.path = std::move(path);
  return c.ToMap();
}

VolumeCapability MountCap(
    VolumeCapability::AccessMode::Mode mode = VolumeCapability::AccessMode::SINGLE_NODE_WRITER) {
  VolumeCapability cap;
  cap.mutable_mount();
  cap.mutable_access_mode()->set_mode(mode);
  return cap;
}

class NodeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/spoke-node-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/agent.sock";
    agent_ = std::make_unique<FakeAgent>(mounter_);
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(agent_.get());
    agent_server_ = b.BuildAndStart();
    ASSERT_TRUE(agent_server_);
    config_.node_id = "node-1";
    config_.agent_socket = socket_;
    config_.state_dir = dir_ + "/state";
    config_.inline_volumes.servers = {"10.0.0.5"};
    config_.inline_volumes.share_prefixes = {"/srv/export"};
    config_.inline_volumes.modes = {"dataset"};
    staging_ = dir_ + "/staging";
    fs::create_directories(staging_);
    fs::create_directories(dir_ + "/pods/a");
    fs::create_directories(dir_ + "/pods/b");
    target_a_ = dir_ + "/pods/a/mount";
    target_b_ = dir_ + "/pods/b/mount";
    MakeServer(socket_, std::chrono::milliseconds(2000));
  }
  void TearDown() override {
    server_.reset();
    client_.reset();
    if (agent_server_) agent_server_->Shutdown(std::chrono::system_clock::now());
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void MakeServer(const std::string& socket, std::chrono::milliseconds timeout) {
    server_.reset();
    client_ = std::make_unique<AgentClient>(socket, timeout);
    server_ = std::make_unique<NodeServer>(config_, mounter_, *client_);
  }

  grpc::Status Stage(const std::string& id, const StringMap& ctx,
                     VolumeCapability cap = MountCap()) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(staging_);
    *req.mutable_volume_capability() = cap;
    for (const auto& [k, v] : ctx) (*req.mutable_volume_context())[k] = v;
    csi::v1::NodeStageVolumeResponse resp;
    grpc::ServerContext sctx;
    return server_->NodeStageVolume(&sctx, &req, &resp);
  }
  grpc::Status Unstage(const std::string& id) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(staging_);
    csi::v1::NodeUnstageVolumeResponse resp;
    grpc::ServerContext sctx;
    return server_->NodeUnstageVolume(&sctx, &req, &resp);
  }
  grpc::Status Publish(const std::string& id, const StringMap& ctx, const std::string& target,
                       bool readonly = false, VolumeCapability cap = MountCap(),
                       bool staged = true) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(id);
    if (staged) req.set_staging_target_path(staging_);
    req.set_target_path(target);
    req.set_readonly(readonly);
    *req.mutable_volume_capability() = cap;
    for (const auto& [k, v] : ctx) (*req.mutable_volume_context())[k] = v;
    csi::v1::NodePublishVolumeResponse resp;
    grpc::ServerContext sctx;
    return server_->NodePublishVolume(&sctx, &req, &resp);
  }
  grpc::Status Unpublish(const std::string& id, const std::string& target) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_target_path(target);
    csi::v1::NodeUnpublishVolumeResponse resp;
    grpc::ServerContext sctx;
    return server_->NodeUnpublishVolume(&sctx, &req, &resp);
  }
  grpc::Status Stats(const std::string& id, const std::string& path,
                     csi::v1::NodeGetVolumeStatsResponse* resp) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    grpc::ServerContext sctx;
    return server_->NodeGetVolumeStats(&sctx, &req, resp);
  }

  std::string dir_, socket_, staging_, target_a_, target_b_;
  FakeMounter mounter_;
  std::unique_ptr<FakeAgent> agent_;
  std::unique_ptr<grpc::Server> agent_server_;
  NodeConfig config_;
  std::unique_ptr<AgentClient> client_;
  std::unique_ptr<NodeServer> server_;
};

#define EXPECT_CODE(status, code_)                                             \
  do {                                                                         \
    grpc::Status s_ = (status);                                                \
    EXPECT_EQ(s_.error_code(), grpc::StatusCode::code_) << s_.error_message(); \
  } while (0)

TEST_F(NodeServerTest, CapabilitiesAndInfo) {
  grpc::ServerContext sctx;
  csi::v1::NodeGetCapabilitiesResponse caps;
  ASSERT_TRUE(server_->NodeGetCapabilities(&sctx, nullptr, &caps).ok());
  std::set<int> types;
  for (const auto& c : caps.capabilities()) types.insert(c.rpc().type());
  EXPECT_EQ(types, (std::set<int>{csi::v1::NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME,
                                  csi::v1::NodeServiceCapability::RPC::GET_VOLUME_STATS,
                                  csi::v1::NodeServiceCapability::RPC::VOLUME_CONDITION,
                                  csi::v1::NodeServiceCapability::RPC::VOLUME_MOUNT_GROUP}));

  csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(server_->NodeGetInfo(&sctx, nullptr, &info).ok());
  EXPECT_EQ(info.node_id(), "node-1");
  EXPECT_FALSE(info.has_accessible_topology());

  config_.region = "eu-west-1";
  config_.zone = "eu-west-1a";
  MakeServer(socket_, std::chrono::milliseconds(2000));
  ASSERT_TRUE(server_->NodeGetInfo(&sctx, nullptr, &info).ok());
  EXPECT_EQ(info.accessible_topology().segments().at("topology.spoke.csi.dev/region"), "eu-west-1");
  EXPECT_EQ(info.accessible_topology().segments().at("topology.spoke.csi.dev/zone"), "eu-west-1a");
}

TEST(IdentityServerTest, NameVersionCapabilities) {
  IdentityServer identity(/*has_topology=*/true);
  grpc::ServerContext sctx;
  csi::v1::GetPluginInfoResponse info;
  ASSERT_TRUE(identity.GetPluginInfo(&sctx, nullptr, &info).ok());
  EXPECT_EQ(info.name(), "spoke.csi.dev");
  EXPECT_FALSE(info.vendor_version().empty());
  csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(identity.GetPluginCapabilities(&sctx, nullptr, &caps).ok());
  ASSERT_EQ(caps.capabilities_size(), 2);
  EXPECT_EQ(caps.capabilities(1).service().type(),
            csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(identity.Probe(&sctx, nullptr, &probe).ok());
  EXPECT_TRUE(probe.ready().value());
}

TEST_F(NodeServerTest, StageRejectsBadInputWithTheFieldName) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  csi::v1::NodeStageVolumeRequest req;
  csi::v1::NodeStageVolumeResponse resp;
  grpc::ServerContext sctx;
  req.set_staging_target_path(staging_);
  *req.mutable_volume_capability() = MountCap();
  auto s = server_->NodeStageVolume(&sctx, &req, &resp);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("volume_id"), std::string::npos);

  req.set_volume_id(id);
  req.clear_staging_target_path();
  s = server_->NodeStageVolume(&sctx, &req, &resp);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("staging_target_path"), std::string::npos);

  req.set_staging_target_path(staging_);
  req.clear_volume_capability();
  s = server_->NodeStageVolume(&sctx, &req, &resp);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("volume_capability"), std::string::npos);

  VolumeCapability block;
  block.mutable_block();
  block.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  s = Stage(id, {}, block);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("block"), std::string::npos);

  s = Stage("not-a-spoke-id", {});
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("malformed volume id"), std::string::npos);

  StringMap bad = MakeContext(VolumeMode::kScratch, "s/1");
  bad["consistency"] = "sometimes";
  s = Stage(id, bad);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("consistency"), std::string::npos) << s.error_message();

  EXPECT_TRUE(agent_->mount_calls().empty());
}

TEST_F(NodeServerTest, StageMountsThroughTheAgentAndIsIdempotent) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, MakeContext(VolumeMode::kScratch, "s/1")).ok());
  ASSERT_TRUE(Stage(id, MakeContext(VolumeMode::kScratch, "s/1")).ok());
  auto calls = agent_->mount_calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].volume_id, id);
  EXPECT_EQ(calls[0].target, staging_);
  EXPECT_FALSE(calls[0].read_only);
  EXPECT_EQ(calls[0].context.at("path"), "s/1");
  EXPECT_EQ(calls[0].context.at("server"), "10.0.0.5");
  EXPECT_EQ(mounter_.CountMountsAt(staging_), 1);
}

TEST_F(NodeServerTest, StageDerivesTheContextFromTheIdAndMountsDatasetsReadOnly) {
  std::string id = MakeId(VolumeMode::kDataset, "datasets/imagenet");
  ASSERT_TRUE(Stage(id, {{"csi.storage.k8s.io/pv/name", "pv-1"}}).ok());
  auto calls = agent_->mount_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].read_only);
  EXPECT_EQ(calls[0].context.at("path"), "datasets/imagenet");
  EXPECT_EQ(calls[0].context.at("mode"), "dataset");
  EXPECT_EQ(calls[0].context.at("mountPort"), "20048");
}

TEST_F(NodeServerTest, ReadOnlyAccessModeStagesReadOnly) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, {}, MountCap(VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY)).ok());
  EXPECT_TRUE(agent_->mount_calls().at(0).read_only);
}

TEST_F(NodeServerTest, RoMountOptionStagesAndPublishesReadOnly) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  VolumeCapability cap = MountCap(VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER);
  cap.mutable_mount()->add_mount_flags("ro");
  ASSERT_TRUE(Stage(id, {}, cap).ok());
  EXPECT_TRUE(agent_->mount_calls().at(0).read_only);
  ASSERT_TRUE(Publish(id, {}, target_a_, false, cap).ok());
  EXPECT_TRUE(mounter_.Top(target_a_)->read_only());
}

TEST_F(NodeServerTest, AgentErrorsPassThroughWithTheirCode) {
  agent_->set_mount_status(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "hub 10.0.0.5:2049: timeout"));
  auto s = Stage(MakeId(VolumeMode::kScratch, "s/1"), {});
  EXPECT_CODE(s, UNAVAILABLE);
  EXPECT_NE(s.error_message().find("hub 10.0.0.5:2049: timeout"), std::string::npos);
  agent_->set_mount_status(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "other volume"));
  EXPECT_CODE(Stage(MakeId(VolumeMode::kScratch, "s/1"), {}), ALREADY_EXISTS);
}

TEST_F(NodeServerTest, PublishBindsIntoTwoTargetsAndIsIdempotent) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  auto ctx = MakeContext(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, ctx).ok());
  ASSERT_TRUE(Publish(id, ctx, target_a_).ok());
  ASSERT_TRUE(Publish(id, ctx, target_a_).ok());
  ASSERT_TRUE(Publish(id, ctx, target_b_).ok());
  EXPECT_TRUE(fs::is_directory(target_a_));
  EXPECT_EQ(mounter_.CountMountsAt(target_a_), 1);
  EXPECT_EQ(mounter_.CountMountsAt(target_b_), 1);
  EXPECT_EQ(mounter_.binds, 2);
  auto a = mounter_.Top(target_a_);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->SameTree(*mounter_.Top(staging_)));
  EXPECT_FALSE(a->read_only());
  EXPECT_EQ(mounter_.remounts, 0);
}

TEST_F(NodeServerTest, PublishRemountsReadOnlyForDatasetsAndReadonlyRequests) {
  std::string id = MakeId(VolumeMode::kDataset, "d");
  auto ctx = MakeContext(VolumeMode::kDataset, "d");
  ASSERT_TRUE(Stage(id, ctx).ok());
  ASSERT_TRUE(Publish(id, ctx, target_a_).ok());
  EXPECT_TRUE(mounter_.Top(target_a_)->read_only());

  std::string sid = MakeId(VolumeMode::kScratch, "s");
  auto sctx = MakeContext(VolumeMode::kScratch, "s");
  std::string staging2 = dir_ + "/staging2";
  staging_ = staging2;
  ASSERT_TRUE(Stage(sid, sctx).ok());
  ASSERT_TRUE(Publish(sid, sctx, target_b_, /*readonly=*/true).ok());
  EXPECT_TRUE(mounter_.Top(target_b_)->read_only());
  EXPECT_EQ(mounter_.remounts, 2);
}

TEST_F(NodeServerTest, FailedReadOnlyRemountLeavesNothingWritable) {
  std::string id = MakeId(VolumeMode::kDataset, "d");
  ASSERT_TRUE(Stage(id, {}).ok());
  mounter_.fail_remount = true;
  auto s = Publish(id, {}, target_a_);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(mounter_.CountMountsAt(target_a_), 0);
  EXPECT_FALSE(fs::exists(target_a_));
}

TEST_F(NodeServerTest, PublishRejectsBadInput) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  EXPECT_CODE(Publish("", {}, target_a_), INVALID_ARGUMENT);
  EXPECT_CODE(Publish(id, {}, ""), INVALID_ARGUMENT);
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(id);
  req.set_target_path(target_a_);
  req.set_staging_target_path(staging_);
  csi::v1::NodePublishVolumeResponse resp;
  grpc::ServerContext sctx;
  EXPECT_CODE(server_->NodePublishVolume(&sctx, &req, &resp), INVALID_ARGUMENT);
  VolumeCapability block;
  block.mutable_block();
  block.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  EXPECT_CODE(Publish(id, {}, target_a_, false, block), INVALID_ARGUMENT);
  EXPECT_CODE(Publish(id, {}, target_a_, false, MountCap(), /*staged=*/false), INVALID_ARGUMENT);
  // Not staged: nothing mounted at the staging path.
  auto s = Publish(id, {}, target_a_);
  EXPECT_CODE(s, FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("not staged"), std::string::npos);
  EXPECT_FALSE(fs::exists(target_a_));
}

TEST_F(NodeServerTest, PublishRefusesATargetHoldingAnotherMount) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, {}).ok());
  fs::create_directories(target_a_);
  mounter_.AddFuseMount(target_a_, false);
  EXPECT_CODE(Publish(id, {}, target_a_), ALREADY_EXISTS);
}

TEST_F(NodeServerTest, UnpublishAndUnstageRemoveEverythingAndAreIdempotent) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, {}).ok());
  ASSERT_TRUE(Publish(id, {}, target_a_).ok());
  ASSERT_TRUE(Unpublish(id, target_a_).ok());
  EXPECT_EQ(mounter_.CountMountsAt(target_a_), 0);
  EXPECT_FALSE(fs::exists(target_a_));
  ASSERT_TRUE(Unpublish(id, target_a_).ok());  // gone already

  ASSERT_TRUE(Unstage(id).ok());
  EXPECT_EQ(mounter_.CountMountsAt(staging_), 0);
  EXPECT_EQ(agent_->unmount_calls(), std::vector<std::string>{staging_});
  EXPECT_TRUE(fs::is_directory(staging_));  // the CO's directory
  ASSERT_TRUE(Unstage(id).ok());
  fs::remove(staging_);
  ASSERT_TRUE(Unstage(id).ok());
  EXPECT_CODE(Unpublish("", target_a_), INVALID_ARGUMENT);
  EXPECT_CODE(Unpublish(id, ""), INVALID_ARGUMENT);
}

TEST_F(NodeServerTest, UnpublishRefusesToDeleteAFullDirectoryThatIsNotAMount) {
  fs::create_directories(target_a_);
  { std::ofstream(target_a_ + "/data") << "x"; }
  auto s = Unpublish(MakeId(VolumeMode::kScratch, "s"), target_a_);
  EXPECT_CODE(s, INTERNAL);
  EXPECT_TRUE(fs::exists(target_a_ + "/data"));
}

TEST_F(NodeServerTest, StaleTargetIsDetachedOnUnpublishAndOnPublish) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, {}).ok());
  ASSERT_TRUE(Publish(id, {}, target_a_).ok());
  mounter_.MarkStale(target_a_);
  // Republishing over a stale bind replaces it.
  ASSERT_TRUE(Publish(id, {}, target_a_).ok());
  EXPECT_EQ(mounter_.lazy_unmounts, 1);
  EXPECT_EQ(mounter_.CountMountsAt(target_a_), 1);
  mounter_.MarkStale(target_a_);
  ASSERT_TRUE(Unpublish(id, target_a_).ok());
  EXPECT_EQ(mounter_.lazy_unmounts, 2);
  EXPECT_FALSE(fs::exists(target_a_));
}

TEST_F(NodeServerTest, StaleStagingIsRecoveredOnStageAndPublish) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  auto ctx = MakeContext(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, ctx).ok());
  // The agent restarted: its FUSE session is gone and it forgot the mount.
  agent_->Forget();
  mounter_.MarkStale(staging_);
  ASSERT_TRUE(Publish(id, ctx, target_a_).ok());
  EXPECT_EQ(mounter_.lazy_unmounts, 1);
  EXPECT_EQ(agent_->mount_calls().size(), 2u);  // re-staged from the publish request
  EXPECT_TRUE(mounter_.Top(target_a_)->SameTree(*mounter_.Top(staging_)));

  agent_->Forget();
  mounter_.MarkStale(staging_);
  ASSERT_TRUE(Stage(id, ctx).ok());
  EXPECT_EQ(mounter_.lazy_unmounts, 2);
  EXPECT_EQ(mounter_.CountMountsAt(staging_), 1);
}

TEST_F(NodeServerTest, AgentDownFailsFastWithUnavailable) {
  MakeServer(dir_ + "/no-agent.sock", std::chrono::milliseconds(5000));
  auto start = std::chrono::steady_clock::now();
  auto s = Stage(MakeId(VolumeMode::kScratch, "s/1"), {});
  EXPECT_CODE(s, UNAVAILABLE);
  EXPECT_NE(s.error_message().find("cache agent not reachable at " + dir_ + "/no-agent.sock"),
            std::string::npos)
      << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST_F(NodeServerTest, HungAgentHitsTheDeadline) {
  MakeServer(socket_, std::chrono::milliseconds(300));
  agent_->set_delay(std::chrono::milliseconds(2000));
  auto start = std::chrono::steady_clock::now();
  auto s = Stage(MakeId(VolumeMode::kScratch, "s/1"), {});
  EXPECT_CODE(s, UNAVAILABLE);
  EXPECT_NE(s.error_message().find("did not answer Mount within 300 ms"), std::string::npos)
      << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  agent_->set_delay(std::chrono::milliseconds(0));
}

TEST_F(NodeServerTest, UnstageWithTheAgentDownDetachesAStaleMount) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, {}).ok());
  MakeServer(dir_ + "/no-agent.sock", std::chrono::milliseconds(1000));
  // A live mount with no agent to ask: refuse (the agent owns it).
  EXPECT_CODE(Unstage(id), UNAVAILABLE);
  mounter_.MarkStale(staging_);
  ASSERT_TRUE(Unstage(id).ok());
  EXPECT_EQ(mounter_.CountMountsAt(staging_), 0);
}

TEST_F(NodeServerTest, EphemeralVolumeMountsPrivatelyAndTearsDown) {
  std::string kubelet_id = "csi-0123abcd";
  StringMap attrs = {{"server", "10.0.0.5"},
                     {"share", "/srv/export"},
                     {"nfsPort", "2049"},
                     {"mountPort", "20048"},
                     {"subDir", "datasets/imagenet"},
                     {"mode", "dataset"},
                     {"csi.storage.k8s.io/ephemeral", "true"},
                     {"csi.storage.k8s.io/pod.name", "trainer-0"}};
  ASSERT_TRUE(Publish(kubelet_id, attrs, target_a_, false, MountCap(), /*staged=*/false).ok());
  std::string priv = server_->EphemeralDir(kubelet_id);
  EXPECT_EQ(priv, dir_ + "/state/ephemeral/csi-0123abcd");
  auto calls = agent_->mount_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].target, priv);
  EXPECT_EQ(calls[0].volume_id, kubelet_id);
  EXPECT_TRUE(calls[0].read_only);
  EXPECT_EQ(calls[0].context.at("path"), "datasets/imagenet");
  EXPECT_TRUE(mounter_.Top(target_a_)->read_only());
  EXPECT_TRUE(mounter_.Top(target_a_)->SameTree(*mounter_.Top(priv)));
  // Idempotent.
  ASSERT_TRUE(Publish(kubelet_id, attrs, target_a_, false, MountCap(), false).ok());
  EXPECT_EQ(mounter_.CountMountsAt(priv), 1);
  EXPECT_EQ(mounter_.CountMountsAt(target_a_), 1);

  ASSERT_TRUE(Unpublish(kubelet_id, target_a_).ok());
  EXPECT_EQ(agent_->unmount_calls(), std::vector<std::string>{priv});
  EXPECT_FALSE(fs::exists(priv));
  EXPECT_FALSE(fs::exists(target_a_));
  EXPECT_EQ(mounter_.CountMountsAt(priv), 0);
  ASSERT_TRUE(Unpublish(kubelet_id, target_a_).ok());
}

TEST_F(NodeServerTest, EphemeralWithBadAttributesIsInvalidAndLeavesNothing) {
  StringMap attrs = {{"server", "10.0.0.5"},
                     {"subDir", "x"},
                     {"csi.storage.k8s.io/ephemeral", "true"}};  // no share
  auto s = Publish("csi-1", attrs, target_a_, false, MountCap(), false);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("share"), std::string::npos) << s.error_message();
  EXPECT_FALSE(fs::exists(server_->EphemeralDir("csi-1")));
  // The agent refusing leaves no directory behind either.
  attrs["share"] = "/srv/export";
  agent_->set_mount_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "hub down"));
  EXPECT_CODE(Publish("csi-1", attrs, target_a_, false, MountCap(), false), UNAVAILABLE);
  EXPECT_FALSE(fs::exists(server_->EphemeralDir("csi-1")));
}

// A pod author asks for what the node's inlineVolumes allow-list does not allow: refused
// with InvalidArgument naming the rule, before the agent is asked anything.
TEST_F(NodeServerTest, InlineVolumeOutsideTheAllowListIsRefused) {
  StringMap ok = {{"server", "10.0.0.5"},
                  {"share", "/srv/export"},
                  {"subDir", "datasets/imagenet"},
                  {"mode", "dataset"},
                  {"csi.storage.k8s.io/ephemeral", "true"}};
  struct Case {
    const char* key;
    const char* value;
    const char* rule;
  };
  for (const Case& c : {Case{"server", "10.0.0.6", "inlineVolumes.servers"},
                        Case{"share", "/srv/exportx", "inlineVolumes.sharePrefixes"},
                        Case{"share", "/srv", "inlineVolumes.sharePrefixes"},
                        Case{"mode", "scratch", "inlineVolumes.modes"},
                        Case{"allowRoot", "true", "allowRoot"}, Case{"hubUid", "0", "hubUid"}}) {
    StringMap attrs = ok;
    attrs[c.key] = c.value;
    auto s = Publish("csi-2", attrs, target_a_, false, MountCap(), false);
    EXPECT_CODE(s, INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find(c.rule), std::string::npos) << s.error_message();
  }
  // Scratch at a share's root is refused even where scratch inline volumes are allowed.
  config_.inline_volumes.modes = {"dataset", "scratch"};
  MakeServer(socket_, std::chrono::milliseconds(2000));
  StringMap root = ok;
  root["mode"] = "scratch";
  root.erase("subDir");
  auto s = Publish("csi-2", root, target_a_, false, MountCap(), false);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("share's root"), std::string::npos) << s.error_message();
  // Without an allow-list (the default) no inline volume is mounted.
  config_.inline_volumes = {};
  MakeServer(socket_, std::chrono::milliseconds(2000));
  s = Publish("csi-2", ok, target_a_, false, MountCap(), false);
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not enabled"), std::string::npos) << s.error_message();
  EXPECT_TRUE(agent_->mount_calls().empty());
  EXPECT_FALSE(fs::exists(server_->EphemeralDir("csi-2")));
}

TEST_F(NodeServerTest, StatsReportHubCapacityAndCacheFigures) {
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  ASSERT_TRUE(Stage(id, MakeContext(VolumeMode::kScratch, "s/1")).ok());
  ASSERT_TRUE(Publish(id, {}, target_a_).ok());
  auto stats = agent_->stats();
  stats.set_hub_reachable(true);
  stats.set_hub_total_bytes(1000);
  stats.set_hub_available_bytes(600);
  stats.set_hub_used_bytes(400);
  stats.set_hub_total_inodes(50);
  stats.set_hub_free_inodes(20);
  stats.set_cache_bytes(3 << 20);
  stats.set_cache_hits(90);
  stats.set_cache_misses(10);
  agent_->set_stats(stats);
  csi::v1::NodeGetVolumeStatsResponse resp;
  for (const std::string& path : {target_a_, staging_}) {
    resp.Clear();
    auto s = Stats(id, path, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.usage_size(), 2);
    EXPECT_EQ(resp.usage(0).unit(), csi::v1::VolumeUsage::BYTES);
    EXPECT_EQ(resp.usage(0).total(), 1000);
    EXPECT_EQ(resp.usage(0).available(), 600);
    EXPECT_EQ(resp.usage(0).used(), 400);
    EXPECT_EQ(resp.usage(1).unit(), csi::v1::VolumeUsage::INODES);
    EXPECT_EQ(resp.usage(1).used(), 30);
    EXPECT_FALSE(resp.volume_condition().abnormal());
    EXPECT_NE(resp.volume_condition().message().find("3.0 MiB cached, hit ratio 90.0%"),
              std::string::npos)
        << resp.volume_condition().message();
  }

  stats.set_hub_reachable(false);
  stats.set_last_hub_error("connect: Connection refused");
  agent_->set_stats(stats);
  resp.Clear();
  ASSERT_TRUE(Stats(id, target_a_, &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find(
                "hub 10.0.0.5:2049 unreachable: connect: Connection refused"),
            std::string::npos)
      << resp.volume_condition().message();

  mounter_.MarkStale(target_a_);
  resp.Clear();
  ASSERT_TRUE(Stats(id, target_a_, &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("is stale"), std::string::npos)
      << resp.volume_condition().message();

  MakeServer(dir_ + "/no-agent.sock", std::chrono::milliseconds(1000));
  resp.Clear();
  ASSERT_TRUE(Stats(id, staging_, &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("cache agent not reachable at"),
            std::string::npos)
      << resp.volume_condition().message();
}

TEST_F(NodeServerTest, StatsErrors) {
  csi::v1::NodeGetVolumeStatsResponse resp;
  std::string id = MakeId(VolumeMode::kScratch, "s/1");
  EXPECT_CODE(Stats("", target_a_, &resp), INVALID_ARGUMENT);
  EXPECT_CODE(Stats(id, "", &resp), INVALID_ARGUMENT);
  EXPECT_CODE(Stats(id, "some/path", &resp), NOT_FOUND);
  EXPECT_CODE(Stats("fake-vol-id", dir_ + "/nope", &resp), NOT_FOUND);
  fs::create_directories(target_a_);
  EXPECT_CODE(Stats(id, target_a_, &resp), NOT_FOUND);  // a directory, not a mount
  ASSERT_TRUE(Stage(id, {}).ok());
  ASSERT_TRUE(Publish(id, {}, target_b_).ok());
  auto s = Stats(MakeId(VolumeMode::kScratch, "other"), target_b_, &resp);
  EXPECT_CODE(s, NOT_FOUND);
  EXPECT_NE(s.error_message().find("holds volume"), std::string::npos);
}

TEST_F(NodeServerTest, KubeletDirIsEnforcedWhenConfigured) {
  config_.kubelet_dir = dir_ + "/kubelet";
  config_.kubelet_dir_enforced = true;
  MakeServer(socket_, std::chrono::milliseconds(2000));
  auto s = Stage(MakeId(VolumeMode::kScratch, "s"), {});
  EXPECT_CODE(s, INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("outside kubelet's directory"), std::string::npos);
  EXPECT_CODE(Publish(MakeId(VolumeMode::kScratch, "s"), {}, dir_ + "/kubelet/../etc"),
              INVALID_ARGUMENT);
  EXPECT_CODE(Unpublish(MakeId(VolumeMode::kScratch, "s"), "/etc"), INVALID_ARGUMENT);
  EXPECT_TRUE(agent_->mount_calls().empty());
}

// A pod's fsGroup arrives as the mount's volume_mount_group (kubelet delegates it: the driver
// has VOLUME_MOUNT_GROUP) and goes to the agent in the context; one set in the volume's
// attributes is never taken; a group that is not a number is refused, naming the field.
TEST_F(NodeServerTest, StagingCarriesThePodsFsGroupToTheAgentAndOnlyFromTheCapability) {
  const std::string id = MakeId(VolumeMode::kScratch, "pvc-1");
  StringMap ctx = MakeContext(VolumeMode::kScratch, "pvc-1");
  ctx[std::string(kCtxMountGroup)] = "0";  // attributes may not choose it
  VolumeCapability cap = MountCap();
  cap.mutable_mount()->set_volume_mount_group("2000");
  ASSERT_TRUE(Stage(id, ctx, cap).ok());
  auto calls = agent_->mount_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].context[std::string(kCtxMountGroup)], "2000");
  ASSERT_TRUE(Unstage(id).ok());

  ASSERT_TRUE(Stage(id, ctx).ok());  // no fsGroup: none, whatever the attributes say
  calls = agent_->mount_calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[1].context.contains(std::string(kCtxMountGroup)));
  ASSERT_TRUE(Unstage(id).ok());

  cap.mutable_mount()->set_volume_mount_group("staff");
  grpc::Status bad = Stage(id, ctx, cap);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("volume_mount_group"), std::string::npos)
      << bad.error_message();
}

}  // namespace
}  // namespace spoke::node
