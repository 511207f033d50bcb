// Injected time for the metadata cache, VolumeFs and the prefetcher: the same Clock as the
// prefetcher's (tests use ManualClock, the agent SystemClock::Get()).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include "cache-agent/prefetch/clock.h"
