// CSI Controller service: volumes are directories of a hub's NFS export, managed through an
// ExportAdmin (libnfs in production, a fake in unit tests).
//
//   mode=dataset  an existing directory, read-only; CreateVolume only checks that it exists,
//                 DeleteVolume never touches it.
//   mode=scratch  a directory created per volume (subDir template), read-write; DeleteVolume
//                 honours onDelete: delete (rm -r), retain (nothing), archive (rename to
//                 <archivePrefix><dir>-<UTC time> in the same parent).
//
// Idempotency (CreateVolume by name): a scratch directory carries `.spoke-volume.json`
// (volume_record.h) naming the volume, its canonical parameters and capacity, so a retry
// after a controller restart finds the same volume, and a different request for the same
// name gets AlreadyExists. Dataset volumes are deterministic (the id is a function of the
// parameters); the name -> parameters map for them (and for scratch volumes, to catch a
// same-name request whose subDir now expands elsewhere) lives in memory only.
//
// Each RPC checks its arguments first (InvalidArgument naming the field), holds a
// per-directory guard (a concurrent call for the same volume gets Aborted), and bounds
// every hub call (Unavailable after the bound).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/grpc_status.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/volume.h"
#include "csi-controller/controller_config.h"
#include "csi-controller/export_admin.h"
#include "csi.grpc.pb.h"

namespace spoke::controller {

class ControllerServer final : public csi::v1::Controller::Service {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  ControllerServer(ControllerConfig config, std::unique_ptr<ExportAdmin> admin,
                   Clock clock = &std::chrono::system_clock::now);

  grpc::Status CreateVolume(grpc::ServerContext* ctx, const csi::v1::CreateVolumeRequest* req,
                            csi::v1::CreateVolumeResponse* resp) override;
  grpc::Status DeleteVolume(grpc::ServerContext* ctx, const csi::v1::DeleteVolumeRequest* req,
                            csi::v1::DeleteVolumeResponse* resp) override;
  grpc::Status ValidateVolumeCapabilities(
      grpc::ServerContext* ctx, const csi::v1::ValidateVolumeCapabilitiesRequest* req,
      csi::v1::ValidateVolumeCapabilitiesResponse* resp) override;
  grpc::Status ControllerGetCapabilities(grpc::ServerContext* ctx,
                                         const csi::v1::ControllerGetCapabilitiesRequest* req,
                                         csi::v1::ControllerGetCapabilitiesResponse* resp) override;
  grpc::Status GetCapacity(grpc::ServerContext* ctx, const csi::v1::GetCapacityRequest* req,
                           csi::v1::GetCapacityResponse* resp) override;

  // The archive name of `leaf` at time `t`: <prefix><leaf>-<YYYYMMDDTHHMMSSZ>.
  std::string ArchiveName(const std::string& leaf, std::chrono::system_clock::time_point t) const;

 private:
  // What a CreateVolume made, remembered for same-name requests in this process.
  struct Known {
    StringMap parameters;
    int64_t capacity_bytes = 0;
    std::string volume_id;
  };

  // Holds the guard of one volume directory for the lifetime of the object.
  class Guard {
   public:
    Guard(ControllerServer* server, std::string key);
    ~Guard();
    bool held() const { return held_; }

   private:
    ControllerServer* server_;
    std::string key_;
    bool held_ = false;
  };

  Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub, double timeout_seconds,
                                              const HubIdentityParams& identity);
  Result<csi::v1::Volume> CreateScratch(const std::string& name, const VolumeParams& params,
                                        const std::string& path, const StringMap& canonical,
                                        int64_t required, int64_t limit);
  Status CreateDataset(const VolumeParams& params);
  // ALREADY_EXISTS when this process made volume `name` with other parameters or a capacity
  // outside the range.
  grpc::Status CheckSameAsKnown(const std::string& name, const StringMap& canonical,
                                int64_t required, int64_t limit) EXCLUDES(mu_);
  Status DeleteScratch(const VolumeId& id, const std::string& id_text);

  ControllerConfig config_;
  std::unique_ptr<ExportAdmin> admin_;
  Clock clock_;

  Mutex mu_;
  std::set<std::string> busy_ GUARDED_BY(mu_);          // directories with a call in flight
  std::map<std::string, Known> known_ GUARDED_BY(mu_);  // volume name -> what was made
};

}  // namespace spoke::controller
