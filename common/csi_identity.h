// CSI Identity, served by both spoke-csi-controller and spoke-csi-node: driver name, the
// build's version, plugin capabilities, Probe.
#pragma once

#include "csi.grpc.pb.h"

namespace spoke {

class IdentityServer final : public csi::v1::Identity::Service {
 public:
  // CONTROLLER_SERVICE is always listed: the driver has one (spoke-csi-controller), and COs
  // and csi-sanity ask any endpoint which services the *plugin* has.
  // VOLUME_ACCESSIBILITY_CONSTRAINTS only when the serving node reports a topology.
  explicit IdentityServer(bool has_topology = false) : has_topology_(has_topology) {}

  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* resp) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const csi::v1::GetPluginCapabilitiesRequest*,
                                     csi::v1::GetPluginCapabilitiesResponse* resp) override;
  // Always ready: neither plugin keeps state that needs warming up; a down hub or agent is
  // reported per call (Unavailable) and per volume (VolumeCondition). A failing Probe would
  // make the liveness probe restart a container, which cannot bring a hub back.
  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* resp) override;

 private:
  bool has_topology_;
};

}  // namespace spoke
