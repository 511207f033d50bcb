// Test fixtures around real processes: an nfs-ganesha hub (scripts/spoke-hub) and the WAN
// delay proxy (spoke-wan-proxy). Both are started in a fresh temporary directory and always
// stopped and removed in the destructor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/volume.h"

namespace spoke::testing {

// A temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "spoke-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string SourceDir();  // $SPOKE_SOURCE_DIR (set by ctest) or the compiled-in default
std::string BinaryDir();  // $SPOKE_BINARY_DIR

class TestHub {
 public:
  // Starts ganesha serving <tmp>/export over NFSv3 on loopback high ports. Aborts the test
  // (gtest FAIL) if it cannot.
  static std::unique_ptr<TestHub> Start();
  ~TestHub();

  const std::string& export_dir() const { return export_dir_; }
  uint16_t nfs_port() const { return nfs_port_; }
  uint16_t mount_port() const { return mount_port_; }
  // The hub as a client reaches it directly (no WAN delay).
  HubAddress address() const;

  // Stops ganesha (SIGTERM) and starts it again on the same ports: a hub outage.
  void Stop();
  bool Restart();

 private:
  TestHub() = default;
  std::unique_ptr<TempDir> dir_;
  std::string export_dir_;
  uint16_t nfs_port_ = 0;
  uint16_t mount_port_ = 0;
};

// spoke-wan-proxy forwarding listen ports to the hub's NFS and MOUNT ports with a one-way
// delay on each direction (30 ms each way = 60 ms RTT).
class WanProxy {
 public:
  static std::unique_ptr<WanProxy> Start(const TestHub& hub, int one_way_delay_ms);
  ~WanProxy();
  // The hub as a client reaches it through the proxy.
  HubAddress address() const { return address_; }

 private:
  WanProxy() = default;
  pid_t pid_ = -1;
  HubAddress address_;
};

// Binds port 0 on 127.0.0.1 and returns the port the kernel chose.
uint16_t FreePort();
// Runs a shell command, returns its exit status; output goes to the test log.
int Run(const std::string& command);

}  // namespace spoke::testing
