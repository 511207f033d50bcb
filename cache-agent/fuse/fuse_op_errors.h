// FuseOpErrors: spoke_fuse_op_errors_total{op,errno}, the errors a FUSE session returned to
// the kernel per operation. The counters are looked up once per (op, errno) pair and kept.
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class FuseOpErrors {
 public:
  // A null registry counts nothing. `registry` must outlive this.
  explicit FuseOpErrors(metrics::Registry* registry) : registry_(registry) {}

  // The errno the kernel gets for `e`: never 0 (an error must not read as success).
  static int ErrnoFor(const Error& e);
  // Counts one error of `op` (a string literal, e.g. "unlink") and returns its errno.
  int Count(const char* op, const Error& e) EXCLUDES(mu_);
  // The errno label: "ENOENT" style where known, the number otherwise.
  static std::string ErrnoName(int err);

 private:
  metrics::Registry* registry_;
  Mutex mu_;
  std::map<std::pair<std::string_view, int>, metrics::Counter*> counters_ GUARDED_BY(mu_);
};

}  // namespace spoke::agent
