// The fd keeper embedded in spoke-csi-node: configuration and a real put/list through it.
#include "csi-node/fd_keeper_service.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace spoke::node {
namespace {

using namespace std::chrono_literals;

TEST(FdKeeperService, ConfigKeyAndValidation) {
  NodeConfig c;
  c.node_id = "n1";
  ASSERT_TRUE(LoadNodeConfigString("fuseKeeperSocket: /run/spoke/k.sock\n", &c, nullptr));
  EXPECT_EQ(c.fuse_keeper_socket, "/run/spoke/k.sock");
  EXPECT_TRUE(c.Validate());
  c.fuse_keeper_socket = "k.sock";
  auto s = c.Validate();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("fuseKeeperSocket"), std::string::npos);
}

TEST(FdKeeperService, DisabledWithoutSocket) {
  NodeConfig c;
  auto k = StartFuseKeeper(c);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->get(), nullptr);
}

TEST(FdKeeperService, ServesPutAndListAndRefusesASecondInstance) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "spoke-nodekeeper-XXXXXX").string();
  std::string dir = ::mkdtemp(tmpl.data());
  NodeConfig c;
  c.fuse_keeper_socket = dir + "/sub/keeper.sock";  // the directory is created
  auto k = StartFuseKeeper(c);
  ASSERT_TRUE(k) << k.error().ToString();
  ASSERT_NE(k->get(), nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(c.fuse_keeper_socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  FdKeeperClient client(c.fuse_keeper_socket, 2000ms);
  if (::geteuid() == 0) {
    ASSERT_TRUE(client.Put("vol-1", R"({"target":"/x"})", p[0]));
    auto list = client.List();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].key, "vol-1");
  }
  auto second = StartFuseKeeper(c);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), Code::kAlreadyExists);
  EXPECT_NE(second.error().message().find("fuseKeeperSocket"), std::string::npos);
  ::close(p[0]);
  ::close(p[1]);
  k->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spoke::node
