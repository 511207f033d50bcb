// ListingFlights: concurrent listings of one directory share one hub listing (singleflight).
// A listing of a big directory is many READDIRPLUS round trips over the WAN; without this,
// n callers arriving while it runs (an `ls` per job rank, the walk and a lookup's listing)
// would issue n listings of it.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class ListingFlights {
 public:
  // Runs `list` for directory `ino` unless a run for it is in flight, in which case the
  // caller waits for that run and gets its status. `started_after_call`: the caller needs a
  // listing sent after its call (strict consistency: one already on the wire may predate a
  // change the caller must see): it waits for the running one to end, then joins a run
  // started since its call or starts one. The waits last as long as `list`, which is
  // bounded by the hub timeout (per page of a listing by handle: a hub that stops answering
  // fails it one timeout later).
  // A caller whose request is interrupted (common/interrupt.h) stops waiting: kInterrupted.
  Status Run(uint64_t ino, bool started_after_call, const std::function<Status()>& list)
      EXCLUDES(mu_);
  // Runs started (for tests and figures).
  uint64_t runs() const EXCLUDES(mu_);

 private:
  struct Flight {
    uint64_t seq = 0;
    bool done = false;
    Status status;
    bool interrupted = false;  // its caller gave up (kInterrupted): not shared
  };
  struct Slot {
    std::shared_ptr<Flight> latest;  // running, or ended while callers are still in Run
    int callers = 0;                 // in Run for this directory; the slot goes at 0
  };
  mutable Mutex mu_;
  CondVar cv_;  // a flight ended
  // Flight fields are written under mu_ too; Slot references stay valid while callers > 0.
  std::unordered_map<uint64_t, Slot> slots_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
};

}  // namespace spoke::agent
