// The real ControllerServer with LibnfsExportAdmin against a real nfs-ganesha (TestHub),
// checked on the export directory itself; a blackholed and a stopped hub; and the real
// spoke-csi-controller binary over its unix socket.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nfsc/libnfs.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/csi_identity.h"
#include "csi-controller/controller_server.h"
#include "csi-controller/libnfs_export_admin.h"
#include "csi-controller/nfs4_export_admin.h"
#include "tests/support/hub.h"

namespace spoke::controller {
namespace {

using spoke::testing::Blackhole;

namespace fs = std::filesystem;
using csi::v1::VolumeCapability;
using AM = VolumeCapability::AccessMode;
using spoke::testing::TestHub;

// The test's own writes behind the controller: as root, like an admin on the hub.
const HubIdentityParams kRoot = [] {
  HubIdentityParams i;
  i.allow_root = true;
  return i;
}();

csi::v1::CreateVolumeRequest Req(const HubAddress& hub, const std::string& name,
                                 const std::string& mode, const std::string& on_delete = "",
                                 const std::string& sub_dir = "") {
  csi::v1::CreateVolumeRequest req;
  req.set_name(name);
  auto& p = *req.mutable_parameters();
  p["server"] = hub.server;
  p["share"] = hub.share;
  p["nfsPort"] = std::to_string(hub.nfs_port);
  if (hub.nfs_version == NfsVersion::kV41) {
    p["nfsVersion"] = "4.1";
  } else {
    p["mountPort"] = std::to_string(hub.mount_port);
  }
  p["mode"] = mode;
  p["hubTimeoutSeconds"] = "2";
  if (!on_delete.empty()) p["onDelete"] = on_delete;
  if (!sub_dir.empty()) p["subDir"] = sub_dir;
  auto* cap = req.add_volume_capabilities();
  cap->mutable_mount();
  cap->mutable_access_mode()->set_mode(mode == "dataset" ? AM::MULTI_NODE_READER_ONLY
                                                         : AM::MULTI_NODE_MULTI_WRITER);
  req.mutable_capacity_range()->set_required_bytes(1 << 30);
  return req;
}

class ControllerIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    hub_ = TestHub::Start().release();
    // A shared scratch export: anyone may make a directory, as on a real hub. The controller
    // provisions as hubUid/hubGid (nobody by default), never as root.
    if (hub_) fs::permissions(hub_->export_dir(), fs::perms::all | fs::perms::sticky_bit);
  }
  static void TearDownTestSuite() {
    delete hub_;
    hub_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(hub_, nullptr) << "nfs-ganesha did not start";
    ControllerConfig config;
    config.hub_timeout_seconds = 2;
    // As spoke-csi-controller: NFSv3 hubs through libnfs, v4.1 hubs through the v4.1 client.
    server_ = std::make_unique<ControllerServer>(
        config, std::make_unique<ExportAdminByVersion>(std::make_unique<LibnfsExportAdmin>(),
                                                       std::make_unique<Nfs4ExportAdmin>()));
  }

  // Writes a nested tree into the volume through NFS (writing behind ganesha's back would
  // leave its metadata cache stale).
  void Populate(const std::string& path) {
    LibnfsExportAdmin admin;
    // As the volume's default identity (nobody), like a job squashed to it.
    auto session = admin.Open(hub_->address(), std::chrono::seconds(5), HubIdentityParams{});
    ASSERT_TRUE(session) << session.error().message();
    ASSERT_TRUE((*session)->MakeDirs(path + "/a/b/c", 0755));
    ASSERT_TRUE((*session)->WriteFile(path + "/top.txt", "top"));
    ASSERT_TRUE((*session)->WriteFile(path + "/a/b/c/deep.bin", std::string(100000, 'x')));
  }

  grpc::Status Create(const csi::v1::CreateVolumeRequest& req, csi::v1::CreateVolumeResponse* r) {
    return server_->CreateVolume(nullptr, &req, r);
  }
  grpc::Status Delete(const std::string& id) {
    csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return server_->DeleteVolume(nullptr, &req, &resp);
  }
  std::string Export() const { return hub_->export_dir(); }

  static TestHub* hub_;
  std::unique_ptr<ControllerServer> server_;
};
TestHub* ControllerIntegrationTest::hub_ = nullptr;

