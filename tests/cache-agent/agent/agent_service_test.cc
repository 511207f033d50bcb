// AgentService over a real unix socket with a real gRPC client, MountManager on fakes.
#include "cache-agent/agent/agent_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cache-agent/agent/http_server.h"
#include "common/grpc_server.h"
#include "tests/cache-agent/agent/fakes.h"
#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

using testing::DatasetContext;
using testing::DatasetId;
namespace v1 = spoke::agent::v1;

class AgentServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = std::make_shared<testing::FakeWorld>();
    mounter_ = std::make_unique<testing::FakeMounter>(world_, host_);
    MountManager::Options o;
    o.state_file = dir_.path() + "/mounts.json";
    manager_ = std::make_unique<MountManager>(*mounter_, host_, registry_, o);
    ASSERT_TRUE(manager_->Start());
    AgentService::Options so;
    so.cache_capacity_bytes = 10ull << 30;
    so.block_size = 1 << 20;
    so.progress_interval = std::chrono::milliseconds(0);
    service_ = std::make_unique<AgentService>(*manager_, so);
    GrpcServerOptions go;
    socket_ = dir_.path() + "/agent.sock";
    go.endpoint = "unix://" + socket_;
    go.socket_mode = 0600;
    auto server = StartGrpcServer(go, {service_.get()});
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    stub_ = v1::Agent::NewStub(
        grpc::CreateChannel("unix://" + socket_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    manager_->Shutdown();
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }
  std::string Target(const std::string& n) { return dir_.path() + "/t/" + n; }

  grpc::Status Mount(const std::string& id, const StringMap& ctx, const std::string& target,
                     bool ro = true) {
    v1::MountRequest req;
    req.set_volume_id(id);
    req.mutable_volume_context()->insert(ctx.begin(), ctx.end());
    req.set_target_path(target);
    req.set_read_only(ro);
    v1::MountResponse resp;
    return stub_->Mount(Ctx().get(), req, &resp);
  }

  static void ExpectInvalid(const grpc::Status& s, const std::string& field) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
  }

  spoke::testing::TempDir dir_{"spoke-svc"};
  std::shared_ptr<testing::FakeWorld> world_;
  std::unique_ptr<testing::FakeMounter> mounter_;
  testing::FakeHostMounts host_;
  metrics::Registry registry_;
  std::unique_ptr<MountManager> manager_;
  std::unique_ptr<AgentService> service_;
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

TEST_F(AgentServiceTest, SocketIsRootOnly) {
  struct stat st;
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// A Mount slower than the client's deadline (a hub that does not answer): the client got
// DEADLINE_EXCEEDED and will never unmount, so the agent undoes the mount when it completes.
TEST_F(AgentServiceTest, AMountThatOutlivesTheClientsDeadlineIsUndone) {
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->hold_mount = true;
  }
  v1::MountRequest req;
  req.set_volume_id(DatasetId());
  auto ctx = DatasetContext();
  req.mutable_volume_context()->insert(ctx.begin(), ctx.end());
  req.set_target_path(Target("a"));
  req.set_read_only(true);
  v1::MountResponse resp;
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto s = stub_->Mount(&c, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->hold_mount = false;
  }
  world_->mount_cv.notify_all();
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> l(world_->mu);
      if (world_->unmount_calls == 1) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> l(world_->mu);
  EXPECT_EQ(world_->mount_calls, 1);
  EXPECT_EQ(world_->unmount_calls, 1);
  EXPECT_TRUE(world_->live.empty());
  EXPECT_EQ(manager_->mounted_count(), 0u);
}

