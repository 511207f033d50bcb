// Runs gRPC services on a unix socket until SIGTERM/SIGINT, then shuts down cleanly
// (in-flight calls get a grace period). Every call is logged by a request interceptor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace spoke {

// "unix:///csi/csi.sock" or "/csi/csi.sock" -> "/csi/csi.sock". Rejects other schemes.
Result<std::string> UnixSocketPath(std::string_view endpoint);

struct GrpcServerOptions {
  std::string endpoint;         // unix:///path
  unsigned socket_mode = 0660;  // root-only sockets use 0600
  std::chrono::milliseconds shutdown_grace{5000};
};

// Blocks SIGTERM/SIGINT in the calling thread (call before starting other threads so they
// inherit the mask), serves until one arrives, then calls `on_shutdown` (stop background
// work) and shuts the server down. Returns an error if the socket cannot be bound.
Status ServeUntilSignal(const GrpcServerOptions& options,
                        const std::vector<grpc::Service*>& services,
                        const std::function<void()>& on_shutdown = {});

// Blocks SIGTERM and SIGINT in the calling thread; threads created afterwards inherit it.
void BlockShutdownSignals();

// Turns off Abseil's mutex deadlock detection, which gRPC's locks go through. Debian builds
// Abseil without NDEBUG, so it is on by default: every lock taken while another is held
// updates a process-wide lock graph under a global lock (2.7x the cost of a nested lock pair
// here), on every call. Call first thing in main, before any gRPC object exists.
void DisableAbseilDeadlockDetection();

// Same as ServeUntilSignal but returns the started server instead (tests, embedding).
Result<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& options,
                                                      const std::vector<grpc::Service*>& services);

}  // namespace spoke
