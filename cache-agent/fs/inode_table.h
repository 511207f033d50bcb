// InodeTable: the metadata cache's inodes by number, the subset of std::unordered_map's
// interface the cache uses, without its per-entry costs: std::unordered_map allocates a node
// per entry (a next pointer, the key, malloc's header and rounding: 176 bytes for the cache's
// 144-byte inode) plus a bucket pointer per entry. Here entries live in fixed chunks of
// slots (freed slots are reused) and an open-addressing index of 32-bit slot numbers finds
// them: 152 bytes plus 5-11 bytes of index per inode.
//
// As with std::unordered_map, a reference to an entry stays valid until that entry is
// erased (slots never move). Unlike it, an iterator names a slot: it stays valid across
// inserts and erases of other entries, too. Iteration is in slot order.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace spoke::agent {

template <class V>
class InodeTable {
 public:
  using value_type = std::pair<const uint64_t, V>;

  template <bool kConst>
  class Iter {
   public:
    using Table = std::conditional_t<kConst, const InodeTable, InodeTable>;
    using Ref = std::conditional_t<kConst, const value_type&, value_type&>;
    using Ptr = std::conditional_t<kConst, const value_type*, value_type*>;
    Iter() = default;
    Iter(Table* t, uint32_t slot) : t_(t), slot_(slot) {}
    operator Iter<true>() const { return Iter<true>(t_, slot_); }  // NOLINT: as std's
    Ref operator*() const { return *t_->At(slot_); }
    Ptr operator->() const { return t_->At(slot_); }
    Iter& operator++() {
      slot_ = t_->NextLive(slot_ + 1);
      return *this;
    }
    bool operator==(const Iter& o) const { return slot_ == o.slot_; }

   private:
    friend class InodeTable;
    Table* t_ = nullptr;
    uint32_t slot_ = kEnd;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  InodeTable() = default;
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;
  ~InodeTable() {
    for (uint32_t s = 0; s < high_; ++s) {
      if (live_[s]) At(s)->~value_type();
    }
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  iterator begin() { return iterator(this, NextLive(0)); }
  iterator end() { return iterator(this, kEnd); }
  const_iterator begin() const { return const_iterator(this, NextLive(0)); }
  const_iterator end() const { return const_iterator(this, kEnd); }

  iterator find(uint64_t key) { return iterator(this, Lookup(key)); }
  const_iterator find(uint64_t key) const { return const_iterator(this, Lookup(key)); }
  bool contains(uint64_t key) const { return Lookup(key) != kEnd; }
  V& at(uint64_t key) { return const_cast<V&>(std::as_const(*this).at(key)); }
  const V& at(uint64_t key) const {
    const uint32_t s = Lookup(key);
    if (s == kEnd) throw std::out_of_range("InodeTable::at");
    return At(s)->second;
  }
  V& operator[](uint64_t key) { return try_emplace(key).first->second; }

  // Inserts a default-constructed V under `key` unless there is one.
  std::pair<iterator, bool> try_emplace(uint64_t key) {
    if (const uint32_t s = Lookup(key); s != kEnd) return {iterator(this, s), false};
    if ((size_ + 1) * 4 > index_.size() * 3) Rehash(std::max<size_t>(64, index_.size() * 2));
    uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      if (high_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<Slot[]>(kChunk));
      s = high_++;
      live_.push_back(false);
    }
    ::new (static_cast<void*>(At(s)))
        value_type(std::piecewise_construct, std::forward_as_tuple(key), std::tuple<>());
    live_[s] = true;
    ++size_;
    Place(s);
    return {iterator(this, s), true};
  }

  void erase(const_iterator it) {
    const uint32_t s = it.slot_;
    // Linear probing: take the entry out of the index, then move up the entries of its probe
    // run that could sit in the hole (backward shift: no tombstones).
    const size_t mask = index_.size() - 1;
    size_t hole = Home(At(s)->first);
    while (index_[hole] != s + 1) hole = (hole + 1) & mask;
    for (size_t i = (hole + 1) & mask; index_[i] != 0; i = (i + 1) & mask) {
      const size_t home = Home(At(index_[i] - 1)->first);
      // The entry at i may move to the hole when its home is not in (hole, i].
      if (((i - home) & mask) >= ((i - hole) & mask)) {
        index_[hole] = index_[i];
        hole = i;
      }
    }
    index_[hole] = 0;
    At(s)->~value_type();
    live_[s] = false;
    free_.push_back(s);
    --size_;
  }

 private:
  static constexpr uint32_t kEnd = ~uint32_t{0};
  static constexpr size_t kChunk = 1024;
  struct Slot {
    alignas(value_type) std::byte bytes[sizeof(value_type)];
  };

  value_type* At(uint32_t s) const {
    return std::launder(reinterpret_cast<value_type*>(chunks_[s / kChunk][s % kChunk].bytes));
  }
  uint32_t NextLive(uint32_t s) const {
    while (s < high_ && !live_[s]) ++s;
    return s < high_ ? s : kEnd;
  }
  size_t Home(uint64_t key) const {
    // Inode numbers of hub files are hashes already, the agent's own ones are sequential:
    // mix (splitmix64's finalizer) so that neither clusters.
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return static_cast<size_t>(key) & (index_.size() - 1);
  }
  uint32_t Lookup(uint64_t key) const {
    if (index_.empty()) return kEnd;
    const size_t mask = index_.size() - 1;
    for (size_t i = Home(key);; i = (i + 1) & mask) {
      if (index_[i] == 0) return kEnd;
      if (At(index_[i] - 1)->first == key) return index_[i] - 1;
    }
  }
  void Place(uint32_t s) {
    const size_t mask = index_.size() - 1;
    size_t i = Home(At(s)->first);
    while (index_[i] != 0) i = (i + 1) & mask;
    index_[i] = s + 1;
  }
  void Rehash(size_t n) {
    index_.assign(n, 0);
    for (uint32_t s = 0; s < high_; ++s) {
      if (live_[s]) Place(s);
    }
  }

  std::vector<std::unique_ptr<Slot[]>> chunks_;  // kChunk slots each
  std::vector<bool> live_;                       // per slot below high_
  std::vector<uint32_t> free_;                   // erased slots, reused first
  std::vector<uint32_t> index_;                  // slot + 1; 0 = empty; a power of two
  uint32_t high_ = 0;                            // slots ever used
  size_t size_ = 0;
};

}  // namespace spoke::agent
