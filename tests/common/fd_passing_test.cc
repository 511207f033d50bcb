#include "common/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/temp_dir.h"

namespace spoke {
namespace {

using namespace std::chrono_literals;
using spoke::testing::TempDir;

std::pair<UniqueFd, UniqueFd> SeqpacketPair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

TEST(FdPassingTest, PassesDataAndDescriptorsThatStayUsable) {
  auto [a, b] = SeqpacketPair();
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  UniqueFd r(pipefd[0]), w(pipefd[1]);
  int fds[] = {r.get(), w.get()};
  ASSERT_TRUE(SendFdMessage(a.get(), "hello", fds, 1000ms));
  r.Reset();  // the receiver's copies must not depend on ours
  auto msg = RecvFdMessage(b.get(), 1000ms);
  ASSERT_TRUE(msg) << msg.error().ToString();
  EXPECT_EQ(msg->data, "hello");
  ASSERT_EQ(msg->fds.size(), 2u);
  ASSERT_EQ(::write(msg->fds[1].get(), "xyz", 3), 3);
  char buf[4] = {};
  ASSERT_EQ(::read(msg->fds[0].get(), buf, 3), 3);
  EXPECT_STREQ(buf, "xyz");
  EXPECT_NE(::fcntl(msg->fds[0].get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(FdPassingTest, RecordsKeepTheirBoundaries) {
  auto [a, b] = SeqpacketPair();
  ASSERT_TRUE(SendFdMessage(a.get(), "one", {}, 1000ms));
  ASSERT_TRUE(SendFdMessage(a.get(), "two", {}, 1000ms));
  EXPECT_EQ(RecvFdMessage(b.get(), 1000ms)->data, "one");
  EXPECT_EQ(RecvFdMessage(b.get(), 1000ms)->data, "two");
}

TEST(FdPassingTest, ReceiveTimesOutAndReportsAClosedPeer) {
  auto [a, b] = SeqpacketPair();
  auto none = RecvFdMessage(b.get(), 50ms);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kTimeout);
  a.Reset();
  auto closed = RecvFdMessage(b.get(), 1000ms);
  ASSERT_FALSE(closed);
  EXPECT_EQ(closed.error().code(), Code::kUnavailable);
}

TEST(FdPassingTest, SendToAFullQueueTimesOut) {
  auto [a, b] = SeqpacketPair();
  std::string big(kMaxFdMessageBytes, 'x');
  Status s;
  for (int i = 0; i < 10000 && s; ++i) s = SendFdMessage(a.get(), big, {}, 50ms);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kTimeout);
}

TEST(FdPassingTest, RejectsBadSizes) {
  auto [a, b] = SeqpacketPair();
  EXPECT_EQ(SendFdMessage(a.get(), "", {}, 10ms).error().code(), Code::kInvalidArgument);
  std::string too_big(kMaxFdMessageBytes + 1, 'x');
  EXPECT_EQ(SendFdMessage(a.get(), too_big, {}, 10ms).error().code(), Code::kInvalidArgument);
  std::vector<int> many(kMaxFdsPerMessage + 1, 0);
  EXPECT_EQ(SendFdMessage(a.get(), "x", many, 10ms).error().code(), Code::kInvalidArgument);
}

TEST(FdPassingTest, ListenCreatesTheSocketWithItsFinalModeAndRefusesALiveOne) {
  TempDir dir;
  std::string path = dir.path() + "/k.sock";
  auto l = ListenSeqpacket(path, 0600);
  ASSERT_TRUE(l) << l.error().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // No private bind directory is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);

  auto again = ListenSeqpacket(path, 0600);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kAlreadyExists);

  auto c = ConnectSeqpacket(path, 1000ms);
  ASSERT_TRUE(c) << c.error().ToString();
  UniqueFd server(::accept4(l->get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());
  auto cred = PeerCredentials(server.get());
  ASSERT_TRUE(cred);
  EXPECT_EQ(cred->pid, ::getpid());
  EXPECT_EQ(cred->uid, ::geteuid());

  // A dead listener leaves a stale file: a new listener replaces it.
  l->Reset();
  c->Reset();
  auto replaced = ListenSeqpacket(path, 0600);
  EXPECT_TRUE(replaced) << replaced.error().ToString();
}

TEST(FdPassingTest, ConnectWithoutListenerIsUnavailable) {
  TempDir dir;
  auto c = ConnectSeqpacket(dir.path() + "/none.sock", 100ms);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kUnavailable);
  auto bad = ConnectSeqpacket(std::string(200, 'x'), 100ms);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace spoke
