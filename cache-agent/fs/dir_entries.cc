#include "cache-agent/fs/dir_entries.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "common/thread_annotations.h"

namespace spoke::agent {

// ---- CompactName ----------------------------------------------------------------------------

void CompactName::Assign(std::string_view s) {
  if (s.size() < kTagByte + 1) {
    std::memcpy(buf_, s.data(), s.size());
    buf_[kTagByte] = static_cast<char>(s.size());
    return;
  }
  char* p = static_cast<char*>(std::malloc(s.size()));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  const auto len = static_cast<uint32_t>(s.size());
  std::memcpy(buf_, &p, sizeof p);
  std::memcpy(buf_ + 8, &len, sizeof len);
  buf_[kTagByte] = static_cast<char>(kHeap);
}

void CompactName::Free() {
  if (!heap()) return;
  char* p;
  std::memcpy(&p, buf_, sizeof p);
  std::free(p);
  buf_[kTagByte] = 0;
}

std::string_view CompactName::view() const {
  if (!heap()) return {buf_, static_cast<size_t>(static_cast<unsigned char>(buf_[kTagByte]))};
  const char* p;
  uint32_t len;
  std::memcpy(&p, buf_, sizeof p);
  std::memcpy(&len, buf_ + 8, sizeof len);
  return {p, len};
}

CompactName::CompactName(CompactName&& o) noexcept {
  std::memcpy(buf_, o.buf_, sizeof buf_);
  o.buf_[kTagByte] = 0;  // the heap bytes (if any) are ours now
}

CompactName& CompactName::operator=(CompactName&& o) noexcept {
  if (this == &o) return *this;
  Free();
  std::memcpy(buf_, o.buf_, sizeof buf_);
  o.buf_[kTagByte] = 0;
  return *this;
}

CompactName& CompactName::operator=(const CompactName& o) {
  if (this != &o) *this = o.view();
  return *this;
}

CompactName& CompactName::operator=(std::string_view s) {
  CompactName copy(s);  // `s` may point into this name
  *this = std::move(copy);
  return *this;
}

namespace {

// CompactHandle's bytes (length byte + handle) in 8-byte size classes carved from 64 KiB
// pages, with a free list per class. A malloc chunk adds an 8-byte header and rounds to 16
// bytes: a 36-byte handle takes 48 bytes there and 40 here, on each of a million inodes.
// Freed handles are reused by the next of their class; pages are kept. Under AddressSanitizer
// every handle is its own malloc block, so that misuse is still caught.
class HandlePool {
 public:
  static HandlePool& Get() {
    static HandlePool* pool = new HandlePool;  // never destroyed: handles outlive statics
    return *pool;
  }

  char* Alloc(size_t n) {
#if defined(__SANITIZE_ADDRESS__)
    char* p = static_cast<char*>(std::malloc(n));
    if (p == nullptr) throw std::bad_alloc();
    return p;
#else
    const size_t cls = (n + 7) / 8;
    MutexLock lock(mu_);
    if (char* p = free_[cls]; p != nullptr) {
      std::memcpy(&free_[cls], p, sizeof(char*));
      return p;
    }
    if (page_left_ < cls * 8) {
      page_ = static_cast<char*>(std::malloc(kPageBytes));
      if (page_ == nullptr) throw std::bad_alloc();
      page_left_ = kPageBytes;
    }
    char* p = page_;
    page_ += cls * 8;
    page_left_ -= cls * 8;
    return p;
#endif
  }

  void Free(char* p, size_t n) {
#if defined(__SANITIZE_ADDRESS__)
    (void)n;
    std::free(p);
#else
    const size_t cls = (n + 7) / 8;
    MutexLock lock(mu_);
    std::memcpy(p, &free_[cls], sizeof(char*));
    free_[cls] = p;
#endif
  }