TEST_F(ControllerIntegrationTest, ScratchDeleteRemovesNestedTree) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(Req(hub_->address(), "pv-del", "scratch", "delete"), &resp).ok());
  ASSERT_TRUE(fs::is_directory(Export() + "/pv-del"));
  EXPECT_TRUE(fs::exists(Export() + "/pv-del/.spoke-volume.json"));
  EXPECT_EQ(fs::status(Export() + "/pv-del").permissions(), fs::perms::all);  // 0777
  // Provisioned as hubUid/hubGid (default nobody), not as root.
  struct stat st;
  ASSERT_EQ(::stat((Export() + "/pv-del").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  Populate("pv-del");
  ASSERT_TRUE(fs::exists(Export() + "/pv-del/a/b/c/deep.bin"));
  // Same request again: same volume.
  csi::v1::CreateVolumeResponse again;
  ASSERT_TRUE(Create(Req(hub_->address(), "pv-del", "scratch", "delete"), &again).ok());
  EXPECT_EQ(again.volume().volume_id(), resp.volume().volume_id());

  auto s = Delete(resp.volume().volume_id());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/pv-del"));
  EXPECT_TRUE(Delete(resp.volume().volume_id()).ok());  // idempotent
}

// A pod running as uid 1000 filled the volume (its files and directories are its own, 0755
// and 0555): deleting the volume removes all of it, without root (the controller
// removes each entry as the owner of its directory). Before, DeleteVolume failed with EACCES
// for good and the PV stayed Released.
TEST_F(ControllerIntegrationTest, ScratchDeleteRemovesWhatANonRootPodWrote) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(Req(hub_->address(), "pv-uid1000", "scratch", "delete"), &resp).ok());
  {
    LibnfsExportAdmin admin;
    HubIdentityParams pod;
    pod.uid = 1000;
    pod.gid = 1000;
    auto session = admin.Open(hub_->address(), std::chrono::seconds(5), pod);
    ASSERT_TRUE(session) << session.error().message();
    ASSERT_TRUE((*session)->MakeDirs("pv-uid1000/out/ckpt", 0755));
    ASSERT_TRUE((*session)->WriteFile("pv-uid1000/out/f1", "one"));
    ASSERT_TRUE((*session)->WriteFile("pv-uid1000/out/ckpt/step.pt", "weights"));
    ASSERT_TRUE((*session)->MakeDirs("pv-uid1000/frozen", 0755));
    ASSERT_TRUE((*session)->WriteFile("pv-uid1000/frozen/kept", "x"));
    ASSERT_TRUE((*session)->MakeDir("pv-uid1000/frozen/ro", 0555));
  }
  struct stat st;
  ASSERT_EQ(::stat((Export() + "/pv-uid1000/out/ckpt/step.pt").c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, 1000u);
  auto s = Delete(resp.volume().volume_id());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/pv-uid1000"));
}

