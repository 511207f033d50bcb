// Whether this build replaces operator new with page_aligned_new.cc's: not in sanitizer
// builds, whose runtimes replace it to check each allocation.
#pragma once

#if !__has_include("spoke_layer/exe.h")
#error "wrong-way include: cache-agent/exe/ is not among this target's dependencies"
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPOKE_SANITIZER_NEW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SPOKE_SANITIZER_NEW 1
#endif
#endif

namespace spoke::agent {
#ifdef SPOKE_SANITIZER_NEW
inline constexpr bool kPageAlignedNew = false;
#else
inline constexpr bool kPageAlignedNew = true;
#endif
}  // namespace spoke::agent
