// ExportAdmin over libnfs 4.0.0's synchronous NFSv3 API. One libnfs context per session
// (libnfs contexts are single-threaded), created for one CSI request and destroyed after it.
// Every context gets nfs_set_timeout(bound): a hub that does not answer fails the call with
// kUnavailable after the bound instead of hanging the request.
#pragma once

#include "csi-controller/export_admin.h"

namespace spoke::controller {

class LibnfsExportAdmin : public ExportAdmin {
 public:
  Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub, std::chrono::seconds timeout,
                                              const HubIdentityParams& identity) override;
};

}  // namespace spoke::controller
