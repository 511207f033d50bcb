#include "cache-agent/cache/slot_space.h"

#include <cerrno>

#include "cache-agent/cache/block_header.h"

namespace spoke::agent {

SlotSpace::SlotSpace(BlockStore* store, bool punching)
    : store_(store), punching_(punching), slots_(store->slot_count()) {}

std::optional<uint64_t> SlotSpace::TakeFree() {
  if (free_.empty()) return std::nullopt;
  uint64_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void SlotSpace::AddFreeExcept(const std::vector<bool>& used) {
  for (uint64_t s = slots_.size(); s > 0; --s) {
    if (!used[s - 1]) free_.push_back(s - 1);
  }
}

void SlotSpace::Unpin(uint64_t slot) {
  SlotState& st = slots_[slot];
  --st.pins;
  if (st.pins == 0 && st.free_when_unpinned) {
    st.free_when_unpinned = false;
    Free(slot);
  }
}

void SlotSpace::Release(uint64_t slot) {
  if (slots_[slot].pins > 0) {
    slots_[slot].free_when_unpinned = true;
  } else {
    Free(slot);
  }
}

void SlotSpace::Free(uint64_t slot) {
  // Without holes there is no space to give back: the slot is simply reused (Evict() still
  // invalidates its headers itself).
  if (punching_ && slots_[slot].extent > 0) {
    to_clear_.push_back(slot);
  } else {
    free_.push_back(slot);
  }
}

std::vector<uint64_t> SlotSpace::TakeToClear() {
  std::vector<uint64_t> slots;
  slots.swap(to_clear_);
  return slots;
}

SlotSpace::ClearOutcome SlotSpace::ClearIo(const std::vector<uint64_t>& slots, bool punch,
                                           bool degraded) const {
  ClearOutcome out;
  AlignedBuffer zero;
  for (uint64_t s : slots) {
    Status r = Ok();
    bool p = false;
    if (!degraded && punch) {
      r = store_->Punch(s, 0, store_->slot_size());
      p = r.has_value();
      if (!r && r.error().ToErrno() == EOPNOTSUPP) {
        out.refused = true;
        punch = false;
      }
    }
    if (!degraded && !punch) {
      // No holes: overwrite the header, so the block cannot come back after a crash.
      if (!zero) zero = AllocateAligned(kHeaderBytes);
      iovec seg{zero.get(), kHeaderBytes};
      r = zero ? store_->Write(s, 0, {&seg, 1}) : Status(Ok());
    }
    out.results.push_back(std::move(r));
    out.punched.push_back(p);
  }
  return out;
}

void SlotSpace::FinishClear(const std::vector<uint64_t>& slots, const ClearOutcome& outcome) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (outcome.punched[i]) slots_[slots[i]].extent = 0;
    free_.push_back(slots[i]);
  }
}

}  // namespace spoke::agent
