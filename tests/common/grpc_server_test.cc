// common/grpc_server: the unix socket never exists with a wider mode than asked for.
#include "common/grpc_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/csi_identity.h"

namespace {

// The socket's mode when the server first chmods it: a mode wider than the final one at that
// moment means the socket was connectable by others between bind() and chmod().
std::string g_watched;
int g_mode_at_chmod = -1;

}  // namespace

// Interposes libc's chmod for the code linked into this test.
extern "C" int chmod(const char* path, mode_t mode) {
  struct stat st;
  if (!g_watched.empty() && g_watched == path && g_mode_at_chmod < 0 && ::stat(path, &st) == 0) {
    g_mode_at_chmod = static_cast<int>(st.st_mode & 07777);
  }
  return static_cast<int>(::syscall(SYS_fchmodat, AT_FDCWD, path, mode));
}

namespace spoke {
namespace {

TEST(GrpcServerTest, SocketHasItsFinalModeWhenBound) {
  char tmpl[] = "/tmp/spoke-grpc-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  g_watched = dir + "/api.sock";
  mode_t previous = ::umask(022);  // the usual umask: bind() alone would give 0755
  GrpcServerOptions options;
  options.endpoint = "unix://" + g_watched;
  options.socket_mode = 0600;
  IdentityServer identity;
  auto server = StartGrpcServer(options, {&identity});
  mode_t after = ::umask(previous);
  ASSERT_TRUE(server) << server.error().message();
  struct stat st;
  ASSERT_EQ(::stat(g_watched.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  int at_bind = g_mode_at_chmod >= 0 ? g_mode_at_chmod : static_cast<int>(st.st_mode & 07777);
  EXPECT_EQ(at_bind, 0600) << "the socket was created with mode 0" << std::oct << at_bind;
  EXPECT_EQ(after, 022u) << "the process umask was not restored";
  (*server)->Shutdown();
  ::unlink(g_watched.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace spoke
