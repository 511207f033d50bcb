// The fd keeper in-process: server and client over a real unix socket.
#include "common/fd_keeper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/run_as.h"
#include "tests/support/temp_dir.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;
using spoke::testing::BecomeUser;
using spoke::testing::ReadUpTo;
using spoke::testing::TempDir;

struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    r.Reset(fds[0]);
    w.Reset(fds[1]);
  }
  UniqueFd r, w;
};

class FdKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FdKeeperServer::Config config;
    config.socket_path = dir_.path() + "/keeper.sock";
    config.allowed_uid = ::geteuid();
    server_ = std::make_unique<FdKeeperServer>(config);
    ASSERT_TRUE(server_->Start());
  }
  FdKeeperClient Client() { return FdKeeperClient(dir_.path() + "/keeper.sock", 2000ms); }

  TempDir dir_;
  std::unique_ptr<FdKeeperServer> server_;
};

TEST_F(FdKeeperTest, PutListDel) {
  Pipe p;
  auto c = Client();
  ASSERT_TRUE(c.Put("vol-a", R"({"mountpoint":"/mnt/a","n":1})", p.r.get()));
  p.r.Reset();  // only the keeper holds the read end now
  ASSERT_EQ(::write(p.w.get(), "data", 4), 4);

  auto list = c.List();
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].key, "vol-a");
  EXPECT_EQ((*list)[0].metadata_json, R"({"mountpoint":"/mnt/a","n":1})");
  EXPECT_EQ(ReadUpTo((*list)[0].fd.get(), 4), "data");

  auto found = c.Del("vol-a");
  ASSERT_TRUE(found);
  EXPECT_TRUE(*found);
  EXPECT_FALSE(*c.Del("vol-a"));
  EXPECT_EQ(c.List()->size(), 0u);
}

TEST_F(FdKeeperTest, PutReplacesAndClosesTheOlderDescriptor) {
  Pipe first, second;
  auto c = Client();
  ASSERT_TRUE(c.Put("k", "{}", first.r.get()));
  first.r.Reset();
  ASSERT_TRUE(c.Put("k", R"({"v":2})", second.r.get()));
  // The keeper closed its copy of first's read end: writing there now fails with EPIPE.
  signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(::write(first.w.get(), "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  auto list = c.List();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].metadata_json, R"({"v":2})");
  EXPECT_EQ(server_->size(), 1u);
}

// Polls for up to 10 s; whether `pred` became true.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST(FdKeeperOrphanTest, ReleasesKeptDescriptorsOnlyWhenNoAgentHoldsTheLeaseForTheTimeout) {
  TempDir dir;
  FdKeeperServer::Config config;
  config.socket_path = dir.path() + "/keeper.sock";
  config.allowed_uid = ::geteuid();
  config.orphan_timeout = 300ms;
  FdKeeperServer server(config);
  ASSERT_TRUE(server.Start());
  FdKeeperClient c(config.socket_path, 2000ms);
  signal(SIGPIPE, SIG_IGN);

  auto hold = c.TakeLease();
  ASSERT_TRUE(hold) << hold.error().ToString();
  EXPECT_TRUE(FdKeeperClient::LeaseAlive(hold->get()));
  Pipe p;
  ASSERT_TRUE(c.Put("vol", "{}", p.r.get()));
  p.r.Reset();  // the keeper's copy is the pipe's only read end
  // Held: kept well past the timeout.
  std::this_thread::sleep_for(900ms);
  EXPECT_EQ(server.size(), 1u);
  EXPECT_EQ(::write(p.w.get(), "x", 1), 1);

  // A new agent's lease taken while the old one is still open, then the old one ends: still
  // held.
  auto second = c.TakeLease();
  ASSERT_TRUE(second);
  hold->Reset();
  std::this_thread::sleep_for(900ms);
  EXPECT_EQ(server.size(), 1u);

  // The last lease ends (the agent died): released after the timeout, the descriptor closed.
  second->Reset();
  ASSERT_TRUE(Eventually([&] { return server.size() == 0; })) << "never released";
  // The released descriptors close just after the table empties.
  ASSERT_TRUE(Eventually([&] { return ::write(p.w.get(), "x", 1) == -1; })) << "never closed";
  EXPECT_EQ(errno, EPIPE);
}

TEST(FdKeeperOrphanTest, WithoutATimeoutNothingIsEverReleasedAndTheLeaseEndsWithTheKeeper) {
  TempDir dir;
  FdKeeperServer::Config config;
  config.socket_path = dir.path() + "/keeper.sock";
  config.allowed_uid = ::geteuid();
  auto server = std::make_unique<FdKeeperServer>(config);
  ASSERT_TRUE(server->Start());
  FdKeeperClient c(config.socket_path, 2000ms);
  Pipe p;
  ASSERT_TRUE(c.Put("vol", "{}", p.r.get()));
  auto hold = c.TakeLease();
  ASSERT_TRUE(hold);
  hold->Reset();
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(server->size(), 1u);

  auto again = c.TakeLease();
  ASSERT_TRUE(again);
  server.reset();  // the keeper went away: the agent sees its lease end and takes a new one
  EXPECT_TRUE(Eventually([&] { return !FdKeeperClient::LeaseAlive(again->get()); }));
  EXPECT_FALSE(FdKeeperClient::LeaseAlive(-1));
}

// A node plugin and an agent upgraded together: the agent gave up its lease and handed its
// connection to the keeper, which is stopping too. The keeper stays until the next agent
// holds the lease (after taking the connection over), and then takes no PUT: the next agent
// gives its connections to the next keeper.
TEST_F(FdKeeperTest, AStoppingKeeperWithoutAnAgentWaitsForTheNextOneThenRefusesPuts) {
  Pipe p;
  auto c = Client();
  ASSERT_TRUE(c.Put("vol", "{}", p.r.get()));
  auto finished = std::async(std::launch::async, [&] { server_->FinishServing(20s); });
  EXPECT_EQ(finished.wait_for(300ms), std::future_status::timeout)
      << "left while it was the connection's only holder";
  auto list = c.List();  // the next agent takes the connection over, then the lease
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  auto lease = c.TakeLease();
  ASSERT_TRUE(lease) << lease.error().ToString();
  EXPECT_EQ(finished.wait_for(10s), std::future_status::ready);
  auto refused = c.Put("vol", "{}", p.r.get());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("keeper stopping"), std::string::npos)
      << refused.error().ToString();
}

