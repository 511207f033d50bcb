// spoke-csi-client: calls one CSI RPC and prints the answer as JSON (for e2e scripts).
//
//   spoke-csi-client --endpoint unix:///x.sock COMMAND [flags]
//     info                                    GetPluginInfo + NodeGetInfo (node endpoint)
//     create-volume --name N [--param k=v]... [--capacity BYTES] [--access-mode M]
//     delete-volume --volume-id ID
//     stage     --volume-id ID --staging DIR [--context FILE|--ctx k=v...] [--access-mode M]
//     unstage   --volume-id ID --staging DIR
//     publish   --volume-id ID --target DIR [--staging DIR] [--context FILE|--ctx k=v...]
//               [--readonly] [--access-mode M]
//     unpublish --volume-id ID --target DIR
//     stats     --volume-id ID --path DIR
//   --context FILE reads "volume_context" from create-volume's JSON output.
//   Access modes: single-node-writer (default), single-node-reader-only,
//   multi-node-reader-only, multi-node-multi-writer.
// Exit status 0 on success; on an RPC error, 1 with {"error": {"code", "message"}}.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "csi.grpc.pb.h"

namespace {

using json = nlohmann::json;
using csi::v1::VolumeCapability;

struct Args {
  std::string endpoint;
  std::string command;
  std::map<std::string, std::string> flags;
  std::map<std::string, std::string> params;
  std::map<std::string, std::string> ctx;
  bool readonly = false;
  int timeout_seconds = 120;
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "spoke-csi-client: " << why
            << "\nusage: spoke-csi-client --endpoint unix:///x.sock "
               "info|create-volume|delete-volume|stage|unstage|publish|unpublish|stats [flags]\n";
  std::exit(2);
}

std::pair<std::string, std::string> KeyValue(const std::string& s) {
  auto eq = s.find('=');
  if (eq == std::string::npos) Usage("expected key=value, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

std::string Need(const Args& a, const std::string& flag) {
  auto it = a.flags.find(flag);
  if (it == a.flags.end() || it->second.empty()) Usage(a.command + " needs --" + flag);
  return it->second;
}

std::string Opt(const Args& a, const std::string& flag) {
  auto it = a.flags.find(flag);
  return it == a.flags.end() ? "" : it->second;
}

VolumeCapability Capability(const Args& a) {
  static const std::map<std::string, VolumeCapability::AccessMode::Mode> modes = {
      {"single-node-writer", VolumeCapability::AccessMode::SINGLE_NODE_WRITER},
      {"single-node-reader-only", VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY},
      {"multi-node-reader-only", VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY},
      {"multi-node-multi-writer", VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER}};
  std::string m = Opt(a, "access-mode");
  if (m.empty()) m = "single-node-writer";
  auto it = modes.find(m);
  if (it == modes.end()) Usage("unknown --access-mode " + m);
  VolumeCapability cap;
  cap.mutable_mount();
  cap.mutable_access_mode()->set_mode(it->second);
  return cap;
}

std::map<std::string, std::string> Context(const Args& a) {
  std::map<std::string, std::string> ctx;
  if (std::string file = Opt(a, "context"); !file.empty()) {
    std::ifstream in(file);
    if (!in) Usage("cannot read --context " + file);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("volume_context")) {
      Usage("--context " + file + " has no volume_context");
    }
    for (auto& [k, v] : j["volume_context"].items()) ctx[k] = v.get<std::string>();
  }
  for (const auto& [k, v] : a.ctx) ctx[k] = v;
  return ctx;
}

template <typename Map>
json ToJson(const Map& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

int Finish(const grpc::Status& s, const json& out) {
  if (!s.ok()) {
    static const char* names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    int c = static_cast<int>(s.error_code());
    json err = {{"error",
                 {{"code", c >= 0 && c <= 16 ? names[c] : std::to_string(c)},
                  {"message", s.error_message()}}}};
    std::cout << err.dump() << "\n";
    return 1;
  }
  std::cout << out.dump() << "\n";
  return 0;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--endpoint") {
      a.endpoint = value();
    } else if (arg == "--param") {
      a.params.insert(KeyValue(value()));
    } else if (arg == "--ctx") {
      a.ctx.insert(KeyValue(value()));
    } else if (arg == "--readonly") {
      a.readonly = true;
    } else if (arg == "--timeout") {
      a.timeout_seconds = std::stoi(value());
    } else if (arg.starts_with("--")) {
      a.flags[arg.substr(2)] = value();
    } else if (a.command.empty()) {
      a.command = arg;
    } else {
      Usage("unexpected argument " + arg);
    }
  }
  if (a.endpoint.empty()) Usage("--endpoint is required");
  if (a.command.empty()) Usage("a command is required");
  return a;
}

int Info(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& ctx, const Args& a) {
  auto identity = csi::v1::Identity::NewStub(channel);
  csi::v1::GetPluginInfoResponse info;
  auto s = identity->GetPluginInfo(&ctx, {}, &info);
  if (!s.ok()) return Finish(s, {});
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(a.timeout_seconds));
  csi::v1::NodeGetInfoResponse node;
  s = csi::v1::Node::NewStub(channel)->NodeGetInfo(&ctx2, {}, &node);
  return Finish(s, {{"name", info.name()},
                    {"vendor_version", info.vendor_version()},
                    {"node_id", node.node_id()},
                    {"topology", ToJson(node.accessible_topology().segments())}});
}