TEST_F(AgentServiceTest, MountListUnmountAreIdempotent) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->mount_calls, 1);
  }
  auto s = Mount(DatasetId("/srv/o"), DatasetContext("/srv/o"), Target("a"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  v1::ListMountsResponse list;
  ASSERT_TRUE(stub_->ListMounts(Ctx().get(), v1::ListMountsRequest(), &list).ok());
  ASSERT_EQ(list.mounts_size(), 1);
  EXPECT_EQ(list.mounts(0).volume_id(), DatasetId());
  EXPECT_EQ(list.mounts(0).target_path(), Target("a"));
  EXPECT_TRUE(list.mounts(0).read_only());
  EXPECT_TRUE(list.mounts(0).hub_reachable());
  EXPECT_EQ(list.mounts(0).volume_context().at("share"), "/srv/data");

  v1::UnmountRequest ureq;
  ureq.set_target_path(Target("a"));
  v1::UnmountResponse uresp;
  ASSERT_TRUE(stub_->Unmount(Ctx().get(), ureq, &uresp).ok());
  ASSERT_TRUE(stub_->Unmount(Ctx().get(), ureq, &uresp).ok());
  list.Clear();
  ASSERT_TRUE(stub_->ListMounts(Ctx().get(), v1::ListMountsRequest(), &list).ok());
  EXPECT_EQ(list.mounts_size(), 0);
}

TEST_F(AgentServiceTest, MountFailuresKeepTheirCode) {
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->fail_mount = Code::kUnavailable;
  }
  EXPECT_EQ(Mount(DatasetId(), DatasetContext(), Target("a")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(AgentServiceTest, BadArgumentsNameTheField) {
  ExpectInvalid(Mount("", DatasetContext(), Target("a")), "volume_id");
  ExpectInvalid(Mount(DatasetId(), DatasetContext(), ""), "target_path");
  ExpectInvalid(Mount(DatasetId(), {}, Target("a")), "volume_context");
  ExpectInvalid(Mount(DatasetId(), DatasetContext(), "rel/a"), "target_path");
  StringMap bad = DatasetContext();
  bad["prefetch"] = "psychic";
  ExpectInvalid(Mount(DatasetId(), bad, Target("a")), "prefetch");

  v1::UnmountResponse ur;
  ExpectInvalid(stub_->Unmount(Ctx().get(), v1::UnmountRequest(), &ur), "target_path");

  v1::VolumeStatsRequest sreq;
  v1::VolumeStatsResponse sresp;
  ExpectInvalid(stub_->VolumeStats(Ctx().get(), sreq, &sresp), "volume_id or target_path");
  sreq.set_volume_id("x");
  sreq.set_target_path("/x");
  ExpectInvalid(stub_->VolumeStats(Ctx().get(), sreq, &sresp), "give only one");

  v1::WarmupRequest wreq;
  v1::WarmupProgress p;
  auto ctx = Ctx();
  auto reader = stub_->Warmup(ctx.get(), wreq);
  while (reader->Read(&p)) {
  }
  ExpectInvalid(reader->Finish(), "volume_id");
  wreq.set_volume_id(DatasetId());
  wreq.set_path_prefix("../up");
  ctx = Ctx();
  reader = stub_->Warmup(ctx.get(), wreq);
  while (reader->Read(&p)) {
  }
  ExpectInvalid(reader->Finish(), "path_prefix");

  v1::EvictRequest ereq;
  v1::EvictResponse eresp;
  ExpectInvalid(stub_->Evict(Ctx().get(), ereq, &eresp), "volume_id");
  ereq.set_volume_id(DatasetId());
  ereq.set_path_prefix("/abs");
  ExpectInvalid(stub_->Evict(Ctx().get(), ereq, &eresp), "path_prefix");

  v1::HintRequest hreq;
  v1::HintResponse hresp;
  ExpectInvalid(stub_->Hint(Ctx().get(), hreq, &hresp), "volume_id");
}

TEST_F(AgentServiceTest, UnknownVolumeIsNotFound) {
  v1::VolumeStatsRequest sreq;
  v1::VolumeStatsResponse sresp;
  sreq.set_volume_id(DatasetId());
  EXPECT_EQ(stub_->VolumeStats(Ctx().get(), sreq, &sresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  sreq.Clear();
  sreq.set_target_path(Target("none"));
  EXPECT_EQ(stub_->VolumeStats(Ctx().get(), sreq, &sresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::EvictRequest ereq;
  v1::EvictResponse eresp;
  ereq.set_volume_id(DatasetId());
  EXPECT_EQ(stub_->Evict(Ctx().get(), ereq, &eresp).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::HintRequest hreq;
  v1::HintResponse hresp;
  hreq.set_volume_id(DatasetId());
  EXPECT_EQ(stub_->Hint(Ctx().get(), hreq, &hresp).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::WarmupRequest wreq;
  wreq.set_volume_id(DatasetId());
  auto ctx = Ctx();
  auto reader = stub_->Warmup(ctx.get(), wreq);
  v1::WarmupProgress p;
  while (reader->Read(&p)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentServiceTest, VolumeStatsByIdAndByTarget) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->figures.cache_bytes = 123;
    world_->figures.cache_hits = 9;
    world_->figures.cache_misses = 1;
    world_->figures.hub_read_bytes = 456;
    world_->figures.hub_reachable = false;
    world_->figures.last_hub_error = "timeout";
    world_->figures.hub_total_bytes = 1000;
    world_->figures.experts.push_back({.name = "sequential",
                                       .precision = 0.9,
                                       .coverage = 0.5,
                                       .predicted_blocks = 10,
                                       .used_blocks = 9,
                                       .wasted_blocks = 1,
                                       .budget_bytes = 64 << 20});
  }
  for (int by_target = 0; by_target < 2; ++by_target) {
    v1::VolumeStatsRequest req;
    if (by_target) {
      req.set_target_path(Target("a") + "/");
    } else {
      req.set_volume_id(DatasetId());
    }
    v1::VolumeStatsResponse resp;
    ASSERT_TRUE(stub_->VolumeStats(Ctx().get(), req, &resp).ok());
    EXPECT_EQ(resp.volume_id(), DatasetId());
    EXPECT_EQ(resp.cache_bytes(), 123u);
    EXPECT_EQ(resp.cache_hits(), 9u);
    EXPECT_EQ(resp.cache_misses(), 1u);
    EXPECT_EQ(resp.hub_read_bytes(), 456u);
    EXPECT_FALSE(resp.hub_reachable());
    EXPECT_EQ(resp.last_hub_error(), "timeout");
    EXPECT_EQ(resp.hub_total_bytes(), 1000u);
    EXPECT_EQ(resp.cache_capacity_bytes(), 10ull << 30);
    ASSERT_EQ(resp.experts_size(), 1);
    EXPECT_EQ(resp.experts(0).name(), "sequential");
    EXPECT_DOUBLE_EQ(resp.experts(0).precision(), 0.9);
    EXPECT_EQ(resp.experts(0).budget_bytes(), 64u << 20);
  }
}

TEST_F(AgentServiceTest, WarmupStreamsProgressAndEndsWithDone) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  v1::WarmupRequest req;
  req.set_volume_id(DatasetId());
  req.set_path_prefix("train/");
  auto ctx = Ctx();
  auto reader = stub_->Warmup(ctx.get(), req);
  std::vector<v1::WarmupProgress> got;
  v1::WarmupProgress p;
  while (reader->Read(&p)) got.push_back(p);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_GE(got.size(), 2u);
  EXPECT_TRUE(got.back().done());
  EXPECT_EQ(got.back().bytes_done(), 5u << 20);
  EXPECT_EQ(got.back().bytes_total(), 5u << 20);
  EXPECT_EQ(got.back().files_done(), 5u);
  EXPECT_TRUE(got.back().error().empty());
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_FALSE(got[i].done());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->last_warmup_prefix, "train");
    EXPECT_EQ(world_->last_warmup_options.rate_bytes_per_second, 0u);
    EXPECT_FALSE(world_->last_warmup_options.verify);
  }
  // A rate and a verify pass reach the volume.
  req.set_rate_bytes_per_second(50 << 20);
  req.set_verify(true);
  ctx = Ctx();
  reader = stub_->Warmup(ctx.get(), req);
  while (reader->Read(&p)) {
  }
  ASSERT_TRUE(reader->Finish().ok());
  std::lock_guard<std::mutex> l(world_->mu);
  EXPECT_EQ(world_->last_warmup_options.rate_bytes_per_second, 50u << 20);
  EXPECT_TRUE(world_->last_warmup_options.verify);
}

TEST_F(AgentServiceTest, WarmupReportsAFileThatCouldNotBeFetched) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->warmup_error = Error(Code::kIo, "a.jpg: hub I/O error");
  }
  v1::WarmupRequest req;
  req.set_volume_id(DatasetId());
  auto ctx = Ctx();
  auto reader = stub_->Warmup(ctx.get(), req);
  v1::WarmupProgress p, last;
  while (reader->Read(&p)) last = p;
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(last.done());
  EXPECT_EQ(last.error(), "a.jpg: hub I/O error");
}

TEST_F(AgentServiceTest, WarmupStopsWhenTheClientGoesAway) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->warmup_steps = 100000;
    world_->warmup_step_delay = std::chrono::milliseconds(5);
  }
  v1::WarmupRequest req;
  req.set_volume_id(DatasetId());
  auto ctx = Ctx();
  auto reader = stub_->Warmup(ctx.get(), req);
  v1::WarmupProgress p;
  ASSERT_TRUE(reader->Read(&p));
  ctx->TryCancel();
  while (reader->Read(&p)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 300 && !world_->warmup_was_cancelled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(world_->warmup_was_cancelled);
}

TEST_F(AgentServiceTest, EvictCountsBlocksAndBytes) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  v1::EvictRequest req;
  req.set_volume_id(DatasetId());
  req.set_path_prefix("dir/sub/");
  v1::EvictResponse resp;
  ASSERT_TRUE(stub_->Evict(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.evicted_blocks(), 7u);
  EXPECT_EQ(resp.evicted_bytes(), 7u << 20);
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->last_evict_prefix, "dir/sub");
  }
}

