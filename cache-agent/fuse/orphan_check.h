// OrphanCheck: whether a taken-over FUSE connection holds requests the previous agent read and
// never answered (kernels before 6.9 cannot resend them). Their callers wait forever, so the
// connection must then be aborted; a healthy one must never be.
//
// The kernel's `waiting` count (fusectl) includes those requests, but also the ones queued
// for this agent's readers: pending ones, and read-ahead held back beyond max_background. On a
// busy connection `waiting` stays above what this agent has in flight without any orphan. Only
// a sample taken while this agent has nothing in flight and nothing is readable tells them
// apart: every request still waiting then is one nobody will answer.
#pragma once

#if !__has_include("spoke_layer/fuse.h")
#error "wrong-way include: cache-agent/fuse/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdint>

namespace spoke::agent {

class OrphanCheck {
 public:
  struct Sample {
    uint64_t waiting = 0;   // fusectl's count for the connection
    size_t in_flight = 0;   // read by this agent, not answered (before and after `waiting`)
    bool readable = false;  // a request queued for this agent's readers (before and after)
  };
  enum class Verdict { kUndecided, kNone, kOrphans };

  // `needed` idle samples that all saw waiting requests make orphans.
  explicit OrphanCheck(int needed = 3) : needed_(needed) {}

  // kNone at the first idle sample with nothing waiting; kOrphans at the `needed`-th idle
  // sample with requests waiting; kUndecided while the connection is busy.
  Verdict Add(const Sample& s) {
    if (s.in_flight != 0 || s.readable) return Verdict::kUndecided;  // busy: says nothing
    if (s.waiting == 0) return Verdict::kNone;
    return ++idle_with_waiting_ >= needed_ ? Verdict::kOrphans : Verdict::kUndecided;
  }

 private:
  const int needed_;
  int idle_with_waiting_ = 0;
};

}  // namespace spoke::agent
