// ControllerServer and IdentityServer against the in-memory FakeExportAdmin.
#include "csi-controller/controller_server.h"

#include <gtest/gtest.h>

#include "common/csi_identity.h"
#include "common/version.h"
#include "csi-controller/volume_record.h"
#include "tests/csi-controller/fake_export_admin.h"

namespace spoke::controller {
namespace {

using csi::v1::VolumeCapability;
using testing::FakeExportAdmin;
using testing::FakeTree;
using AM = VolumeCapability::AccessMode;

VolumeCapability MountCap(AM::Mode mode) {
  VolumeCapability c;
  c.mutable_mount();
  c.mutable_access_mode()->set_mode(mode);
  return c;
}

class ControllerServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tree_ = std::make_shared<FakeTree>();
    tree_->AddDir("");
    auto admin = std::make_unique<FakeExportAdmin>(tree_);
    admin_ = admin.get();
    ControllerConfig config;
    config.hub_timeout_seconds = 7;
    server_ = std::make_unique<ControllerServer>(config, std::move(admin), [this] { return now_; });
  }

  csi::v1::CreateVolumeRequest ScratchReq(const std::string& name, std::string on_delete = "") {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    auto& p = *req.mutable_parameters();
    p["server"] = "10.0.0.1";
    p["share"] = "/srv/export";
    p["mode"] = "scratch";
    if (!on_delete.empty()) p["onDelete"] = on_delete;
    *req.add_volume_capabilities() = MountCap(AM::MULTI_NODE_MULTI_WRITER);
    req.mutable_capacity_range()->set_required_bytes(1 << 30);
    return req;
  }

  csi::v1::CreateVolumeRequest DatasetReq(const std::string& name, const std::string& dir) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    auto& p = *req.mutable_parameters();
    p["server"] = "10.0.0.1";
    p["share"] = "/srv/export";
    p["mode"] = "dataset";
    p["subDir"] = dir;
    *req.add_volume_capabilities() = MountCap(AM::MULTI_NODE_READER_ONLY);
    return req;
  }

  grpc::Status Create(const csi::v1::CreateVolumeRequest& req,
                      csi::v1::CreateVolumeResponse* resp = nullptr) {
    csi::v1::CreateVolumeResponse local;
    return server_->CreateVolume(nullptr, &req, resp ? resp : &local);
  }

  grpc::Status Delete(const std::string& id) {
    csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return server_->DeleteVolume(nullptr, &req, &resp);
  }

  std::shared_ptr<FakeTree> tree_;
  FakeExportAdmin* admin_ = nullptr;
  std::chrono::system_clock::time_point now_ =
      std::chrono::system_clock::from_time_t(1767225600);  // 2026-01-01T00:00:00Z
  std::unique_ptr<ControllerServer> server_;
};

TEST_F(ControllerServerTest, ScratchCreatesDirectoryWithRecordAndContext) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(ScratchReq("pv-1"), &resp).ok());
  EXPECT_TRUE(tree_->IsDir("pv-1"));
  auto record = VolumeRecord::Decode(tree_->Data("pv-1/.spoke-volume.json"));
  ASSERT_TRUE(record) << record.error().message();
  EXPECT_EQ(record->name, "pv-1");
  EXPECT_EQ(record->volume_id, resp.volume().volume_id());
  EXPECT_EQ(record->capacity_bytes, 1 << 30);
  EXPECT_EQ(resp.volume().capacity_bytes(), 1 << 30);
  auto id = VolumeId::Decode(resp.volume().volume_id());
  ASSERT_TRUE(id);
  EXPECT_EQ(id->path, "pv-1");
  EXPECT_EQ(id->mode, VolumeMode::kScratch);
  const auto& ctx = resp.volume().volume_context();
  EXPECT_EQ(ctx.at("path"), "pv-1");
  EXPECT_EQ(ctx.at("mode"), "scratch");
  // The controller's default bound reaches the node through the context.
  EXPECT_EQ(ctx.at("hubTimeoutSeconds"), "7");
  EXPECT_EQ(admin_->last_timeout(), std::chrono::seconds(7));
}

TEST_F(ControllerServerTest, StorageClassHubTimeoutOverridesDefault) {
  auto req = ScratchReq("pv-1");
  (*req.mutable_parameters())["hubTimeoutSeconds"] = "3";
  ASSERT_TRUE(Create(req).ok());
  EXPECT_EQ(admin_->last_timeout(), std::chrono::seconds(3));
}

