// Injected time for the metadata cache, VolumeFs and the prefetcher: the same Clock as the
// prefetcher's (tests use ManualClock, the agent SystemClock::Get()).
#pragma once

#include "cache-agent/prefetch/clock.h"
#include "spoke_layer/fs.h"  // in spoke_agent_fs and the layers above it only
