// spoke-bind-agent: a stand-in for spoke-cache-agent that serves the agent API with plain
// bind mounts of the hub's export directory (the hub is a local ganesha, so share/path is a
// local directory). It lets csi-sanity and e2e/local exercise spoke-csi-node's real mounts
// (SyscallMounter, propagation, stale handling) independently of the FUSE data path.
//   spoke-bind-agent --config agent.yaml     (reads only `socket`)
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>

#include "agent.grpc.pb.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/volume.h"

namespace {

namespace agentpb = spoke::agent::v1;

class BindAgent final : public agentpb::Agent::Service {
 public:
  grpc::Status Mount(grpc::ServerContext*, const agentpb::MountRequest* req,
                     agentpb::MountResponse*) override {
    auto ctx = spoke::VolumeContext::FromMap(
        spoke::StringMap(req->volume_context().begin(), req->volume_context().end()));
    if (!ctx) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, ctx.error().message());
    std::string source = ctx->hub.share + (ctx->path.empty() ? "" : "/" + ctx->path);
    std::lock_guard<std::mutex> l(mu_);
    auto it = mounts_.find(req->target_path());
    if (it != mounts_.end()) {
      if (it->second.volume_id() != req->volume_id()) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "another volume is mounted there");
      }
      return grpc::Status::OK;
    }
    std::error_code ec;
    std::filesystem::create_directories(req->target_path(), ec);
    if (::mount(source.c_str(), req->target_path().c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "bind " + source + ": " + std::strerror(errno));
    }
    if (req->read_only() && ::mount(nullptr, req->target_path().c_str(), nullptr,
                                    MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      ::umount2(req->target_path().c_str(), MNT_DETACH);
      return grpc::Status(grpc::StatusCode::INTERNAL, "remount ro failed");
    }
    agentpb::MountInfo info;
    info.set_volume_id(req->volume_id());
    info.set_target_path(req->target_path());
    info.set_read_only(req->read_only());
    *info.mutable_volume_context() = req->volume_context();
    info.set_hub_reachable(true);
    mounts_[req->target_path()] = info;
    sources_[req->target_path()] = source;
    return grpc::Status::OK;
  }
  grpc::Status Unmount(grpc::ServerContext*, const agentpb::UnmountRequest* req,
                       agentpb::UnmountResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    if (mounts_.erase(req->target_path()) == 0) return grpc::Status::OK;
    sources_.erase(req->target_path());
    if (::umount2(req->target_path().c_str(), 0) != 0 && errno != EINVAL && errno != ENOENT) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::strerror(errno));
    }
    return grpc::Status::OK;
  }
  grpc::Status ListMounts(grpc::ServerContext*, const agentpb::ListMountsRequest*,
                          agentpb::ListMountsResponse* resp) override {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [_, m] : mounts_) *resp->add_mounts() = m;
    return grpc::Status::OK;
  }
  grpc::Status VolumeStats(grpc::ServerContext*, const agentpb::VolumeStatsRequest* req,
                           agentpb::VolumeStatsResponse* resp) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sources_.find(req->target_path());
    if (it == sources_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not mounted");
    struct statvfs st;
    if (::statvfs(it->second.c_str(), &st) != 0) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::strerror(errno));
    }
    resp->set_volume_id(mounts_[req->target_path()].volume_id());
    resp->set_hub_reachable(true);
    resp->set_hub_total_bytes(uint64_t(st.f_blocks) * st.f_frsize);
    resp->set_hub_available_bytes(uint64_t(st.f_bavail) * st.f_frsize);
    resp->set_hub_used_bytes(uint64_t(st.f_blocks - st.f_bfree) * st.f_frsize);
    resp->set_hub_total_inodes(st.f_files);
    resp->set_hub_free_inodes(st.f_ffree);
    return grpc::Status::OK;
  }

 private:
  std::mutex mu_;
  std::map<std::string, agentpb::MountInfo> mounts_;
  std::map<std::string, std::string> sources_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string config;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--config") config = argv[i + 1];
  }
  if (config.empty()) {
    std::cerr << "usage: spoke-bind-agent --config agent.yaml\n";
    return 2;
  }
  std::string socket;
  try {
    socket = YAML::LoadFile(config)["socket"].as<std::string>();
  } catch (const std::exception& e) {
    std::cerr << "spoke-bind-agent: " << config << ": " << e.what() << "\n";
    return 2;
  }
  BindAgent agent;
  spoke::GrpcServerOptions options;
  options.endpoint = "unix://" + socket;
  options.socket_mode = 0600;
  if (auto s = spoke::ServeUntilSignal(options, {&agent}); !s) {
    std::cerr << "spoke-bind-agent: " << s.error().message() << "\n";
    return 1;
  }
  return 0;
}
