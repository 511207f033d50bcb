// A Node service that does nothing, for csi-sanity's controller run only.
//
// csi-sanity's volume cleanup (pkg/sanity/resources.go) calls NodeUnpublishVolume and
// NodeGetCapabilities on its node endpoint after every controller test, even when the Node
// tests are skipped, and fails the test when NodeGetCapabilities errors. The controller
// serves no Node service, and the real node plugin is tested by its own sanity run, so
// e2e/sanity/run-controller.sh points csi-sanity's node endpoint at this stub: no
// capabilities (so no NodeUnstageVolume), and NodeUnpublishVolume of something never
// published is OK, as CSI requires.
//   spoke-sanity-node-stub unix:///path/node.sock
#include <cstdio>

#include "common/grpc_server.h"
#include "common/version.h"
#include "csi.grpc.pb.h"

namespace {

class StubIdentity final : public csi::v1::Identity::Service {
  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name(std::string(spoke::kDriverName));
    resp->set_vendor_version(std::string(spoke::Version()));
    return grpc::Status::OK;
  }
  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const csi::v1::GetPluginCapabilitiesRequest*,
                                     csi::v1::GetPluginCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }
};

class StubNode final : public csi::v1::Node::Service {
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
                                   csi::v1::NodeGetCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status NodeUnpublishVolume(grpc::ServerContext*, const csi::v1::NodeUnpublishVolumeRequest*,
                                   csi::v1::NodeUnpublishVolumeResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* resp) override {
    resp->set_node_id("sanity-node-stub");
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: spoke-sanity-node-stub unix:///path/node.sock\n");
    return 2;
  }
  StubIdentity identity;
  StubNode node;
  spoke::GrpcServerOptions options;
  options.endpoint = argv[1];
  auto served = spoke::ServeUntilSignal(options, {&identity, &node});
  if (!served) {
    std::fprintf(stderr, "spoke-sanity-node-stub: %s\n", served.error().message().c_str());
    return 1;
  }
  return 0;
}
