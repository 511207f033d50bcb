// ExportAdmin for NFSv4.1 hubs (Amazon EFS, v4-only NAS): the same operations as
// LibnfsExportAdmin, through the agent's NFSv4.1 client (Nfs4Remote, one AUTH_SYS identity per
// client). ExportAdminByVersion picks one of the two by the hub address's nfs_version.
#pragma once

#include "csi-controller/export_admin.h"

namespace spoke::controller {

class Nfs4ExportAdmin : public ExportAdmin {
 public:
  Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub, std::chrono::seconds timeout,
                                              const HubIdentityParams& identity) override;
};

// NFSv3 hubs through `v3` (LibnfsExportAdmin), NFSv4.1 hubs through `v41` (Nfs4ExportAdmin).
class ExportAdminByVersion : public ExportAdmin {
 public:
  ExportAdminByVersion(std::unique_ptr<ExportAdmin> v3, std::unique_ptr<ExportAdmin> v41)
      : v3_(std::move(v3)), v41_(std::move(v41)) {}
  Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub, std::chrono::seconds timeout,
                                              const HubIdentityParams& identity) override {
    return (hub.nfs_version == NfsVersion::kV41 ? v41_ : v3_)->Open(hub, timeout, identity);
  }

 private:
  std::unique_ptr<ExportAdmin> v3_;
  std::unique_ptr<ExportAdmin> v41_;
};

}  // namespace spoke::controller