// path_prefix as people type it: "." and "/" are the whole volume, "./sub" and "sub/" are
// "sub"; ".." and other absolute paths stay refused.
TEST_F(AgentServiceTest, PrefixesAreForgivenButNeverEscape) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  const std::pair<std::string, std::string> ok[] = {
      {".", ""}, {"/", ""}, {"./", ""}, {"./dir/sub", "dir/sub"}, {"dir//sub/", "dir/sub"}};
  for (const auto& [in, want] : ok) {
    v1::EvictRequest req;
    req.set_volume_id(DatasetId());
    req.set_path_prefix(in);
    v1::EvictResponse resp;
    grpc::Status s = stub_->Evict(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << in << ": " << s.error_message();
    {
      std::lock_guard<std::mutex> l(world_->mu);
      EXPECT_EQ(world_->last_evict_prefix, want) << in;
    }
    v1::WarmupRequest wreq;
    wreq.set_volume_id(DatasetId());
    wreq.set_path_prefix(in);
    auto ctx = Ctx();
    auto reader = stub_->Warmup(ctx.get(), wreq);
    v1::WarmupProgress p;
    while (reader->Read(&p)) {
    }
    s = reader->Finish();
    ASSERT_TRUE(s.ok()) << in << ": " << s.error_message();
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->last_warmup_prefix, want) << in;
  }
  for (const char* bad : {"..", "./..", "dir/../..", "/etc", "/dir/sub"}) {
    v1::EvictRequest req;
    req.set_volume_id(DatasetId());
    req.set_path_prefix(bad);
    v1::EvictResponse resp;
    ExpectInvalid(stub_->Evict(Ctx().get(), req, &resp), "path_prefix");
  }
}

