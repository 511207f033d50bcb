// Spare block vectors: byte vectors of one block's capacity (1 MiB), kept when a block is
// let go and handed to the next hub reply, instead of freed and allocated again.
//
// Why: a freshly allocated megabyte may be fresh pages (an mmap, or heap pages the resident
// watch's trim gave back): 256 page faults that zero-fill a page each, on top of the copy of
// the reply into it (bench/RESULTS.md, "Spare block vectors": about a tenth of the agent's
// CPU in a cold fill of large files, when every block was an mmap). A vector reused from here
// is only copied into. At most kMaxSpareVectors are kept (16 MiB, counted against the budget
// as resident memory only); beyond that they go back to the allocator.
// Thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace spoke {

// The one capacity kept (the default block size: smaller requests are not worth keeping,
// larger ones are rare).
inline constexpr size_t kSpareVectorCapacity = 1u << 20;
inline constexpr size_t kMaxSpareVectors = 16;

// An empty vector with capacity for at least `bytes`: a spare one when `bytes` is over half
// of kSpareVectorCapacity and at most all of it (it is then reserved at kSpareVectorCapacity,
// so that it can be kept once let go), else a new one reserved at `bytes`.
std::vector<char> TakeSpareVector(size_t bytes);
// Keeps `v`'s memory for a later TakeSpareVector when its capacity is kSpareVectorCapacity
// and fewer than kMaxSpareVectors are kept; frees it otherwise. `v` is left empty.
void GiveSpareVector(std::vector<char>&& v);
// How many are kept now (tests).
size_t SpareVectorCount();

}  // namespace spoke
