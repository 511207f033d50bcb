// An in-memory ExportAdmin for unit tests: one tree per share, shared by every session, with
// switches for an unreachable hub and a share the hub refuses.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "csi-controller/export_admin.h"

namespace spoke::controller::testing {

struct FakeTree {
  struct Entry {
    bool is_dir = false;
    std::string data;
  };
  std::mutex mu;
  std::map<std::string, Entry> entries;  // path relative to the share -> entry ("" = root)
  bool unavailable = false;              // every Open and call fails with kUnavailable
  bool refuse_share = false;             // Open fails with kNotFound
  int opens = 0;
  uint64_t available_bytes = 5ull << 30;

  bool Exists(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    return entries.contains(path);
  }
  bool IsDir(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(path);
    return it != entries.end() && it->second.is_dir;
  }
  std::string Data(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(path);
    return it == entries.end() ? "" : it->second.data;
  }
  void AddDir(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    entries[path] = Entry{true, ""};
  }
  void AddFile(const std::string& path, std::string data) {
    std::lock_guard<std::mutex> lock(mu);
    entries[path] = Entry{false, std::move(data)};
  }
  // Names of every entry (tests compare listings).
  std::vector<std::string> Paths() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& [p, e] : entries)
      if (!p.empty()) out.push_back(p);
    return out;
  }
};

class FakeExportAdmin : public ExportAdmin {
 public:
  explicit FakeExportAdmin(std::shared_ptr<FakeTree> tree) : tree_(std::move(tree)) {}
  Result<std::unique_ptr<ExportSession>> Open(const HubAddress& hub, std::chrono::seconds timeout,
                                              const HubIdentityParams& identity) override;
  std::chrono::seconds last_timeout() const { return last_timeout_; }
  HubIdentityParams last_identity() const { return last_identity_; }

 private:
  std::shared_ptr<FakeTree> tree_;
  std::chrono::seconds last_timeout_{0};
  HubIdentityParams last_identity_;
};

}  // namespace spoke::controller::testing
