// CSI Identity of spoke-csi-node. Same name and version as the controller's. It lists
// CONTROLLER_SERVICE because the driver provides one (spoke-csi-controller, another
// Deployment) and COs and csi-sanity ask the node endpoint which services the *plugin* has;
// VOLUME_ACCESSIBILITY_CONSTRAINTS only when this node reports a topology.
// Not shared with csi-controller's IdentityServer: that one lives in the controller library,
// which links libnfs, and hard-codes the controller's view.
#pragma once

#include "csi.grpc.pb.h"

namespace spoke::node {

class IdentityServer final : public csi::v1::Identity::Service {
 public:
  explicit IdentityServer(bool has_topology) : has_topology_(has_topology) {}

  grpc::Status GetPluginInfo(grpc::ServerContext* ctx, const csi::v1::GetPluginInfoRequest* req,
                             csi::v1::GetPluginInfoResponse* resp) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext* ctx,
                                     const csi::v1::GetPluginCapabilitiesRequest* req,
                                     csi::v1::GetPluginCapabilitiesResponse* resp) override;
  // Always ready: the node plugin keeps no state that needs warming up, and a down agent is
  // reported per call (Unavailable) and per volume (VolumeCondition). Failing Probe would make
  // the liveness probe restart this container, which cannot bring the agent back.
  grpc::Status Probe(grpc::ServerContext* ctx, const csi::v1::ProbeRequest* req,
                     csi::v1::ProbeResponse* resp) override;

 private:
  bool has_topology_;
};

}  // namespace spoke::node
