// The kernel request handlers FuseAdapter gives libfuse (fuse_adapter.cc) and a session's
// mount options, shared with the session code (fuse_session.cc). Internal to
// cache-agent/fuse/.
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <fuse3/fuse_lowlevel.h>

#include <string>

#include "cache-agent/fuse/fuse_adapter.h"

namespace spoke::agent::fuse_ops {

const fuse_lowlevel_ops& Ops();
// The same for a new mount and a takeover, so that libfuse negotiates the same INIT reply.
std::string SessionOptions(const FuseAdapter::Options& options);

}  // namespace spoke::agent::fuse_ops
