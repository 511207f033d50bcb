#include "tests/support/hub.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/thread_annotations.h"
#include "tests/support/netns.h"

namespace spoke::testing {

std::string SourceDir() {
  const char* e = ::getenv("SPOKE_SOURCE_DIR");
  return e ? e : SPOKE_SOURCE_DIR_DEFAULT;
}
std::string BinaryDir() {
  const char* e = ::getenv("SPOKE_BINARY_DIR");
  return e ? e : SPOKE_BINARY_DIR_DEFAULT;
}

int Run(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

Blackhole::Blackhole() {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd_, 64);
  socklen_t len = sizeof a;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c >= 0) accepted_.push_back(c);
    }
  });
}

Blackhole::~Blackhole() {
  stop_ = true;
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  thread_.join();
  for (int c : accepted_) ::close(c);
}

uint16_t FreePort() {
  // Never the same port twice in one process: a port just freed may be handed out again at
  // once, and gRPC listens with SO_REUSEPORT, so two servers a test starts would share it.
  static Mutex mu;
  static std::set<uint16_t> given;
  MutexLock lock(mu);
  for (int attempt = 0;; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    const uint16_t port = ntohs(a.sin_port);
    if (given.insert(port).second || attempt >= 100) return port;
  }
}

std::pair<int, std::string> Capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {127, ""};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, out};
}

std::unique_ptr<TestHub> TestHub::Start(const std::string& netns) {
  std::unique_ptr<TestHub> hub(new TestHub());
  hub->netns_ = netns;
  hub->dir_ = std::make_unique<TempDir>("spoke-hub");
  hub->export_dir_ = hub->dir_->path() + "/export";
  // FreePort's ports may be taken by another test before ganesha binds them: spoke-hub then
  // exits 3 (ganesha does not own both), and the hub starts again on other ports.
  for (int attempt = 0; attempt < 5; ++attempt) {
    hub->nfs_port_ = FreePort();
    hub->mount_port_ = FreePort();
    int rc = hub->StartOnItsPorts();
    if (rc == 0) return hub;
    if (rc != 3) break;
  }
  ADD_FAILURE() << "cannot start nfs-ganesha (see " << hub->dir_->path() << "/ganesha.log)";
  return nullptr;
}

int TestHub::StartOnItsPorts() {
  // Tied to this process: a test that aborts leaves no ganesha behind.
  std::string cmd = (netns_.empty() ? "" : NetTopology::Enter(netns_)) +
                    "env SPOKE_HUB_OWNER_PID=" + std::to_string(::getpid()) + " " + SourceDir() +
                    "/scripts/spoke-hub start " + dir_->path() + " " + std::to_string(nfs_port_) +
                    " " + std::to_string(mount_port_) + " >/dev/null";
  return Run(cmd);
}

bool TestHub::Restart() { return StartOnItsPorts() == 0; }

void TestHub::Stop() { Run(SourceDir() + "/scripts/spoke-hub stop " + dir_->path()); }

TestHub::~TestHub() { Stop(); }

HubAddress TestHub::address(NfsVersion version) const {
  return WithNfsVersion(HubAddress{"127.0.0.1", nfs_port_, mount_port_, export_dir_}, version);
}

HubAddress WithNfsVersion(HubAddress address, NfsVersion version) {
  address.nfs_version = version;
  if (version != NfsVersion::kV3) address.mount_port = 0;
  return address;
}

namespace {

// Whether something accepts on ip:port, seen from `netns` ("" = this process's network).
bool Accepts(const std::string& netns, const std::string& ip, uint16_t port) {
  auto try_connect = [&] {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  };
  if (netns.empty()) return try_connect();
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(NetTopology::JoinInChild(netns) && try_connect() ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

std::unique_ptr<WanProxy> WanProxy::Start(const TestHub& hub, int one_way_delay_ms,
                                          const std::string& netns, const std::string& listen_ip,
                                          double link_mbytes) {
  std::string bin = BinaryDir() + "/e2e/wan-proxy/spoke-wan-proxy";
  // FreePort's port may be taken by another test before the proxy binds it: a proxy that
  // exits (EADDRINUSE) is started again on other ports.
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::unique_ptr<WanProxy> proxy(new WanProxy());
    uint16_t nfs = FreePort(), mnt = FreePort();
    std::string nfs_route =
        listen_ip + ":" + std::to_string(nfs) + "=127.0.0.1:" + std::to_string(hub.nfs_port());
    std::string mnt_route =
        listen_ip + ":" + std::to_string(mnt) + "=127.0.0.1:" + std::to_string(hub.mount_port());
    std::string delay = std::to_string(one_way_delay_ms);
    std::string link = std::to_string(link_mbytes);
    pid_t pid = ::fork();
    if (pid == 0) {
      if (!netns.empty() && !NetTopology::JoinInChild(netns)) ::_exit(126);
      ::execl(bin.c_str(), bin.c_str(), "--delay-ms", delay.c_str(), "--route", nfs_route.c_str(),
              "--route", mnt_route.c_str(), "--link-mbytes", link.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    proxy->pid_ = pid;
    proxy->address_ = HubAddress{listen_ip, nfs, mnt, hub.export_dir()};
    // Wait until both listeners accept, with the proxy still running.
    bool exited = false;
    for (int i = 0; i < 100 && !exited; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) {
        exited = true;
        proxy->pid_ = -1;
        break;
      }
      if (Accepts(netns, listen_ip, nfs) && Accepts(netns, listen_ip, mnt) &&
          ::waitpid(pid, nullptr, WNOHANG) == 0) {
        return proxy;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!exited) break;  // running but not accepting: not a port clash
  }
  ADD_FAILURE() << "spoke-wan-proxy did not start (" << bin << ")";
  return nullptr;
}

void WanProxy::Freeze(bool frozen) {
  if (pid_ <= 0) return;
  ::kill(pid_, frozen ? SIGSTOP : SIGCONT);
  if (!frozen) return;
  // kill() returns before the proxy's threads stop: one still running could forward a request
  // sent after Freeze returned. The proxy is our child, and waitpid reports its stop once the
  // whole process has stopped (bounded: a missed report fails the test, never hangs it).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid_, &status, WUNTRACED | WNOHANG) == pid_ && WIFSTOPPED(status)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "the WAN proxy (pid " << pid_ << ") did not stop within 5 s of SIGSTOP";
}

WanProxy::~WanProxy() {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);  // a frozen proxy acts on SIGTERM only once running
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
}

}  // namespace spoke::testing