TEST_F(ControllerServerTest, SubDirTemplateUsesProvisionerMetadata) {
  auto req = ScratchReq("pv-1");
  auto& p = *req.mutable_parameters();
  p["subDir"] = "teams/${pvc.metadata.namespace}/${pvc.metadata.name}";
  p["csi.storage.k8s.io/pvc/name"] = "data";
  p["csi.storage.k8s.io/pvc/namespace"] = "ml";
  ASSERT_TRUE(Create(req).ok());
  EXPECT_TRUE(tree_->IsDir("teams/ml/data"));
  EXPECT_TRUE(tree_->Exists("teams/ml/data/.spoke-volume.json"));
}

TEST_F(ControllerServerTest, SameNameSameRequestIsIdempotentAcrossRestart) {
  csi::v1::CreateVolumeResponse first, second;
  ASSERT_TRUE(Create(ScratchReq("pv-1"), &first).ok());
  tree_->AddFile("pv-1/user-data", "x");  // the pod wrote something meanwhile
  // A new controller (restart): nothing in memory, only the record on the hub.
  server_ = std::make_unique<ControllerServer>(
      ControllerConfig{}, std::make_unique<FakeExportAdmin>(tree_), [this] { return now_; });
  auto req = ScratchReq("pv-1");
  (*req.mutable_parameters())["hubTimeoutSeconds"] = "";  // still "not given"
  ASSERT_TRUE(Create(ScratchReq("pv-1"), &second).ok());
  EXPECT_EQ(first.volume().volume_id(), second.volume().volume_id());
  EXPECT_EQ(tree_->Data("pv-1/user-data"), "x");
}

TEST_F(ControllerServerTest, SameNameOtherParametersIsAlreadyExistsAcrossRestart) {
  ASSERT_TRUE(Create(ScratchReq("pv-1")).ok());
  server_ = std::make_unique<ControllerServer>(
      ControllerConfig{}, std::make_unique<FakeExportAdmin>(tree_), [this] { return now_; });
  auto req = ScratchReq("pv-1");
  (*req.mutable_parameters())["consistency"] = "ttl";
  auto s = Create(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("consistency"), std::string::npos) << s.error_message();
}

