#include "cache-agent/fuse/fuse_op_errors.h"

#include <cerrno>
#include <cstring>

namespace spoke::agent {

int FuseOpErrors::ErrnoFor(const Error& e) {
  int err = e.ToErrno();
  return err == 0 ? EIO : err;
}

std::string FuseOpErrors::ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? std::string(name) : std::to_string(err);
}

int FuseOpErrors::Count(const char* op, const Error& e) {
  int err = ErrnoFor(e);
  if (registry_ == nullptr) return err;
  MutexLock lock(mu_);
  auto key = std::make_pair(std::string_view(op), err);
  auto it = counters_.find(key);
  if (it == counters_.end()) {
    auto* c = &registry_->GetCounter("spoke_fuse_op_errors_total",
                                     "Errors returned to the kernel, per FUSE operation and errno",
                                     {{"op", op}, {"errno", ErrnoName(err)}});
    it = counters_.emplace(key, c).first;
  }
  it->second->Inc();
  return err;
}

}  // namespace spoke::agent
