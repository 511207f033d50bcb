// Compact storage for the metadata cache's per-inode and per-directory state: on a tree of
// a million files these are the agent's largest structures (goal: at most 300 bytes of heap
// per cached inode, names and listings included).
//
// CompactName: a name in 16 bytes, inline up to 15 bytes (most file names), on the heap
// beyond (std::string takes 32 bytes inline and more beyond 15).
//
// DirEntries: one directory's listing, name -> inode number in listing order. Slots (name +
// inode, 24 bytes) in a vector and an open-addressing index of 32-bit slot numbers over them
// (no node allocation per entry, unlike std::unordered_map's ~72 bytes). A removed name
// keeps its slot until compaction (a name created again takes its old place), so removing n
// names of a big directory costs O(n), not O(n * size).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

namespace spoke::agent {

class CompactName {
 public:
  CompactName() { buf_[kTagByte] = 0; }
  explicit CompactName(std::string_view s) { Assign(s); }
  CompactName(const CompactName& o) { Assign(o.view()); }
  CompactName(CompactName&& o) noexcept;
  CompactName& operator=(const CompactName& o);
  CompactName& operator=(CompactName&& o) noexcept;
  CompactName& operator=(std::string_view s);
  ~CompactName() { Free(); }

  std::string_view view() const;
  bool operator==(std::string_view s) const { return view() == s; }

 private:
  static constexpr size_t kTagByte = 15;
  static constexpr unsigned char kHeap = 0xff;  // inline lengths are 0..15
  bool heap() const { return static_cast<unsigned char>(buf_[kTagByte]) == kHeap; }
  void Assign(std::string_view s);
  void Free();
  // Inline: the bytes, and the length in buf_[15]. Heap: a char* at 0, a uint32_t length at
  // 8, kHeap in buf_[15].
  alignas(8) char buf_[16];
};
static_assert(sizeof(CompactName) == 16);

// An NFS file handle (at most 64 bytes in NFSv3) in 8 bytes plus its length + 1 rounded up to
// 8 in a pool; empty takes none.
class CompactHandle {
 public:
  CompactHandle() = default;
  CompactHandle(const CompactHandle&) = delete;
  CompactHandle& operator=(const CompactHandle&) = delete;
  CompactHandle(CompactHandle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  CompactHandle& operator=(CompactHandle&& o) noexcept;
  ~CompactHandle() { Release(); }
  void Assign(std::string_view fh);  // longer than 255 bytes: kept empty
  void Clear() { Assign({}); }
  bool empty() const { return p_ == nullptr; }
  std::string_view view() const {
    return p_ == nullptr ? std::string_view()
                         : std::string_view(p_ + 1, static_cast<unsigned char>(p_[0]));
  }

 private:
  void Release();
  char* p_ = nullptr;  // length byte, then the bytes (in 8-byte size classes: dir_entries.cc)
};
static_assert(sizeof(CompactHandle) == 8);

class DirEntries {
 public:
  // The inode named `name`, 0 when none.
  uint64_t Find(std::string_view name) const;
  // Sets `name` -> `ino` (ino != 0): a new name goes last, a known one keeps its place (so
  // does one removed since the last compaction).
  // Returns the inode it named before, 0 when it is new.
  uint64_t Set(std::string_view name, uint64_t ino);
  // Removes `name`; returns the inode it named, 0 when it was not there.
  uint64_t Erase(std::string_view name);
  size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }
  void Clear();
  // Room for `n` entries (a listing being applied).
  void Reserve(size_t n);
  // f(std::string_view name, uint64_t ino) for each entry in listing order.
  template <class F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.ino != 0) f(s.name.view(), s.ino);
    }
  }
  // Heap bytes held (for tests and figures).
  size_t HeapBytes() const;

 private:
  struct Slot {
    CompactName name;
    uint64_t ino = 0;  // 0: removed (the name stays until a rebuild drops the slot)
  };
  static uint64_t Hash(std::string_view s);
  // Index position of `name`'s slot, or of the empty position where it would go.
  size_t Probe(std::string_view name, bool* found) const;
  void Rebuild(size_t min_live);  // drops removed slots, resizes the index

  std::vector<Slot> slots_;
  std::vector<uint32_t> index_;  // slot number + 1; 0 = empty; size a power of two (or 0)
  size_t live_ = 0;
};

}  // namespace spoke::agent
