// Test fixtures around real processes: an nfs-ganesha hub (scripts/spoke-hub) and the WAN
// delay proxy (spoke-wan-proxy). Both are started in a fresh temporary directory and always
// stopped and removed in the destructor.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/volume.h"
#include "tests/support/temp_dir.h"

namespace spoke::testing {

// Runs a shell command; returns (exit code, stdout+stderr).
std::pair<int, std::string> Capture(const std::string& cmd);

std::string SourceDir();  // $SPOKE_SOURCE_DIR (set by ctest) or the compiled-in default
std::string BinaryDir();  // $SPOKE_BINARY_DIR

class TestHub {
 public:
  // Starts ganesha serving <tmp>/export over NFSv3 and NFSv4.1 on loopback high ports — of the
  // network namespace `netns` when given (NetTopology). Aborts the test (gtest FAIL) if it cannot.
  static std::unique_ptr<TestHub> Start(const std::string& netns = "");
  ~TestHub();

  const std::string& export_dir() const { return export_dir_; }
  uint16_t nfs_port() const { return nfs_port_; }
  uint16_t mount_port() const { return mount_port_; }
  // The hub as a client reaches it directly (no WAN delay), over NFSv3 or v4.1.
  HubAddress address(NfsVersion version = NfsVersion::kV3) const;

  // Stops ganesha (SIGTERM) and starts it again on the same ports: a hub outage.
  void Stop();
  bool Restart();

 private:
  TestHub() = default;
  // spoke-hub start on nfs_port_/mount_port_: its exit code (3: another process holds a port).
  int StartOnItsPorts();
  std::string netns_;
  std::unique_ptr<TempDir> dir_;
  std::string export_dir_;
  uint16_t nfs_port_ = 0;
  uint16_t mount_port_ = 0;
};

// spoke-wan-proxy forwarding listen ports to the hub's NFS and MOUNT ports with a one-way
// delay on each direction (30 ms each way = 60 ms RTT).
class WanProxy {
 public:
  // In `netns` (the hub's) when given, listening on `listen_ip` there (e.g. its bridge
  // address, for clients in other namespaces).
  // `link_mbytes` > 0 caps the link (both directions, all connections) at that many MB/s.
  static std::unique_ptr<WanProxy> Start(const TestHub& hub, int one_way_delay_ms,
                                         const std::string& netns = "",
                                         const std::string& listen_ip = "127.0.0.1",
                                         double link_mbytes = 0);
  ~WanProxy();
  // The hub as a client reaches it through the proxy.
  HubAddress address() const { return address_; }
  // Frozen (SIGSTOP), the proxy keeps its connections open and forwards nothing: a hub that
  // stopped answering, as behind a blackholed WAN link. Thawed (SIGCONT), it goes on.
  void Freeze(bool frozen);

 private:
  WanProxy() = default;
  pid_t pid_ = -1;
  HubAddress address_;
};

// A dead hub that still has its port open: a loopback listener that accepts connections and
// never writes a byte, so connect() succeeds and every RPC waits until the caller's bound.
class Blackhole {
 public:
  Blackhole();
  ~Blackhole();
  Blackhole(const Blackhole&) = delete;
  Blackhole& operator=(const Blackhole&) = delete;
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> accepted_;
  std::thread thread_;
};

// The same hub address spoken to over `version` (v4.1: the NFS port only).
HubAddress WithNfsVersion(HubAddress address, NfsVersion version);

// Binds port 0 on 127.0.0.1 and returns the port the kernel chose.
uint16_t FreePort();
// Runs a shell command, returns its exit status; output goes to the test log.
int Run(const std::string& command);

}  // namespace spoke::testing
