#include "cache-agent/fuse/fuse_op_errors.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace spoke::agent {
namespace {

TEST(FuseOpErrors, CountsPerOperationAndErrno) {
  metrics::Registry registry;
  FuseOpErrors errors(&registry);
  EXPECT_EQ(errors.Count("unlink", Error(Code::kReadOnly, "read-only")), EROFS);
  EXPECT_EQ(errors.Count("unlink", Error(Code::kReadOnly, "read-only")), EROFS);
  EXPECT_EQ(errors.Count("rmdir", Error(Code::kNotEmpty, "not empty")), ENOTEMPTY);
  auto text = registry.Render();
  EXPECT_NE(text.find("spoke_fuse_op_errors_total{errno=\"EROFS\",op=\"unlink\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("spoke_fuse_op_errors_total{errno=\"ENOTEMPTY\",op=\"rmdir\"} 1"),
            std::string::npos)
      << text;
}

TEST(FuseOpErrors, AnErrorNeverReachesTheKernelAsSuccess) {
  // An Error whose code maps to no errno must still fail the operation.
  EXPECT_EQ(FuseOpErrors::ErrnoFor(Error(Code::kOk, "odd")), EIO);
  FuseOpErrors errors(nullptr);  // no registry: nothing counted, errno still given
  EXPECT_EQ(errors.Count("rename", Error(Code::kOk, "odd")), EIO);
  EXPECT_EQ(errors.Count("rename", Error::FromErrno(EXDEV, "cross-device")), EXDEV);
}

}  // namespace
}  // namespace spoke::agent
