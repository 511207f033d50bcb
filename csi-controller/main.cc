// spoke-csi-controller: CSI Identity + Controller for Spoke.
//   spoke-csi-controller --endpoint unix:///csi/csi.sock [--config FILE] [--log-level LEVEL]
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "common/csi_identity.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/version.h"
#include "csi-controller/controller_config.h"
#include "csi-controller/controller_server.h"
#include "csi-controller/libnfs_export_admin.h"
#include "csi-controller/nfs4_export_admin.h"

namespace {

void Usage(std::FILE* out) {
  std::fprintf(out,
               "usage: spoke-csi-controller --endpoint unix:///path/csi.sock [--config FILE]\n"
               "                            [--log-level debug|info|warn|error] [--version]\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spoke;
  DisableAbseilDeadlockDetection();
  std::string endpoint, config_path, level_flag;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      std::string prefix = std::string(flag) + "=";
      if (arg.rfind(prefix, 0) == 0) return argv[i] + prefix.size();
      if (arg == flag && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (arg == "--version") {
      std::printf("spoke-csi-controller %.*s (%.*s)\n", static_cast<int>(Version().size()),
                  Version().data(), static_cast<int>(kDriverName.size()), kDriverName.data());
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      Usage(stdout);
      return 0;
    } else if (const char* v = value("--endpoint")) {
      endpoint = v;
    } else if (const char* v = value("--config")) {
      config_path = v;
    } else if (const char* v = value("--log-level")) {
      level_flag = v;
    } else {
      std::fprintf(stderr, "spoke-csi-controller: unknown or incomplete argument '%s'\n",
                   arg.c_str());
      Usage(stderr);
      return 2;
    }
  }
  if (endpoint.empty()) {
    std::fprintf(stderr, "spoke-csi-controller: --endpoint is required\n");
    Usage(stderr);
    return 2;
  }
  controller::ControllerConfig config;
  if (!config_path.empty()) {
    auto loaded = controller::ControllerConfig::Load(config_path);
    if (!loaded) {
      std::fprintf(stderr, "spoke-csi-controller: %s\n", loaded.error().message().c_str());
      return 2;
    }
    config = *loaded;
  }
  std::string level_name = level_flag.empty() ? config.log_level : level_flag;
  auto level = log::ParseLevel(level_name);
  if (!level) {
    std::fprintf(stderr, "spoke-csi-controller: --log-level: unknown level '%s'\n",
                 level_name.c_str());
    return 2;
  }
  log::SetLevel(*level);
  log::Info("starting", {{"driver", kDriverName},
                         {"version", Version()},
                         {"hubTimeoutSeconds", config.hub_timeout_seconds},
                         {"archivePrefix", config.archive_prefix}});

  IdentityServer identity;
  controller::ControllerServer ctl(config, std::make_unique<controller::ExportAdminByVersion>(
                                               std::make_unique<controller::LibnfsExportAdmin>(),
                                               std::make_unique<controller::Nfs4ExportAdmin>()));
  GrpcServerOptions options;
  options.endpoint = endpoint;
  auto served = ServeUntilSignal(options, {&identity, &ctl});
  if (!served) {
    log::Error("cannot serve", {{"endpoint", endpoint}, {"error", served.error().message()}});
    return 1;
  }
  log::Info("stopped");
  return 0;
}