TEST_F(ControllerServerTest, SameNameLargerCapacityIsAlreadyExists) {
  auto req = ScratchReq("pv-1");
  req.mutable_capacity_range()->set_limit_bytes(1 << 30);
  ASSERT_TRUE(Create(req).ok());
  req.mutable_capacity_range()->set_required_bytes(2ll << 30);
  req.mutable_capacity_range()->set_limit_bytes(2ll << 30);
  EXPECT_EQ(Create(req).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // Also after a restart, from the record.
  server_ = std::make_unique<ControllerServer>(
      ControllerConfig{}, std::make_unique<FakeExportAdmin>(tree_), [this] { return now_; });
  EXPECT_EQ(Create(req).error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(ControllerServerTest, SameNameOtherSubDirIsAlreadyExistsInProcess) {
  ASSERT_TRUE(Create(ScratchReq("pv-1")).ok());
  auto req = ScratchReq("pv-1");
  (*req.mutable_parameters())["subDir"] = "elsewhere/${pv.metadata.name}";
  EXPECT_EQ(Create(req).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_FALSE(tree_->Exists("elsewhere"));
}

TEST_F(ControllerServerTest, DirectoryOfAnotherVolumeIsNotTaken) {
  auto a = ScratchReq("pv-a");
  (*a.mutable_parameters())["subDir"] = "shared";
  ASSERT_TRUE(Create(a).ok());
  auto b = ScratchReq("pv-b");
  (*b.mutable_parameters())["subDir"] = "shared";
  auto s = Create(b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("pv-a"), std::string::npos) << s.error_message();
}

TEST_F(ControllerServerTest, ForeignNonEmptyDirectoryIsNotAdopted) {
  tree_->AddDir("pv-1");
  tree_->AddFile("pv-1/precious", "data");
  EXPECT_EQ(Create(ScratchReq("pv-1")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(tree_->Exists("pv-1/.spoke-volume.json"));
}

TEST_F(ControllerServerTest, EmptyDirectoryWithoutRecordIsAdopted) {
  tree_->AddDir("pv-1");  // a Create that stopped before writing its record
  ASSERT_TRUE(Create(ScratchReq("pv-1")).ok());
  EXPECT_TRUE(tree_->Exists("pv-1/.spoke-volume.json"));
}

TEST_F(ControllerServerTest, ArgumentErrorsNameTheField) {
  auto no_name = ScratchReq("");
  auto s = Create(no_name);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("name"), std::string::npos);

  auto no_caps = ScratchReq("pv-1");
  no_caps.clear_volume_capabilities();
  s = Create(no_caps);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("volume_capabilities"), std::string::npos);

  auto block = ScratchReq("pv-1");
  block.mutable_volume_capabilities(0)->mutable_block();
  s = Create(block);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("block"), std::string::npos);

  auto bad_param = ScratchReq("pv-1");
  (*bad_param.mutable_parameters())["nfsPort"] = "70000";
  s = Create(bad_param);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nfsPort"), std::string::npos);

  auto escape = ScratchReq("pv-1");
  (*escape.mutable_parameters())["subDir"] = "../outside";
  s = Create(escape);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("subDir"), std::string::npos);

  auto slash_name = ScratchReq("a/../../b");  // the PV name lands in subDir
  EXPECT_EQ(Create(slash_name).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  auto bad_range = ScratchReq("pv-1");
  bad_range.mutable_capacity_range()->set_limit_bytes(1);
  EXPECT_EQ(Create(bad_range).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(tree_->Paths().size(), 0u);  // nothing was created by any of these
}

TEST_F(ControllerServerTest, DatasetIsReadOnlyAndMustExist) {
  tree_->AddDir("imagenet");
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(DatasetReq("ds", "imagenet"), &resp).ok());
  EXPECT_EQ(resp.volume().volume_context().at("mode"), "dataset");
  EXPECT_FALSE(tree_->Exists("imagenet/.spoke-volume.json"));  // nothing written

  auto rw = DatasetReq("ds-rw", "imagenet");
  rw.mutable_volume_capabilities(0)->mutable_access_mode()->set_mode(AM::SINGLE_NODE_WRITER);
  auto s = Create(rw);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("read-only"), std::string::npos);

  auto missing = Create(DatasetReq("ds2", "nope"));
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(missing.error_message().find("does not exist"), std::string::npos);
  EXPECT_FALSE(tree_->Exists("nope"));

  // Delete never touches the dataset.
  ASSERT_TRUE(Delete(resp.volume().volume_id()).ok());
  EXPECT_TRUE(tree_->IsDir("imagenet"));
}

TEST_F(ControllerServerTest, DeleteHonoursOnDelete) {
  csi::v1::CreateVolumeResponse del, ret, arc;
  ASSERT_TRUE(Create(ScratchReq("pv-del", "delete"), &del).ok());
  ASSERT_TRUE(Create(ScratchReq("pv-ret", "retain"), &ret).ok());
  ASSERT_TRUE(Create(ScratchReq("pv-arc", "archive"), &arc).ok());
  for (auto* v : {"pv-del", "pv-ret", "pv-arc"}) {
    tree_->AddDir(std::string(v) + "/sub");
    tree_->AddFile(std::string(v) + "/sub/file", "x");
  }
  ASSERT_TRUE(Delete(del.volume().volume_id()).ok());
  EXPECT_FALSE(tree_->Exists("pv-del"));
  ASSERT_TRUE(Delete(ret.volume().volume_id()).ok());
  EXPECT_TRUE(tree_->Exists("pv-ret/sub/file"));
  ASSERT_TRUE(Delete(arc.volume().volume_id()).ok());
  EXPECT_FALSE(tree_->Exists("pv-arc"));
  EXPECT_EQ(tree_->Data("archived-pv-arc-20260101T000000Z/sub/file"), "x");
  // Idempotent: already gone is OK.
  EXPECT_TRUE(Delete(del.volume().volume_id()).ok());
  EXPECT_TRUE(Delete(arc.volume().volume_id()).ok());
}

// Provisioning goes to the hub as hubUid/hubGid (nobody by default), root only with
// allowRoot; the id carries the identity so that DeleteVolume uses the same one.
TEST_F(ControllerServerTest, HubRequestsUseTheStorageClassIdentity) {
  csi::v1::CreateVolumeResponse def, fixed, root;
  ASSERT_TRUE(Create(ScratchReq("pv-def"), &def).ok());
  EXPECT_FALSE(admin_->last_identity().allow_root);
  EXPECT_EQ(admin_->last_identity().uid, 65534u);
  EXPECT_EQ(def.volume().volume_context().at("allowRoot"), "false");

  auto req = ScratchReq("pv-fixed");
  (*req.mutable_parameters())["hubUid"] = "2000";
  (*req.mutable_parameters())["hubGid"] = "3000";
  ASSERT_TRUE(Create(req, &fixed).ok());
  EXPECT_EQ(admin_->last_identity().uid, 2000u);
  EXPECT_EQ(admin_->last_identity().gid, 3000u);
  EXPECT_EQ(fixed.volume().volume_context().at("hubUid"), "2000");
  ASSERT_TRUE(Create(ScratchReq("pv-def"), &def).ok());  // another Open in between
  ASSERT_TRUE(Delete(fixed.volume().volume_id()).ok());
  EXPECT_EQ(admin_->last_identity().uid, 2000u);
  EXPECT_EQ(admin_->last_identity().gid, 3000u);

  req = ScratchReq("pv-root");
  (*req.mutable_parameters())["hubUid"] = "0";
  auto s = Create(req, &root);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("allowRoot"), std::string::npos) << s.error_message();
  (*req.mutable_parameters())["allowRoot"] = "true";
  ASSERT_TRUE(Create(req, &root).ok());
  EXPECT_TRUE(admin_->last_identity().allow_root);
  auto id = VolumeId::Decode(root.volume().volume_id());
  ASSERT_TRUE(id) << id.error().message();
  EXPECT_TRUE(id->identity.allow_root);
}

TEST_F(ControllerServerTest, DeleteRefusesDirectoryThatIsNotProvablyOurs) {
  VolumeId id{HubAddress{"10.0.0.1", 2049, 0, "/srv/export"}, VolumeMode::kScratch,
              OnDelete::kDelete, "someone"};
  tree_->AddDir("someone");
  tree_->AddFile("someone/precious", "data");
  EXPECT_EQ(Delete(id.Encode()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(tree_->Exists("someone/precious"));
  // An empty directory (a half-done Create or Delete) goes.
  tree_->AddDir("empty");
  id.path = "empty";
  EXPECT_TRUE(Delete(id.Encode()).ok());
  EXPECT_FALSE(tree_->Exists("empty"));
}

TEST_F(ControllerServerTest, DeleteOfMalformedOrMissingIdIsOk) {
  EXPECT_EQ(Delete("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Delete("fake-vol-id").ok());
  VolumeId id{HubAddress{"10.0.0.1", 2049, 0, "/srv/export"}, VolumeMode::kScratch,
              OnDelete::kDelete, "never-made"};
  EXPECT_TRUE(Delete(id.Encode()).ok());
}

TEST_F(ControllerServerTest, HubDownIsUnavailable) {
  tree_->unavailable = true;
  auto s = Create(ScratchReq("pv-1"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("10.0.0.1"), std::string::npos) << s.error_message();
  VolumeId id{HubAddress{"10.0.0.1", 2049, 0, "/srv/export"}, VolumeMode::kScratch,
              OnDelete::kDelete, "pv-1"};
  EXPECT_EQ(Delete(id.Encode()).error_code(), grpc::StatusCode::UNAVAILABLE);
  csi::v1::GetCapacityRequest creq;
  (*creq.mutable_parameters()) = ScratchReq("x").parameters();
  csi::v1::GetCapacityResponse cresp;
  EXPECT_EQ(server_->GetCapacity(nullptr, &creq, &cresp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ControllerServerTest, ShareRefusedIsFailedPrecondition) {
  tree_->refuse_share = true;
  EXPECT_EQ(Create(ScratchReq("pv-1")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ControllerServerTest, ValidateVolumeCapabilities) {
  tree_->AddDir("imagenet");
  csi::v1::CreateVolumeResponse ds, sc;
  ASSERT_TRUE(Create(DatasetReq("ds", "imagenet"), &ds).ok());
  ASSERT_TRUE(Create(ScratchReq("pv-1"), &sc).ok());
  auto validate = [&](const std::string& id, AM::Mode mode,
                      csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
    csi::v1::ValidateVolumeCapabilitiesRequest req;
    req.set_volume_id(id);
    *req.add_volume_capabilities() = MountCap(mode);
    return server_->ValidateVolumeCapabilities(nullptr, &req, resp);
  };
  csi::v1::ValidateVolumeCapabilitiesResponse r1, r2, r3, r4, r5;
  ASSERT_TRUE(validate(ds.volume().volume_id(), AM::MULTI_NODE_READER_ONLY, &r1).ok());
  EXPECT_TRUE(r1.has_confirmed());
  ASSERT_TRUE(validate(ds.volume().volume_id(), AM::MULTI_NODE_MULTI_WRITER, &r2).ok());
  EXPECT_FALSE(r2.has_confirmed());
  EXPECT_NE(r2.message().find("read-only"), std::string::npos);
  ASSERT_TRUE(validate(sc.volume().volume_id(), AM::MULTI_NODE_MULTI_WRITER, &r3).ok());
  EXPECT_TRUE(r3.has_confirmed());
  EXPECT_EQ(validate("fake-vol-id-123", AM::SINGLE_NODE_WRITER, &r4).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Delete(sc.volume().volume_id()).ok());
  EXPECT_EQ(validate(sc.volume().volume_id(), AM::SINGLE_NODE_WRITER, &r5).error_code(),
            grpc::StatusCode::NOT_FOUND);
  csi::v1::ValidateVolumeCapabilitiesRequest no_caps;
  no_caps.set_volume_id(ds.volume().volume_id());
  EXPECT_EQ(server_->ValidateVolumeCapabilities(nullptr, &no_caps, &r5).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControllerServerTest, CapabilitiesAndCapacity) {
  csi::v1::ControllerGetCapabilitiesRequest req;
  csi::v1::ControllerGetCapabilitiesResponse resp;
  ASSERT_TRUE(server_->ControllerGetCapabilities(nullptr, &req, &resp).ok());
  std::set<int> types;
  for (const auto& c : resp.capabilities()) types.insert(c.rpc().type());
  EXPECT_EQ(types, (std::set<int>{csi::v1::ControllerServiceCapability::RPC::CREATE_DELETE_VOLUME,
                                  csi::v1::ControllerServiceCapability::RPC::GET_CAPACITY}));

  csi::v1::GetCapacityRequest creq;
  *creq.mutable_parameters() = ScratchReq("x").parameters();
  csi::v1::GetCapacityResponse cresp;
  ASSERT_TRUE(server_->GetCapacity(nullptr, &creq, &cresp).ok());
  EXPECT_EQ(cresp.available_capacity(), static_cast<int64_t>(5ull << 30));
  (*creq.mutable_parameters())["mode"] = "bogus";
  auto s = server_->GetCapacity(nullptr, &creq, &cresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("mode"), std::string::npos);
  csi::v1::GetCapacityRequest empty;
  ASSERT_TRUE(server_->GetCapacity(nullptr, &empty, &cresp).ok());
  EXPECT_EQ(cresp.available_capacity(), 0);
}

TEST(IdentityServerTest, NameVersionCapabilitiesProbe) {
  IdentityServer identity;
  csi::v1::GetPluginInfoRequest ireq;
  csi::v1::GetPluginInfoResponse iresp;
  ASSERT_TRUE(identity.GetPluginInfo(nullptr, &ireq, &iresp).ok());
  EXPECT_EQ(iresp.name(), "spoke.csi.dev");
  EXPECT_EQ(iresp.vendor_version(), std::string(Version()));
  csi::v1::GetPluginCapabilitiesRequest creq;
  csi::v1::GetPluginCapabilitiesResponse cresp;
  ASSERT_TRUE(identity.GetPluginCapabilities(nullptr, &creq, &cresp).ok());
  ASSERT_EQ(cresp.capabilities_size(), 1);
  EXPECT_EQ(cresp.capabilities(0).service().type(),
            csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
  csi::v1::ProbeRequest preq;
  csi::v1::ProbeResponse presp;
  ASSERT_TRUE(identity.Probe(nullptr, &preq, &presp).ok());
  EXPECT_TRUE(presp.ready().value());
}

}  // namespace
}  // namespace spoke::controller
