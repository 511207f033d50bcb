// Caller: who a lookup, getattr or listing is made for. Most are answered from the metadata
// cache; the caller's supplementary groups cost a /proc read (fuse_req_getgroups), so a lazy
// caller reads them only when a request for it actually goes to the hub, and at most once.
// Used on one request's thread, within the call it is passed to.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cache-agent/remote/remote_fs.h"

namespace spoke::agent {

class Caller {
 public:
  using GroupsReader = std::function<std::vector<uint32_t>()>;

  Caller() = default;  // the volume's own identity
  // Known in full, or null for the volume's identity (call sites pass &credentials).
  Caller(const Credentials* who) : known_(who) {}  // NOLINT(google-explicit-constructor)
  Caller(uint32_t uid, uint32_t gid, GroupsReader read_groups)
      : lazy_(Credentials{uid, gid, {}}), read_groups_(std::move(read_groups)) {}

  bool is_volume() const { return known_ == nullptr && !lazy_; }
  // The full credentials; reads the groups of a lazy caller on first use. Not for is_volume().
  const Credentials& credentials() const {
    if (known_ != nullptr) return *known_;
    if (read_groups_) {
      lazy_->groups = read_groups_();
      read_groups_ = nullptr;
    }
    return *lazy_;
  }

 private:
  const Credentials* known_ = nullptr;
  mutable std::optional<Credentials> lazy_;
  mutable GroupsReader read_groups_;
};

}  // namespace spoke::agent
