#include "tests/csi-controller/fake_export_admin.h"

namespace spoke::controller::testing {
namespace {

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

class FakeSession : public ExportSession {
 public:
  FakeSession(std::shared_ptr<FakeTree> tree, HubAddress hub)
      : tree_(std::move(tree)), hub_(std::move(hub)) {}

  Status Down() {
    if (tree_->unavailable) {
      return Fail(Code::kUnavailable, "hub " + hub_.server + " did not answer (fake)");
    }
    return Ok();
  }

  Result<EntryInfo> Stat(const std::string& path) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    SPOKE_RETURN_IF_ERROR(Down());
    auto it = tree_->entries.find(path);
    if (it == tree_->entries.end()) return Fail(Code::kNotFound, "no " + path);
    return EntryInfo{it->second.is_dir, it->second.data.size()};
  }
  Result<std::vector<std::string>> List(const std::string& path) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    SPOKE_RETURN_IF_ERROR(Down());
    if (!tree_->entries.contains(path)) return Fail(Code::kNotFound, "no " + path);
    std::vector<std::string> out;
    for (const auto& [p, e] : tree_->entries) {
      if (!p.empty() && p != path && Parent(p) == path) {
        out.push_back(path.empty() ? p : p.substr(path.size() + 1));
      }
    }
    return out;
  }
  Status MakeDir(const std::string& path, uint32_t) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    if (auto s = Down(); !s) return s;
    if (tree_->entries.contains(path)) return Fail(Code::kAlreadyExists, path + " exists");
    if (!tree_->entries.contains(Parent(path))) return Fail(Code::kNotFound, "no parent");
    tree_->entries[path] = FakeTree::Entry{true, ""};
    return Ok();
  }
  Status MakeDirs(const std::string& path, uint32_t mode) override {
    if (path.empty()) return Ok();
    std::string parent = Parent(path);
    if (auto s = MakeDirs(parent, mode); !s) return s;
    auto st = Stat(path);
    if (st) return st->is_dir ? Ok() : Fail(Code::kAlreadyExists, path + " is a file");
    return MakeDir(path, mode);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    if (auto s = Down(); !s) return s;
    if (!tree_->entries.contains(from)) return Fail(Code::kNotFound, "no " + from);
    if (tree_->entries.contains(to)) return Fail(Code::kAlreadyExists, to + " exists");
    std::map<std::string, FakeTree::Entry> moved;
    for (auto it = tree_->entries.begin(); it != tree_->entries.end();) {
      if (it->first == from || it->first.starts_with(from + "/")) {
        moved[to + it->first.substr(from.size())] = it->second;
        it = tree_->entries.erase(it);
      } else {
        ++it;
      }
    }
    tree_->entries.merge(moved);
    return Ok();
  }
  Status Remove(const std::string& path) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    if (auto s = Down(); !s) return s;
    if (!tree_->entries.contains(path)) return Fail(Code::kNotFound, "no " + path);
    for (const auto& [p, e] : tree_->entries) {
      if (p.starts_with(path + "/")) return Fail(Code::kNotEmpty, path + " not empty");
    }
    tree_->entries.erase(path);
    return Ok();
  }
  Status RemoveTree(const std::string& path) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    if (auto s = Down(); !s) return s;
    std::erase_if(tree_->entries, [&](const auto& kv) {
      return kv.first == path || kv.first.starts_with(path + "/");
    });
    return Ok();
  }
  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    SPOKE_RETURN_IF_ERROR(Down());
    auto it = tree_->entries.find(path);
    if (it == tree_->entries.end()) return Fail(Code::kNotFound, "no " + path);
    if (it->second.data.size() > max_bytes) return Fail(Code::kInvalidArgument, "too large");
    return it->second.data;
  }
  Status WriteFile(const std::string& path, const std::string& data) override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    if (auto s = Down(); !s) return s;
    if (!tree_->entries.contains(Parent(path))) return Fail(Code::kNotFound, "no parent");
    tree_->entries[path] = FakeTree::Entry{false, data};
    return Ok();
  }
  Result<FsUsage> Usage() override {
    std::lock_guard<std::mutex> lock(tree_->mu);
    SPOKE_RETURN_IF_ERROR(Down());
    return FsUsage{10ull << 30, tree_->available_bytes, tree_->available_bytes};
  }

 private:
  std::shared_ptr<FakeTree> tree_;
  HubAddress hub_;
};

}  // namespace

Result<std::unique_ptr<ExportSession>> FakeExportAdmin::Open(const HubAddress& hub,
                                                             std::chrono::seconds timeout,
                                                             const HubIdentityParams& identity) {
  last_timeout_ = timeout;
  last_identity_ = identity;
  std::lock_guard<std::mutex> lock(tree_->mu);
  ++tree_->opens;
  if (tree_->unavailable) {
    return Fail(Code::kUnavailable, "hub " + hub.server + ":" + std::to_string(hub.nfs_port) +
                                        " did not answer within " +
                                        std::to_string(timeout.count()) + "s (fake)");
  }
  if (tree_->refuse_share) return Fail(Code::kNotFound, "share " + hub.share + " not exported");
  if (!tree_->entries.contains("")) tree_->entries[""] = FakeTree::Entry{true, ""};
  return std::unique_ptr<ExportSession>(new FakeSession(tree_, hub));
}

}  // namespace spoke::controller::testing
