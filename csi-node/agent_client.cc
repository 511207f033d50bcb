#include "csi-node/agent_client.h"

namespace spoke::node {

namespace agentpb = spoke::agent::v1;

AgentClient::AgentClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {
  grpc::ChannelArguments args;
  // The default backoff grows to 2 minutes: a restarted agent would stay "unreachable" that
  // long. The socket is local, so retrying every second at most costs nothing.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ =
      grpc::CreateCustomChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials(), args);
  stub_ = agentpb::Agent::NewStub(channel_);
}

void AgentClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
}

AgentError AgentClient::Translate(const grpc::Status& status, std::string_view call) const {
  AgentError e;
  e.code = status.error_code();
  // A channel that is not READY after the call never reached the agent.
  bool connected = channel_->GetState(false) == GRPC_CHANNEL_READY;
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    e.unreachable = true;
    e.message = "cache agent at " + socket_path_ + " did not answer " + std::string(call) +
                " within " + std::to_string(timeout_.count()) + " ms" +
                (connected ? "" : " (not connected)");
  } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !connected) {
    e.unreachable = true;
    e.message = "cache agent not reachable at " + socket_path_ + ": " + status.error_message();
  } else {
    e.message = "cache agent " + std::string(call) + ": " + status.error_message();
  }
  return e;
}

AgentResult<void> AgentClient::Mount(const std::string& volume_id, const StringMap& volume_context,
                                     const std::string& target, bool read_only) {
  agentpb::MountRequest req;
  req.set_volume_id(volume_id);
  for (const auto& [k, v] : volume_context) (*req.mutable_volume_context())[k] = v;
  req.set_target_path(target);
  req.set_read_only(read_only);
  agentpb::MountResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub_->Mount(&ctx, req, &resp);
  if (!s.ok()) return std::unexpected(Translate(s, "Mount"));
  return {};
}

AgentResult<void> AgentClient::Unmount(const std::string& target) {
  agentpb::UnmountRequest req;
  req.set_target_path(target);
  agentpb::UnmountResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub_->Unmount(&ctx, req, &resp);
  if (!s.ok()) return std::unexpected(Translate(s, "Unmount"));
  return {};
}

AgentResult<std::vector<agentpb::MountInfo>> AgentClient::ListMounts() {
  agentpb::ListMountsRequest req;
  agentpb::ListMountsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub_->ListMounts(&ctx, req, &resp);
  if (!s.ok()) return std::unexpected(Translate(s, "ListMounts"));
  return std::vector<agentpb::MountInfo>(resp.mounts().begin(), resp.mounts().end());
}

AgentResult<agentpb::VolumeStatsResponse> AgentClient::VolumeStats(const std::string& volume_id,
                                                                   const std::string& target_path) {
  agentpb::VolumeStatsRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target_path);
  agentpb::VolumeStatsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub_->VolumeStats(&ctx, req, &resp);
  if (!s.ok()) return std::unexpected(Translate(s, "VolumeStats"));
  return resp;
}

}  // namespace spoke::node
