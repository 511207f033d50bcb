#include "cache-agent/agent/http_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/thread_name.h"

namespace spoke::agent {

std::string HealthJson(const MountManager& mounts, bool serving) {
  nlohmann::json j;
  j["status"] = serving ? "serving" : "shutting down";
  j["mounts"] = nlohmann::json::array();
  bool all_reachable = true;
  size_t pending = 0;
  for (const MountStatus& m : mounts.List()) {
    nlohmann::json e;
    // No volume id, target path or hub error text: they name shares and pod UIDs
    // (`spokectl status` on the root-only socket has them).
    e["volume"] = VolumeMetricsLabel(m.record.volume_id);
    e["state"] = m.mounted ? "mounted" : "restoring";
    e["hubReachable"] = m.hub_reachable;
    if (!m.mounted) {
      ++pending;
      e["restoreAttempts"] = m.restore_attempts;
    }
    all_reachable = all_reachable && m.hub_reachable && m.mounted;
    j["mounts"].push_back(std::move(e));
  }
  j["hubReachable"] = all_reachable;
  j["mountsPending"] = pending;
  return j.dump() + "\n";
}

HttpServer::HttpServer(metrics::Registry& registry, const MountManager& mounts)
    : registry_(registry), mounts_(mounts), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const std::string& host, int port) {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    bool serving = serving_.load();
    res.status = serving ? 200 : 503;
    res.set_content(HealthJson(mounts_, serving), "application/json");
  });
  int bound =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return Fail(Code::kUnavailable,
                "metricsAddress: cannot listen on " + host + ":" + std::to_string(port));
  }
  port_ = bound;
  serving_ = true;
  thread_ = std::thread([this] {
    NameThisThread("spoke-http");
    server_->listen_after_bind();
  });
  log::Info("serving metrics", {{"address", host + ":" + std::to_string(port_)}});
  return Ok();
}

void HttpServer::Stop() {
  serving_ = false;
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace spoke::agent
