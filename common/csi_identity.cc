#include "common/csi_identity.h"

#include "common/version.h"

namespace spoke {

grpc::Status IdentityServer::GetPluginInfo(grpc::ServerContext*,
                                           const csi::v1::GetPluginInfoRequest*,
                                           csi::v1::GetPluginInfoResponse* resp) {
  resp->set_name(std::string(kDriverName));
  resp->set_vendor_version(std::string(Version()));
  return grpc::Status::OK;
}

grpc::Status IdentityServer::GetPluginCapabilities(grpc::ServerContext*,
                                                   const csi::v1::GetPluginCapabilitiesRequest*,
                                                   csi::v1::GetPluginCapabilitiesResponse* resp) {
  resp->add_capabilities()->mutable_service()->set_type(
      csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
  if (has_topology_) {
    resp->add_capabilities()->mutable_service()->set_type(
        csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  }
  return grpc::Status::OK;
}

grpc::Status IdentityServer::Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                                   csi::v1::ProbeResponse* resp) {
  resp->mutable_ready()->set_value(true);
  return grpc::Status::OK;
}

}  // namespace spoke