TEST_F(AgentServiceTest, HintRejectsEscapingAndUnknownPaths) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  v1::HintRequest req;
  req.set_volume_id(DatasetId());
  // "./dir/b.jpg" is what `find .` writes: forgiven. "/" and "." name no file.
  for (const char* p :
       {"a.jpg", "./dir/b.jpg", "../etc/passwd", "", "/abs", "unknown.jpg", "/", "."}) {
    req.add_paths(p);
  }
  v1::HintResponse resp;
  ASSERT_TRUE(stub_->Hint(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.accepted(), 2u);
  EXPECT_EQ(resp.rejected(), 6u);
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->hinted, (std::vector<std::string>{"a.jpg", "dir/b.jpg", "unknown.jpg"}));
  }
}

TEST_F(AgentServiceTest, MetricsAndHealthOverHttp) {
  ASSERT_TRUE(Mount(DatasetId(), DatasetContext(), Target("a")).ok());
  HttpServer http(registry_, *manager_);
  ASSERT_TRUE(http.Start("127.0.0.1", 0));
  ASSERT_GT(http.port(), 0);
  httplib::Client client("127.0.0.1", http.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("# TYPE spoke_mounts gauge\nspoke_mounts 1\n"), std::string::npos)
      << res->body;
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  auto j = nlohmann::json::parse(res->body);
  EXPECT_EQ(j["status"], "serving");
  EXPECT_EQ(j["hubReachable"], true);
  ASSERT_EQ(j["mounts"].size(), 1u);
  EXPECT_EQ(j["mounts"][0]["volume"], VolumeMetricsLabel(DatasetId()));
  EXPECT_EQ(j["mounts"][0]["state"], "mounted");
  // Nothing naming a share, a target (pod UIDs) or the raw volume id over HTTP.
  EXPECT_EQ(res->body.find(Target("a")), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find(DatasetId()), std::string::npos) << res->body;

  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->figures.hub_reachable = false;
    world_->figures.last_hub_error = "Command timed out";
  }
  manager_->RunBackgroundOnce(false);
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);  // the agent serves; the hub being down is reported, not fatal
  j = nlohmann::json::parse(res->body);
  EXPECT_EQ(j["hubReachable"], false);
  EXPECT_EQ(j["mounts"][0]["hubReachable"], false);
  EXPECT_EQ(res->body.find("Command timed out"), std::string::npos) << res->body;
  EXPECT_EQ(client.Get("/nope")->status, 404);
  http.Stop();
  EXPECT_FALSE(client.Get("/healthz"));

  auto down = nlohmann::json::parse(HealthJson(*manager_, false));
  EXPECT_EQ(down["status"], "shutting down");
}

}  // namespace
}  // namespace spoke::agent
