// SlotSpace: which slots of the block store are free, pinned by readers, or waiting to have
// their disk space given back, and how far each slot may be allocated on disk (its extent).
//
// A freed slot whose extent may hold data goes to a "to clear" list while holes are punched;
// ClearIo then punches it whole (or, without holes, overwrites its header so the block cannot
// come back after a crash) and FinishClear puts it on the free list. A pinned slot (a Get
// reading it) is never reused: Release defers the free to the last Unpin.
//
// Locking: not thread-safe. Every method except ClearIo must run under the owning cache's
// mutex; ClearIo does device I/O and must run without it, on slots the caller took with
// TakeToClear (in no list, so nobody else touches them).
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <optional>
#include <vector>

#include "cache-agent/cache/block_store.h"
#include "common/status.h"

namespace spoke::agent {

class SlotSpace {
 public:
  // `store` must outlive this. No slot is free until AddFree / FinishClear.
  SlotSpace(BlockStore* store, bool punching);
  SlotSpace(const SlotSpace&) = delete;
  SlotSpace& operator=(const SlotSpace&) = delete;

  uint64_t slot_count() const { return slots_.size(); }
  uint32_t slot_size() const { return store_->slot_size(); }
  // True while freed space is given back by punching (blocks charged by bytes).
  bool punching() const { return punching_; }
  // The filesystem refused a punch: from now on freed slots go straight to the free list.
  void StopPunching() { punching_ = false; }

  // The most recently freed slot, or nullopt when none is free.
  std::optional<uint64_t> TakeFree();
  // Puts a slot known to be empty (or cleared) on the free list.
  void AddFree(uint64_t slot) { free_.push_back(slot); }
  // Every slot in [0, slot_count) not in `used` becomes free, lowest handed out first.
  void AddFreeExcept(const std::vector<bool>& used);
  size_t free_count() const { return free_.size(); }

  void Pin(uint64_t slot) { ++slots_[slot].pins; }
  // Drops a pin; frees the slot when it was the last and a Release was deferred.
  void Unpin(uint64_t slot);
  bool pinned(uint64_t slot) const { return slots_[slot].pins > 0; }

  // A slot whose block is gone: freed now, or at its last Unpin.
  void Release(uint64_t slot);
  // An unpinned slot nobody uses: to the clear list when it may hold space to punch, else free.
  void Free(uint64_t slot);

  // Bytes from the slot's start that may be allocated on disk.
  uint32_t extent(uint64_t slot) const { return slots_[slot].extent; }
  void set_extent(uint64_t slot, uint32_t bytes) { slots_[slot].extent = bytes; }

  bool has_to_clear() const { return !to_clear_.empty(); }
  std::vector<uint64_t> TakeToClear();

  struct ClearOutcome {
    std::vector<Status> results;  // one per slot; failed I/O to be counted by the caller
    std::vector<bool> punched;    // one per slot: its space was given back
    bool refused = false;         // the filesystem said EOPNOTSUPP to a punch
  };
  // Device I/O for freed slots (see above): punches each whole slot when `punch`, else (or
  // once a punch is refused) zeroes its header; nothing when `degraded`. Runs WITHOUT the
  // owner's mutex.
  ClearOutcome ClearIo(const std::vector<uint64_t>& slots, bool punch, bool degraded) const;
  // After ClearIo: punched slots have extent 0; every slot goes on the free list.
  void FinishClear(const std::vector<uint64_t>& slots, const ClearOutcome& outcome);

 private:
  struct SlotState {
    uint32_t pins = 0;
    bool free_when_unpinned = false;
    uint32_t extent = 0;
  };

  BlockStore* const store_;
  bool punching_;
  std::vector<SlotState> slots_;
  std::vector<uint64_t> free_;
  std::vector<uint64_t> to_clear_;
};

}  // namespace spoke::agent
