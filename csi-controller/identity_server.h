// CSI Identity service of spoke-csi-controller: driver name, build version, capabilities
// (CONTROLLER_SERVICE; no topology: every node reaches every hub the same way), Probe.
#pragma once

#include "csi.grpc.pb.h"

namespace spoke::controller {

class IdentityServer final : public csi::v1::Identity::Service {
 public:
  grpc::Status GetPluginInfo(grpc::ServerContext* ctx, const csi::v1::GetPluginInfoRequest* req,
                             csi::v1::GetPluginInfoResponse* resp) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext* ctx,
                                     const csi::v1::GetPluginCapabilitiesRequest* req,
                                     csi::v1::GetPluginCapabilitiesResponse* resp) override;
  // Always ready: the controller holds no connection between calls, so there is nothing
  // to be unready about (a down hub is reported per call, as Unavailable).
  grpc::Status Probe(grpc::ServerContext* ctx, const csi::v1::ProbeRequest* req,
                     csi::v1::ProbeResponse* resp) override;
};

}  // namespace spoke::controller
