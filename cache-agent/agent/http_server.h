// The agent's HTTP side: GET /metrics (Prometheus text format) and GET /healthz (200 with a
// JSON body listing the mounts and whether the hub answers; 503 while shutting down), served
// by cpp-httplib on its own thread.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "cache-agent/agent/mount_manager.h"
#include "common/metrics.h"
#include "common/status.h"

namespace httplib {
class Server;
}

namespace spoke::agent {

// The /healthz body: {"status":"serving","mounts":[...],"hubReachable":bool,...}.
std::string HealthJson(const MountManager& mounts, bool serving);

class HttpServer {
 public:
  HttpServer(metrics::Registry& registry, const MountManager& mounts);
  ~HttpServer();
  // Binds host:port (port 0 = any; see port()). kUnavailable when it cannot bind.
  Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // /healthz answers 503 from now on; then the listener stops. Idempotent.
  void Stop();

 private:
  metrics::Registry& registry_;
  const MountManager& mounts_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> serving_{false};
  int port_ = 0;
};

}  // namespace spoke::agent
