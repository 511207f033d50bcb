// Names the calling thread as `top`, `perf` and gdb show it (at most 15 characters). Threads a
// named thread starts inherit its name: libfuse's workers take their session loop's.
#pragma once

#include <pthread.h>

namespace spoke {

inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace spoke