int CreateVolume(csi::v1::Controller::Stub& controller, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::CreateVolumeRequest req;
  req.set_name(Need(a, "name"));
  for (const auto& [k, v] : a.params) (*req.mutable_parameters())[k] = v;
  *req.add_volume_capabilities() = Capability(a);
  if (std::string c = Opt(a, "capacity"); !c.empty()) {
    req.mutable_capacity_range()->set_required_bytes(std::stoll(c));
  }
  csi::v1::CreateVolumeResponse resp;
  auto s = controller.CreateVolume(&ctx, req, &resp);
  return Finish(s, {{"volume_id", resp.volume().volume_id()},
                    {"capacity_bytes", resp.volume().capacity_bytes()},
                    {"volume_context", ToJson(resp.volume().volume_context())}});
}

int DeleteVolume(csi::v1::Controller::Stub& controller, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  csi::v1::DeleteVolumeResponse resp;
  return Finish(controller.DeleteVolume(&ctx, req, &resp), json::object());
}

int Stage(csi::v1::Node::Stub& node, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  req.set_staging_target_path(Need(a, "staging"));
  *req.mutable_volume_capability() = Capability(a);
  for (const auto& [k, v] : Context(a)) (*req.mutable_volume_context())[k] = v;
  csi::v1::NodeStageVolumeResponse resp;
  return Finish(node.NodeStageVolume(&ctx, req, &resp), json::object());
}

int Unstage(csi::v1::Node::Stub& node, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  req.set_staging_target_path(Need(a, "staging"));
  csi::v1::NodeUnstageVolumeResponse resp;
  return Finish(node.NodeUnstageVolume(&ctx, req, &resp), json::object());
}

int Publish(csi::v1::Node::Stub& node, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  req.set_target_path(Need(a, "target"));
  req.set_staging_target_path(Opt(a, "staging"));
  req.set_readonly(a.readonly);
  *req.mutable_volume_capability() = Capability(a);
  for (const auto& [k, v] : Context(a)) (*req.mutable_volume_context())[k] = v;
  csi::v1::NodePublishVolumeResponse resp;
  return Finish(node.NodePublishVolume(&ctx, req, &resp), json::object());
}

int Unpublish(csi::v1::Node::Stub& node, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  req.set_target_path(Need(a, "target"));
  csi::v1::NodeUnpublishVolumeResponse resp;
  return Finish(node.NodeUnpublishVolume(&ctx, req, &resp), json::object());
}

int Stats(csi::v1::Node::Stub& node, grpc::ClientContext& ctx, const Args& a) {
  csi::v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id(Need(a, "volume-id"));
  req.set_volume_path(Need(a, "path"));
  csi::v1::NodeGetVolumeStatsResponse resp;
  auto s = node.NodeGetVolumeStats(&ctx, req, &resp);
  json usage = json::array();
  for (const auto& u : resp.usage()) {
    usage.push_back({{"unit", u.unit() == csi::v1::VolumeUsage::BYTES ? "BYTES" : "INODES"},
                     {"total", u.total()},
                     {"available", u.available()},
                     {"used", u.used()}});
  }
  return Finish(s, {{"usage", usage},
                    {"condition",
                     {{"abnormal", resp.volume_condition().abnormal()},
                      {"message", resp.volume_condition().message()}}}});
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  std::string target = a.endpoint.starts_with("unix://") ? a.endpoint : "unix://" + a.endpoint;
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(a.timeout_seconds));
  ctx.set_wait_for_ready(true);  // the plugin may still be starting

  if (a.command == "info") return Info(channel, ctx, a);
  if (a.command == "create-volume" || a.command == "delete-volume") {
    auto controller = csi::v1::Controller::NewStub(channel);
    if (a.command == "create-volume") return CreateVolume(*controller, ctx, a);
    return DeleteVolume(*controller, ctx, a);
  }
  auto node = csi::v1::Node::NewStub(channel);
  if (a.command == "stage") return Stage(*node, ctx, a);
  if (a.command == "unstage") return Unstage(*node, ctx, a);
  if (a.command == "publish") return Publish(*node, ctx, a);
  if (a.command == "unpublish") return Unpublish(*node, ctx, a);
  if (a.command == "stats") return Stats(*node, ctx, a);
  Usage("unknown command " + a.command);
}
