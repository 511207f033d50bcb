// Client of the cache agent's API (proto/agent.proto) on its unix socket. Every call carries
// a deadline, so a dead or hung agent costs at most `timeout`, never a hang; the channel
// retries the connection quickly (100 ms .. 1 s backoff) so a restarted agent is found again
// within a second.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "agent.grpc.pb.h"
#include "common/volume.h"

namespace spoke::node {

struct AgentError {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;  // already names the agent call and the socket
  // The agent did not answer at all (no socket, connection refused, connect timed out, or
  // the deadline expired): its own errors (a bad volume context, a hub it cannot reach)
  // leave this false.
  bool unreachable = false;
};

template <typename T>
using AgentResult = std::expected<T, AgentError>;

class AgentClient {
 public:
  // `socket_path` is a plain path ("/run/spoke/agent.sock").
  AgentClient(std::string socket_path, std::chrono::milliseconds timeout);

  // Mounts the volume at `target` (idempotent). Errors: the agent's code (INVALID_ARGUMENT,
  // ALREADY_EXISTS, UNAVAILABLE for the hub, ...), or UNAVAILABLE/DEADLINE_EXCEEDED with
  // unreachable=true.
  AgentResult<void> Mount(const std::string& volume_id, const StringMap& volume_context,
                          const std::string& target, bool read_only);
  // Unmounts `target` (idempotent: not mounted is success).
  AgentResult<void> Unmount(const std::string& target);
  AgentResult<std::vector<spoke::agent::v1::MountInfo>> ListMounts();
  // One of volume_id / target_path.
  AgentResult<spoke::agent::v1::VolumeStatsResponse> VolumeStats(const std::string& volume_id,
                                                                 const std::string& target_path);

  const std::string& socket_path() const { return socket_path_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void SetDeadline(grpc::ClientContext* ctx) const;
  AgentError Translate(const grpc::Status& status, std::string_view call) const;

  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<spoke::agent::v1::Agent::Stub> stub_;
};

}  // namespace spoke::node
