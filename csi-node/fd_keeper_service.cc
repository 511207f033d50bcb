#include "csi-node/fd_keeper_service.h"

#include <filesystem>
#include <system_error>

namespace spoke::node {

Result<std::unique_ptr<FdKeeperServer>> StartFuseKeeper(const NodeConfig& config) {
  if (config.fuse_keeper_socket.empty()) return std::unique_ptr<FdKeeperServer>();
  std::error_code ec;
  auto dir = std::filesystem::path(config.fuse_keeper_socket).parent_path();
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Fail(Code::kIo,
                "fuseKeeperSocket: cannot create '" + dir.string() + "': " + ec.message());
  }
  FdKeeperServer::Config keeper;
  keeper.socket_path = config.fuse_keeper_socket;
  keeper.orphan_timeout = config.fuse_keeper_orphan_timeout;
  auto server = std::make_unique<FdKeeperServer>(keeper);
  SPOKE_RETURN_IF_ERROR_WRAP(server->Start(), "fuseKeeperSocket");
  return server;
}

}  // namespace spoke::node