// A hub reached over NFSv4.1 only (as Amazon EFS): the same provisioning, as hubUid/hubGid;
// the id names the protocol, and DeleteVolume removes what a uid-1000 pod wrote, over v4.1.
TEST_F(ControllerIntegrationTest, Nfs41HubProvisionsAndDeletesScratchVolumes) {
  const HubAddress v41 = hub_->address(NfsVersion::kV41);
  csi::v1::CreateVolumeResponse resp;
  auto created = Create(Req(v41, "pv-v41", "scratch", "delete"), &resp);
  ASSERT_TRUE(created.ok()) << created.error_message();
  EXPECT_NE(resp.volume().volume_id().find("|nfs4.1|"), std::string::npos)
      << resp.volume().volume_id();
  EXPECT_EQ(resp.volume().volume_context().at("nfsVersion"), "4.1");
  ASSERT_TRUE(fs::is_directory(Export() + "/pv-v41"));
  EXPECT_TRUE(fs::exists(Export() + "/pv-v41/.spoke-volume.json"));
  EXPECT_EQ(fs::status(Export() + "/pv-v41").permissions(), fs::perms::all);
  struct stat st;
  ASSERT_EQ(::stat((Export() + "/pv-v41").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  {
    Nfs4ExportAdmin admin;
    HubIdentityParams pod;
    pod.uid = 1000;
    pod.gid = 1000;
    auto session = admin.Open(v41, std::chrono::seconds(5), pod);
    ASSERT_TRUE(session) << session.error().message();
    ASSERT_TRUE((*session)->MakeDirs("pv-v41/out/ckpt", 0755));
    ASSERT_TRUE((*session)->WriteFile("pv-v41/out/ckpt/step.pt", "weights"));
    ASSERT_TRUE((*session)->MakeDir("pv-v41/out/ro", 0555));
    auto back = (*session)->ReadFile("pv-v41/out/ckpt/step.pt", 100);
    ASSERT_TRUE(back) << back.error().message();
    EXPECT_EQ(*back, "weights");
  }
  ASSERT_EQ(::stat((Export() + "/pv-v41/out/ckpt/step.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  csi::v1::CreateVolumeResponse again;
  ASSERT_TRUE(Create(Req(v41, "pv-v41", "scratch", "delete"), &again).ok());
  EXPECT_EQ(again.volume().volume_id(), resp.volume().volume_id());
  auto s = Delete(resp.volume().volume_id());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/pv-v41"));
  EXPECT_TRUE(Delete(resp.volume().volume_id()).ok());  // idempotent
}

// rm -r unlinks symlinks and never follows them out of the volume.
TEST_F(ControllerIntegrationTest, ScratchDeleteDoesNotFollowSymlinks) {
  {
    LibnfsExportAdmin admin;
    auto session = admin.Open(hub_->address(), std::chrono::seconds(5), kRoot);
    ASSERT_TRUE(session);
    ASSERT_TRUE((*session)->MakeDirs("outside/keep", 0755));
    ASSERT_TRUE((*session)->WriteFile("outside/keep/file", "precious"));
  }
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(Req(hub_->address(), "pv-sym", "scratch", "delete"), &resp).ok());
  nfs_context* nfs = nfs_init_context();
  nfs_set_timeout(nfs, 5000);
  nfs_url* url = nfs_parse_url_dir(nfs, hub_->address().NfsUrl().c_str());
  ASSERT_NE(url, nullptr);
  ASSERT_EQ(nfs_mount(nfs, url->server, url->path), 0) << nfs_get_error(nfs);
  nfs_destroy_url(url);
  EXPECT_EQ(nfs_symlink(nfs, "../outside", "/pv-sym/rel-link"), 0) << nfs_get_error(nfs);
  EXPECT_EQ(nfs_symlink(nfs, (Export() + "/outside").c_str(), "/pv-sym/abs-link"), 0);
  nfs_destroy_context(nfs);
  ASSERT_TRUE(fs::is_symlink(Export() + "/pv-sym/rel-link"));

  auto s = Delete(resp.volume().volume_id());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/pv-sym"));
  EXPECT_TRUE(fs::exists(Export() + "/outside/keep/file"));
}

TEST_F(ControllerIntegrationTest, ScratchRetainKeepsTree) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(Req(hub_->address(), "pv-ret", "scratch", "retain"), &resp).ok());
  Populate("pv-ret");
  ASSERT_TRUE(Delete(resp.volume().volume_id()).ok());
  EXPECT_TRUE(fs::exists(Export() + "/pv-ret/a/b/c/deep.bin"));
  EXPECT_TRUE(fs::exists(Export() + "/pv-ret/top.txt"));
}

TEST_F(ControllerIntegrationTest, ScratchArchiveRenamesInSameParent) {
  csi::v1::CreateVolumeResponse resp;
  auto req = Req(hub_->address(), "pv-arc", "scratch", "archive", "team/${pv.metadata.name}");
  auto s = Create(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(fs::is_directory(Export() + "/team/pv-arc"));
  Populate("team/pv-arc");
  s = Delete(resp.volume().volume_id());
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/team/pv-arc"));
  std::vector<std::string> archived;
  for (const auto& e : fs::directory_iterator(Export() + "/team")) {
    archived.push_back(e.path().filename().string());
  }
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_TRUE(archived[0].starts_with("archived-pv-arc-")) << archived[0];
  EXPECT_TRUE(fs::exists(Export() + "/team/" + archived[0] + "/a/b/c/deep.bin"));
  EXPECT_TRUE(Delete(resp.volume().volume_id()).ok());  // idempotent
}

TEST_F(ControllerIntegrationTest, DatasetExistingAndMissing) {
  {
    LibnfsExportAdmin admin;
    auto session = admin.Open(hub_->address(), std::chrono::seconds(5), kRoot);
    ASSERT_TRUE(session);
    ASSERT_TRUE((*session)->MakeDirs("datasets/imagenet", 0755));
    ASSERT_TRUE((*session)->WriteFile("datasets/imagenet/shard-0", "data"));
  }
  csi::v1::CreateVolumeResponse resp;
  auto s = Create(Req(hub_->address(), "ds", "dataset", "", "datasets/imagenet"), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.volume().volume_context().at("path"), "datasets/imagenet");
  EXPECT_FALSE(fs::exists(Export() + "/datasets/imagenet/.spoke-volume.json"));
  ASSERT_TRUE(Delete(resp.volume().volume_id()).ok());
  EXPECT_TRUE(fs::exists(Export() + "/datasets/imagenet/shard-0"));

  csi::v1::CreateVolumeResponse missing;
  s = Create(Req(hub_->address(), "ds2", "dataset", "", "datasets/nope"), &missing);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_FALSE(fs::exists(Export() + "/datasets/nope"));
}

TEST_F(ControllerIntegrationTest, GetCapacityFromFsstat) {
  csi::v1::GetCapacityRequest req;
  *req.mutable_parameters() = Req(hub_->address(), "x", "scratch").parameters();
  csi::v1::GetCapacityResponse resp;
  auto s = server_->GetCapacity(nullptr, &req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(resp.available_capacity(), 0);
}

TEST_F(ControllerIntegrationTest, ShareNotExportedIsFailedPrecondition) {
  HubAddress wrong = hub_->address();
  wrong.share = "/not/exported";
  csi::v1::CreateVolumeResponse resp;
  auto s = Create(Req(wrong, "pv-x", "scratch"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
}

TEST_F(ControllerIntegrationTest, BlackholedHubIsUnavailableWithinBound) {
  Blackhole hole;
  HubAddress dead{"127.0.0.1", hole.port(), hole.port(), "/srv/export"};
  auto start = std::chrono::steady_clock::now();
  csi::v1::CreateVolumeResponse resp;
  auto s = Create(Req(dead, "pv-dead", "scratch"), &resp);  // hubTimeoutSeconds=2
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("did not answer within 2s"), std::string::npos)
      << s.error_message();
  EXPECT_LT(took, std::chrono::seconds(30));  // no hang (not a speed assertion)

  csi::v1::GetCapacityRequest creq;
  *creq.mutable_parameters() = Req(dead, "x", "scratch").parameters();
  csi::v1::GetCapacityResponse cresp;
  EXPECT_EQ(server_->GetCapacity(nullptr, &creq, &cresp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  VolumeId id{dead, VolumeMode::kScratch, OnDelete::kDelete, "pv-dead"};
  EXPECT_EQ(Delete(id.Encode()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ControllerIntegrationTest, StoppedHubIsUnavailableThenRecovers) {
  csi::v1::CreateVolumeResponse resp;
  hub_->Stop();
  auto start = std::chrono::steady_clock::now();
  auto s = Create(Req(hub_->address(), "pv-outage", "scratch"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_TRUE(hub_->Restart());
  s = Create(Req(hub_->address(), "pv-outage", "scratch"), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(Delete(resp.volume().volume_id()).ok());
  EXPECT_FALSE(fs::exists(Export() + "/pv-outage"));
}

// The real binary over its unix socket: Identity, Create, Delete, clean SIGTERM.
TEST_F(ControllerIntegrationTest, BinaryServesOverUnixSocket) {
  spoke::testing::TempDir dir("spoke-ctl-bin");
  std::string sock = dir.path() + "/csi.sock";
  std::string bin = spoke::testing::BinaryDir() + "/csi-controller/spoke-csi-controller";
  std::string endpoint = "unix://" + sock;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(bin.c_str(), bin.c_str(), "--endpoint", endpoint.c_str(), "--log-level", "debug",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 100 && !fs::exists(sock); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  auto identity = csi::v1::Identity::NewStub(channel);
  auto controller = csi::v1::Controller::NewStub(channel);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    csi::v1::GetPluginInfoRequest req;
    csi::v1::GetPluginInfoResponse resp;
    auto s = identity->GetPluginInfo(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.name(), "spoke.csi.dev");
  }
  csi::v1::CreateVolumeResponse created;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto s = controller->CreateVolume(&ctx, Req(hub_->address(), "pv-bin", "scratch"), &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(fs::is_directory(Export() + "/pv-bin"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(created.volume().volume_id());
    csi::v1::DeleteVolumeResponse resp;
    auto s = controller->DeleteVolume(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(fs::exists(Export() + "/pv-bin"));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(fs::exists(sock));  // removed on clean shutdown
}

}  // namespace
}  // namespace spoke::controller
