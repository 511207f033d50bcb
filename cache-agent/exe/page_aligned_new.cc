// The agent's large allocations start on a page. A hub reply's block (a std::vector<char> of up
// to a block) is then written to the cache's O_DIRECT slot in place, instead of being copied
// behind the block's header first (cache/slot_io.cc; the copy was 8 % of the agent's CPU in a
// fill of large files). Smaller allocations go to malloc as before; every one is freed by the
// default operator delete (free). Left out of sanitizer builds (page_aligned_new.h).
#include "cache-agent/exe/page_aligned_new.h"

#include <cstddef>
#include <cstdlib>
#include <new>

#ifndef SPOKE_SANITIZER_NEW
namespace {

// Blocks of small files too (a 110 KB sample is one block); below this the copy is cheap.
constexpr std::size_t kPageAlignedFrom = 64 * 1024;
constexpr std::size_t kPage = 4096;  // cache/block_store.h kIoAlign

void* Allocate(std::size_t n) {
  if (n < kPageAlignedFrom) return std::malloc(n == 0 ? 1 : n);
  void* p = nullptr;
  return posix_memalign(&p, kPage, n) == 0 ? p : nullptr;
}

}  // namespace

// operator new[] and the nothrow forms call this one (libstdc++).
void* operator new(std::size_t n) {
  for (;;) {
    if (void* p = Allocate(n)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}
#endif