TEST_F(FdKeeperTest, AStoppingKeeperWhoseAgentHoldsTheLeaseDoesNotWait) {
  Pipe p;
  auto c = Client();
  ASSERT_TRUE(c.Put("vol", "{}", p.r.get()));
  auto lease = c.TakeLease();
  ASSERT_TRUE(lease);
  auto finished = std::async(std::launch::async, [&] { server_->FinishServing(60s); });
  EXPECT_EQ(finished.wait_for(10s), std::future_status::ready) << "waited with an agent serving";
}

TEST_F(FdKeeperTest, AStoppingKeeperThatNoAgentReachesLeavesAtItsBound) {
  Pipe p;
  auto c = Client();
  ASSERT_TRUE(c.Put("vol", "{}", p.r.get()));
  server_->FinishServing(200ms);
  EXPECT_EQ(server_->size(), 1u) << "kept until the process ends";
  EXPECT_FALSE(c.Put("other", "{}", p.r.get()));
}

TEST_F(FdKeeperTest, ListsManyEntriesInKeyOrder) {
  std::vector<Pipe> pipes(40);
  auto c = Client();
  for (size_t i = 0; i < pipes.size(); ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "v%03zu", i);
    ASSERT_TRUE(c.Put(key, "{}", pipes[i].r.get()));
  }
  auto list = c.List();
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), pipes.size());
  for (size_t i = 0; i < pipes.size(); ++i) {
    ASSERT_EQ(::write(pipes[i].w.get(), "z", 1), 1);
    EXPECT_EQ(ReadUpTo((*list)[i].fd.get(), 1), "z") << (*list)[i].key;
  }
}

TEST_F(FdKeeperTest, RejectsBadInputWithClearErrors) {
  Pipe p;
  auto c = Client();
  auto bad_key = c.Put("has space", "{}", p.r.get());
  ASSERT_FALSE(bad_key);
  EXPECT_EQ(bad_key.error().code(), Code::kInvalidArgument);
  EXPECT_NE(bad_key.error().message().find("key"), std::string::npos);
  auto bad_meta = c.Put("k", "[1,2]", p.r.get());
  ASSERT_FALSE(bad_meta);
  EXPECT_EQ(bad_meta.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.Put("k", "{}", -1).error().code(), Code::kInvalidArgument);

  // Raw protocol errors from a misbehaving client: the keeper answers and keeps serving.
  auto sock = ConnectSeqpacket(dir_.path() + "/keeper.sock", 1000ms);
  ASSERT_TRUE(sock);
  ASSERT_TRUE(SendFdMessage(sock->get(), R"({"op":"put","key":"k","metadata":{}})", {}, 1000ms));
  auto reply = RecvFdMessage(sock->get(), 1000ms);
  ASSERT_TRUE(reply);
  EXPECT_NE(reply->data.find("exactly one descriptor"), std::string::npos) << reply->data;
  ASSERT_TRUE(SendFdMessage(sock->get(), "not json", {}, 1000ms));
  reply = RecvFdMessage(sock->get(), 1000ms);
  ASSERT_TRUE(reply);
  EXPECT_NE(reply->data.find("invalid request"), std::string::npos) << reply->data;
  EXPECT_EQ(c.List()->size(), 0u);
}

TEST_F(FdKeeperTest, RefusesOtherUids) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  Pipe p;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!BecomeUser(65534)) _exit(10);
    // The socket is 0600 root: another uid cannot even connect.
    auto s = FdKeeperClient(dir_.path() + "/keeper.sock", 1000ms).Put("k", "{}", p.r.get());
    _exit(s ? 0
          : s.error().code() == Code::kUnavailable || s.error().code() == Code::kIo ||
                  s.error().code() == Code::kPermissionDenied
              ? 3
              : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(server_->size(), 0u);
}

TEST(FdKeeperPeerTest, RefusesAPeerWhoseUidIsNotAllowedEvenIfItCanConnect) {
  TempDir dir;
  FdKeeperServer::Config config;
  config.socket_path = dir.path() + "/keeper.sock";
  config.allowed_uid = ::geteuid() + 1;  // nobody we are
  FdKeeperServer server(config);
  ASSERT_TRUE(server.Start());
  Pipe p;
  auto s = FdKeeperClient(config.socket_path, 1000ms).Put("k", "{}", p.r.get());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kPermissionDenied) << s.error().ToString();
  EXPECT_EQ(server.size(), 0u);
}

TEST(FdKeeperConfigTest, ValidateNamesTheProblem) {
  FdKeeperServer::Config c;
  c.socket_path = "relative.sock";
  auto s = c.Validate();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("absolute"), std::string::npos);
}

}  // namespace
}  // namespace spoke