 private:
  static constexpr size_t kPageBytes = 64 << 10;
  Mutex mu_;
  char* free_[(256 + 7) / 8 + 1] GUARDED_BY(mu_) = {};  // by class: 8 * index bytes
  char* page_ GUARDED_BY(mu_) = nullptr;
  size_t page_left_ GUARDED_BY(mu_) = 0;
};

size_t HeldBytes(const char* p) { return static_cast<unsigned char>(p[0]) + size_t{1}; }

}  // namespace

CompactHandle& CompactHandle::operator=(CompactHandle&& o) noexcept {
  if (this != &o) {
    Release();
    p_ = std::exchange(o.p_, nullptr);
  }
  return *this;
}

void CompactHandle::Release() {
  if (p_ != nullptr) HandlePool::Get().Free(p_, HeldBytes(p_));
  p_ = nullptr;
}

void CompactHandle::Assign(std::string_view fh) {
  if (p_ != nullptr && view() == fh) return;
  Release();
  if (fh.empty() || fh.size() > 255) return;
  p_ = HandlePool::Get().Alloc(fh.size() + 1);
  p_[0] = static_cast<char>(static_cast<unsigned char>(fh.size()));
  std::memcpy(p_ + 1, fh.data(), fh.size());
}

// ---- DirEntries -----------------------------------------------------------------------------

uint64_t DirEntries::Hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then a finaliser for the low bits
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

size_t DirEntries::Probe(std::string_view name, bool* found) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = Hash(name) & mask;; i = (i + 1) & mask) {
    const uint32_t s = index_[i];
    if (s == 0) {
      *found = false;
      return i;
    }
    if (slots_[s - 1].name == name) {  // live, or removed (kept until a rebuild)
      *found = true;
      return i;
    }
  }
}

uint64_t DirEntries::Find(std::string_view name) const {
  if (live_ == 0) return 0;
  bool found;
  size_t i = Probe(name, &found);
  return found ? slots_[index_[i] - 1].ino : 0;  // 0 also for a removed name
}

void DirEntries::Rebuild(size_t min_live) {
  std::erase_if(slots_, [](const Slot& s) { return s.ino == 0; });
  // Load factor at most 1/2 after a rebuild, 3/4 before the next one.
  const size_t need = std::max(min_live, slots_.size());
  const size_t want = need == 0 ? 0 : std::bit_ceil(std::max<size_t>(8, need * 2));
  index_.assign(want, 0);
  if (want == 0) {
    slots_.shrink_to_fit();
    return;
  }
  const size_t mask = want - 1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    size_t i = Hash(slots_[s].name.view()) & mask;
    while (index_[i] != 0) i = (i + 1) & mask;
    index_[i] = static_cast<uint32_t>(s + 1);
  }
}

void DirEntries::Reserve(size_t n) {
  slots_.reserve(n);
  if ((n * 4) > index_.size() * 3) Rebuild(n);
}

uint64_t DirEntries::Set(std::string_view name, uint64_t ino) {
  if ((slots_.size() + 1) * 4 > index_.size() * 3) Rebuild(live_ + 1);
  bool found;
  size_t i = Probe(name, &found);
  if (found) {
    Slot& s = slots_[index_[i] - 1];
    if (s.ino == 0) live_++;  // a removed name back: in its old place, as the hub lists it
    return std::exchange(s.ino, ino);
  }
  slots_.push_back(Slot{CompactName(name), ino});
  index_[i] = static_cast<uint32_t>(slots_.size());
  live_++;
  return 0;
}

uint64_t DirEntries::Erase(std::string_view name) {
  if (live_ == 0) return 0;
  bool found;
  size_t i = Probe(name, &found);
  if (!found || slots_[index_[i] - 1].ino == 0) return 0;
  uint64_t old = std::exchange(slots_[index_[i] - 1].ino, 0);
  live_--;
  // The index entry stays (probes pass over it) until the removed slots outnumber the live
  // ones: then both are rebuilt, so that create/unlink cycles leave no memory behind.
  if (slots_.size() - live_ > live_ + 64) Rebuild(live_);
  return old;
}

void DirEntries::Clear() {
  slots_.clear();
  slots_.shrink_to_fit();
  index_.clear();
  index_.shrink_to_fit();
  live_ = 0;
}

size_t DirEntries::HeapBytes() const {
  size_t n = slots_.capacity() * sizeof(Slot) + index_.capacity() * sizeof(uint32_t);
  for (const Slot& s : slots_) {
    if (s.name.view().size() > 15) n += s.name.view().size();
  }
  return n;
}

}  // namespace spoke::agent
