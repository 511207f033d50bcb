// AgentService: the agent API (proto/agent.proto) over MountManager. Each RPC checks its
// arguments first (INVALID_ARGUMENT naming the field), then looks the volume up (NOT_FOUND),
// then acts; every call is idempotent.
#pragma once

#if !__has_include("spoke_layer/agent.h")
#error "wrong-way include: cache-agent/agent/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <functional>

#include "agent.grpc.pb.h"
#include "cache-agent/agent/mount_manager.h"
#include "common/status.h"

namespace spoke::agent {

// Code -> grpc::StatusCode with the message.
grpc::Status ToGrpc(const Error& error);

class AgentService final : public spoke::agent::v1::Agent::Service {
 public:
  struct Options {
    uint64_t cache_capacity_bytes = 0;  // the agent's whole cache quota
    uint32_t block_size = 1 << 20;      // for Evict's byte count
    // At most one Warmup progress message per interval (plus the last one).
    std::chrono::milliseconds progress_interval{200};
  };

  AgentService(MountManager& mounts, Options options) : mounts_(mounts), options_(options) {}

  grpc::Status Mount(grpc::ServerContext* ctx, const v1::MountRequest* req,
                     v1::MountResponse* resp) override;
  grpc::Status Unmount(grpc::ServerContext* ctx, const v1::UnmountRequest* req,
                       v1::UnmountResponse* resp) override;
  grpc::Status ListMounts(grpc::ServerContext* ctx, const v1::ListMountsRequest* req,
                          v1::ListMountsResponse* resp) override;
  grpc::Status VolumeStats(grpc::ServerContext* ctx, const v1::VolumeStatsRequest* req,
                           v1::VolumeStatsResponse* resp) override;
  grpc::Status Warmup(grpc::ServerContext* ctx, const v1::WarmupRequest* req,
                      grpc::ServerWriter<v1::WarmupProgress>* writer) override;
  grpc::Status Evict(grpc::ServerContext* ctx, const v1::EvictRequest* req,
                     v1::EvictResponse* resp) override;
  grpc::Status Hint(grpc::ServerContext* ctx, const v1::HintRequest* req,
                    v1::HintResponse* resp) override;

 private:
  // The mounted volume `volume_id`, or INVALID_ARGUMENT / NOT_FOUND.
  Result<std::shared_ptr<MountedVolume>> Find(const std::string& volume_id);

  MountManager& mounts_;
  Options options_;
};

}  // namespace spoke::agent
