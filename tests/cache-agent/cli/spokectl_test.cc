// spokectl's commands against a real agent API server (fake volumes) on a unix socket.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cache-agent/agent/agent_service.h"
#include "cache-agent/cli/commands.h"
#include "common/grpc_server.h"
#include "tests/cache-agent/agent/fakes.h"
#include "tests/support/hub.h"

namespace spoke::cli {
namespace {

using spoke::agent::AgentService;
using spoke::agent::MountManager;

class SpokectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = std::make_shared<agent::testing::FakeWorld>();
    mounter_ = std::make_unique<agent::testing::FakeMounter>(world_, host_);
    MountManager::Options o;
    o.state_file = dir_.path() + "/mounts.json";
    manager_ = std::make_unique<MountManager>(*mounter_, host_, registry_, o);
    ASSERT_TRUE(manager_->Start());
    AgentService::Options so;
    so.cache_capacity_bytes = 1ull << 30;
    so.progress_interval = std::chrono::milliseconds(0);
    service_ = std::make_unique<AgentService>(*manager_, so);
    socket_ = dir_.path() + "/agent.sock";
    GrpcServerOptions go;
    go.endpoint = "unix://" + socket_;
    auto server = StartGrpcServer(go, {service_.get()});
    ASSERT_TRUE(server);
    server_ = std::move(*server);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
    manager_->Shutdown();
  }

  // Runs spokectl with `args` (socket added); returns the exit code.
  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", socket_});
    out_.str("");
    err_.str("");
    auto cmd = ParseArgs(args);
    if (!cmd) {
      err_ << cmd.error().message();
      return 2;
    }
    return RunCommand(*cmd, out_, err_, false);
  }

  std::string Mnt() const { return dir_.path() + "/mnt"; }

  spoke::testing::TempDir dir_{"spoke-ctl"};
  std::shared_ptr<agent::testing::FakeWorld> world_;
  std::unique_ptr<agent::testing::FakeMounter> mounter_;
  agent::testing::FakeHostMounts host_;
  metrics::Registry registry_;
  std::unique_ptr<MountManager> manager_;
  std::unique_ptr<AgentService> service_;
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::ostringstream out_, err_;
};

TEST_F(SpokectlTest, MountStatusStatsUnmount) {
  ASSERT_EQ(Run({"mount", "nfs://127.0.0.1/srv/data?nfsport=20491&mountport=20492", Mnt()}), 0)
      << err_.str();
  EXPECT_NE(out_.str().find("mounted nfs://127.0.0.1/srv/data"), std::string::npos);
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->live.at(Mnt()), "spoke1|dataset|retain|127.0.0.1|20491|20492|/srv/data|");
  }
  // Again: idempotent.
  ASSERT_EQ(Run({"mount", "nfs://127.0.0.1/srv/data?nfsport=20491&mountport=20492", Mnt()}), 0);

  ASSERT_EQ(Run({"status"}), 0) << err_.str();
  EXPECT_NE(out_.str().find(Mnt() + "  127.0.0.1:/srv/data"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("hub: reachable from every mount"), std::string::npos);

  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->figures.hub_read_bytes = 3 << 20;
  }
  ASSERT_EQ(Run({"stats", Mnt() + "/"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("read from hub      3.0 MiB"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"stats"}), 0);
  EXPECT_NE(out_.str().find("target"), std::string::npos);
  ASSERT_EQ(Run({"stats", "--volume", "spoke1|dataset|retain|127.0.0.1|20491|20492|/srv/data|"}),
            0);

  ASSERT_EQ(Run({"unmount", Mnt()}), 0) << err_.str();
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_TRUE(world_->live.empty());
  }
  ASSERT_EQ(Run({"status"}), 0);
  EXPECT_EQ(out_.str(), "no volumes mounted\n");
}

TEST_F(SpokectlTest, WarmupEvictHint) {
  ASSERT_EQ(Run({"mount", "nfs://127.0.0.1/srv/data", Mnt()}), 0) << err_.str();
  ASSERT_EQ(Run({"warmup", Mnt(), "train"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("done 100%"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("warmed 5.0 MiB in 5 files"), std::string::npos) << out_.str();
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->last_warmup_prefix, "train");
  }
  // The whole volume as people write it, and a sub-directory with ./ or a trailing slash or
  // as a path under the mount.
  for (const auto& [prefix, sent] : {std::pair<std::string, std::string>{".", ""},
                                     {"/", ""},
                                     {Mnt(), ""},
                                     {"./train/", "train"},
                                     {Mnt() + "/train", "train"}}) {
    ASSERT_EQ(Run({"warmup", Mnt(), prefix}), 0) << prefix << ": " << err_.str();
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->last_warmup_prefix, sent) << prefix;
  }
  EXPECT_EQ(Run({"warmup", Mnt(), "../other"}), 2);
  EXPECT_NE(err_.str().find("'..' is not allowed"), std::string::npos) << err_.str();

  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->warmup_error = Error(Code::kIo, "x.jpg: gone");
  }
  EXPECT_EQ(Run({"warmup", Mnt()}), 1);
  EXPECT_NE(err_.str().find("incomplete: x.jpg: gone"), std::string::npos) << err_.str();

  ASSERT_EQ(Run({"evict", Mnt(), "train"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("evicted 7 blocks (7.0 MiB)"), std::string::npos) << out_.str();

  std::string list = dir_.path() + "/order.txt";
  std::ofstream(list) << "a.jpg\n" << Mnt() << "/dir/b.jpg\n\nnope.jpg\n";
  ASSERT_EQ(Run({"hint", Mnt(), list}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "hinted 2 paths, rejected 1\n");
  {
    std::lock_guard<std::mutex> l(world_->mu);
    EXPECT_EQ(world_->hinted, (std::vector<std::string>{"a.jpg", "dir/b.jpg", "nope.jpg"}));
  }
}

TEST_F(SpokectlTest, ClearErrors) {
  EXPECT_EQ(Run({"warmup", Mnt()}), 1);
  EXPECT_NE(err_.str().find("no Spoke volume is mounted at " + Mnt()), std::string::npos);
  {
    std::lock_guard<std::mutex> l(world_->mu);
    world_->fail_mount = Code::kUnavailable;
  }
  EXPECT_EQ(Run({"mount", "nfs://127.0.0.1/srv/data", Mnt()}), 1);
  EXPECT_NE(err_.str().find("fake mount failure"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"mount", "nfs://127.0.0.1/srv/data", Mnt(), "--prefetch", "x"}), 2);

  auto cmd = ParseArgs({"--socket", dir_.path() + "/none.sock", "status"});
  ASSERT_TRUE(cmd);
  std::ostringstream out, err;
  EXPECT_EQ(RunCommand(*cmd, out, err, false), 1);
  EXPECT_NE(err.str().find("cannot reach the agent at " + dir_.path() +
                           "/none.sock: No such file or directory; is spoke-cache-agent running?"),
            std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace spoke::cli
