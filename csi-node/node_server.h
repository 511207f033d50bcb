// CSI Node service of spoke-csi-node.
//
//   NodeStageVolume     asks the cache agent to mount the volume (FUSE) at the staging path.
//   NodePublishVolume   bind-mounts the staging path into the pod's target directory
//                       (read-only remount for datasets / readonly requests). Ephemeral inline
//                       volumes have no stage: the agent mounts them at a private directory
//                       under <stateDir>/ephemeral first.
//   NodeUnpublishVolume unmounts the target and removes the directory; ephemeral volumes'
//                       private agent mount goes too.
//   NodeUnstageVolume   asks the agent to unmount the staging path.
//   NodeGetVolumeStats  hub capacity (bytes, inodes) from the agent, and a VolumeCondition:
//                       abnormal when the hub or the agent cannot be reached, or the mount is
//                       stale; the cache figures go in the condition's message.
//
// Every call checks its arguments first (InvalidArgument naming the field), is idempotent,
// and recovers stale FUSE mounts (the agent died under them: ENOTCONN) by detaching them.
// Calls on the same staging or target path are serialised; a second concurrent one gets
// Aborted, as the spec recommends.
#pragma once

#include <mutex>
#include <set>
#include <string>

#include "common/thread_annotations.h"
#include "csi-node/agent_client.h"
#include "csi-node/mounter.h"
#include "csi-node/node_config.h"
#include "csi.grpc.pb.h"

namespace spoke::node {

// volume_context key kubelet sets on CSI ephemeral inline volumes.
inline constexpr std::string_view kCtxEphemeral = "csi.storage.k8s.io/ephemeral";

class NodeServer final : public csi::v1::Node::Service {
 public:
  // `mounter` and `agent` must outlive the server.
  NodeServer(NodeConfig config, Mounter& mounter, AgentClient& agent);

  grpc::Status NodeStageVolume(grpc::ServerContext* ctx, const csi::v1::NodeStageVolumeRequest* req,
                               csi::v1::NodeStageVolumeResponse* resp) override;
  grpc::Status NodeUnstageVolume(grpc::ServerContext* ctx,
                                 const csi::v1::NodeUnstageVolumeRequest* req,
                                 csi::v1::NodeUnstageVolumeResponse* resp) override;
  grpc::Status NodePublishVolume(grpc::ServerContext* ctx,
                                 const csi::v1::NodePublishVolumeRequest* req,
                                 csi::v1::NodePublishVolumeResponse* resp) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext* ctx,
                                   const csi::v1::NodeUnpublishVolumeRequest* req,
                                   csi::v1::NodeUnpublishVolumeResponse* resp) override;
  grpc::Status NodeGetVolumeStats(grpc::ServerContext* ctx,
                                  const csi::v1::NodeGetVolumeStatsRequest* req,
                                  csi::v1::NodeGetVolumeStatsResponse* resp) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext* ctx,
                                   const csi::v1::NodeGetCapabilitiesRequest* req,
                                   csi::v1::NodeGetCapabilitiesResponse* resp) override;
  grpc::Status NodeGetInfo(grpc::ServerContext* ctx, const csi::v1::NodeGetInfoRequest* req,
                           csi::v1::NodeGetInfoResponse* resp) override;

  // <stateDir>/ephemeral/<volume id, with anything but [A-Za-z0-9._-] replaced>.
  std::string EphemeralDir(const std::string& volume_id) const;

 private:
  // Holds a path for the duration of one call (see the class comment).
  class PathLock {
   public:
    PathLock(NodeServer* server, std::string key);
    ~PathLock();
    bool acquired() const { return acquired_; }

   private:
    NodeServer* server_;
    std::string key_;
    bool acquired_;
  };

  grpc::Status CheckPath(const std::string& path, std::string_view field) const;
  // Detaches a stale mount at `path`, if there is one. Returns whether it did.
  grpc::Status RecoverStale(const std::string& path, bool* recovered);
  // Agent Mount at `staging`, after detaching a stale mount there.
  grpc::Status AgentMount(const std::string& volume_id, const StringMap& context,
                          const std::string& staging, bool read_only);
  // Agent Unmount of `staging`, then detaches whatever is left there. A down agent is
  // tolerated when the mount is stale or gone (nothing to ask it).
  grpc::Status AgentUnmount(const std::string& staging);
  // Bind staging -> target (creating target), read-only when asked. Idempotent.
  void BindHintFile(const std::string& staging, const std::string& target);
  grpc::Status BindIntoTarget(const std::string& volume_id, const std::string& staging,
                              const std::string& target, bool read_only);
  // Unmounts every mount stacked at `target` and removes the directory.
  grpc::Status UnmountAndRemoveTarget(const std::string& target);
  grpc::Status PublishEphemeral(const csi::v1::NodePublishVolumeRequest& req, bool read_only);

  NodeConfig config_;
  Mounter& mounter_;
  AgentClient& agent_;
  Mutex mu_;
  std::set<std::string> busy_ GUARDED_BY(mu_);
};

}  // namespace spoke::node
