// A minimal cache agent (proto/agent.proto) served in-process on a unix socket: Mount and
// Unmount edit the FakeMounter's table like the real agent's FUSE mounts would; VolumeStats
// returns figures the test sets; `delay` makes it hang.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <thread>

#include "agent.grpc.pb.h"
#include "common/thread_annotations.h"
#include "tests/csi-node/fake_mounter.h"

namespace spoke::node::testing {

namespace agentpb = spoke::agent::v1;

class FakeAgent final : public agentpb::Agent::Service {
 public:
  explicit FakeAgent(FakeMounter& mounter) : mounter_(mounter) {}

  struct MountCall {
    std::string volume_id;
    std::map<std::string, std::string> context;
    std::string target;
    bool read_only;
  };

  // Set by the test's thread, read by the server's handler threads, so under mu_ (a call that
  // is still running when the test changes them races with it otherwise).
  void set_delay(std::chrono::milliseconds delay) {
    MutexLock l(mu_);
    delay_ = delay;
  }
  void set_mount_status(grpc::Status status) {
    MutexLock l(mu_);
    mount_status_ = std::move(status);
  }
  agentpb::VolumeStatsResponse stats() {
    MutexLock l(mu_);
    return stats_;
  }
  void set_stats(agentpb::VolumeStatsResponse stats) {
    MutexLock l(mu_);
    stats_ = std::move(stats);
  }

  std::vector<MountCall> mount_calls() {
    MutexLock l(mu_);
    return mount_calls_;
  }
  std::vector<std::string> unmount_calls() {
    MutexLock l(mu_);
    return unmount_calls_;
  }
  // The agent restarted without its mounts: it forgets them (the kernel's stay, stale).
  void Forget() {
    MutexLock l(mu_);
    mounts_.clear();
  }

  grpc::Status Mount(grpc::ServerContext*, const agentpb::MountRequest* req,
                     agentpb::MountResponse*) override {
    std::this_thread::sleep_for(Delay());
    MutexLock l(mu_);
    mount_calls_.push_back({req->volume_id(),
                            {req->volume_context().begin(), req->volume_context().end()},
                            req->target_path(),
                            req->read_only()});
    if (!mount_status_.ok()) return mount_status_;
    auto it = mounts_.find(req->target_path());
    if (it != mounts_.end()) {
      if (it->second.volume_id() != req->volume_id()) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "another volume is mounted there");
      }
      return grpc::Status::OK;
    }
    std::filesystem::create_directories(req->target_path());
    mounter_.AddFuseMount(req->target_path(), req->read_only());
    agentpb::MountInfo info;
    info.set_volume_id(req->volume_id());
    info.set_target_path(req->target_path());
    info.set_read_only(req->read_only());
    *info.mutable_volume_context() = req->volume_context();
    info.set_hub_reachable(true);
    mounts_[req->target_path()] = info;
    return grpc::Status::OK;
  }

  grpc::Status Unmount(grpc::ServerContext*, const agentpb::UnmountRequest* req,
                       agentpb::UnmountResponse*) override {
    std::this_thread::sleep_for(Delay());
    MutexLock l(mu_);
    unmount_calls_.push_back(req->target_path());
    if (mounts_.erase(req->target_path()) > 0) {
      (void)mounter_.Unmount(req->target_path(), /*lazy=*/true);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListMounts(grpc::ServerContext*, const agentpb::ListMountsRequest*,
                          agentpb::ListMountsResponse* resp) override {
    std::this_thread::sleep_for(Delay());
    MutexLock l(mu_);
    for (const auto& [_, m] : mounts_) *resp->add_mounts() = m;
    return grpc::Status::OK;
  }

  grpc::Status VolumeStats(grpc::ServerContext*, const agentpb::VolumeStatsRequest* req,
                           agentpb::VolumeStatsResponse* resp) override {
    std::this_thread::sleep_for(Delay());
    MutexLock l(mu_);
    auto it = mounts_.find(req->target_path());
    if (it == mounts_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not mounted");
    *resp = stats_;
    resp->set_volume_id(it->second.volume_id());
    return grpc::Status::OK;
  }

 private:
  std::chrono::milliseconds Delay() {
    MutexLock l(mu_);
    return delay_;
  }

  FakeMounter& mounter_;
  Mutex mu_;
  std::chrono::milliseconds delay_ GUARDED_BY(mu_){0};
  grpc::Status mount_status_ GUARDED_BY(mu_) = grpc::Status::OK;
  agentpb::VolumeStatsResponse stats_ GUARDED_BY(mu_);
  std::map<std::string, agentpb::MountInfo> mounts_ GUARDED_BY(mu_);
  std::vector<MountCall> mount_calls_ GUARDED_BY(mu_);
  std::vector<std::string> unmount_calls_ GUARDED_BY(mu_);
};

}  // namespace spoke::node::testing
