#include "common/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/support/server_interceptor.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/log.h"

namespace spoke {
namespace {

// Logs each RPC with method, gRPC status code and duration. Failures log at warn level.
class LoggingInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit LoggingInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method()), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
              .count();
      if (status.ok()) {
        log::Debug("rpc", {{"method", method_}, {"code", "OK"}, {"ms", ms}});
      } else {
        log::Warn("rpc failed", {{"method", method_},
                                 {"code", static_cast<int>(status.error_code())},
                                 {"error", status.error_message()},
                                 {"ms", ms}});
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

class LoggingInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new LoggingInterceptor(info);
  }
};

}  // namespace

Result<std::string> UnixSocketPath(std::string_view endpoint) {
  std::string_view path = endpoint;
  if (path.starts_with("unix://")) {
    path.remove_prefix(7);
  } else if (path.find("://") != std::string_view::npos) {
    return Fail(Code::kInvalidArgument,
                "endpoint must be unix:///path/to.sock, got '" + std::string(endpoint) + "'");
  }
  if (path.empty() || path.front() != '/') {
    return Fail(Code::kInvalidArgument, "endpoint must be an absolute unix socket path, got '" +
                                            std::string(endpoint) + "'");
  }
  return std::string(path);
}

void DisableAbseilDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Result<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& options,
                                                      const std::vector<grpc::Service*>& services) {
  SPOKE_TRY(auto path, UnixSocketPath(options.endpoint));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // A socket file left by a killed process must not block the restart.
  ::unlink(path.c_str());

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<LoggingInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(factories));
  // bind() creates the socket file with 0777 & ~umask: set the umask so that it has its final
  // mode from the start, never a window in which another user could connect. Start-up runs
  // before any other thread creates files, so the process-wide umask is safe to borrow.
  mode_t previous = ::umask(~options.socket_mode & 0777);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(previous);
  if (!server) return Fail(Code::kUnavailable, "cannot listen on " + options.endpoint);
  // Also when the socket existed (a mode the umask can only narrow).
  if (::chmod(path.c_str(), options.socket_mode) != 0) {
    return Fail(Code::kPermissionDenied, "cannot chmod " + path);
  }
  log::Info("serving", {{"endpoint", options.endpoint}});
  return server;
}

Status ServeUntilSignal(const GrpcServerOptions& options,
                        const std::vector<grpc::Service*>& services,
                        const std::function<void()>& on_shutdown) {
  BlockShutdownSignals();
  SPOKE_TRY(auto server, StartGrpcServer(options, services));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  log::Info("shutting down", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  if (on_shutdown) on_shutdown();
  server->Shutdown(std::chrono::system_clock::now() + options.shutdown_grace);
  server->Wait();
  auto path = UnixSocketPath(options.endpoint);
  if (path) ::unlink(path->c_str());
  return {};
}

}  // namespace spoke
