// SlotFileBlockCache, data path: Get, Put (and its eviction loop), Evict, Close, and the
// bookkeeping under mu_ they share. Opening and recovery: slot_file_block_cache_open.cc.
#include "cache-agent/cache/slot_file_block_cache.h"

#include <algorithm>
#include <cerrno>
#include <string>

#include "cache-agent/cache/block_header.h"
#include "cache-agent/cache/index_file.h"
#include "cache-agent/cache/slot_io.h"
#include "common/log.h"

namespace spoke::agent {

// The zero-copy Get buffers the interface promises are what the store's O_DIRECT needs.
static_assert(BlockCache::kDirectAlign % kIoAlign == 0);

namespace {

bool Matches(const BlockKey& k, uint64_t volume, uint64_t file_id) {
  return k.volume == volume && (file_id == 0 || k.file_id == file_id);
}

}  // namespace

bool SlotFileBlockCache::punching() const {
  MutexLock lock(mu_);
  return slots_->punching();
}

void SlotFileBlockCache::Publish(const BlockKey& key, Entry e, const AdmissionHint& hint) {
  e.charge = ChargeLocked(e.length);
  // What this block occupies on disk, at least (the rest of its slot is a hole).
  slots_->set_extent(e.slot,
                     std::max(slots_->extent(e.slot),
                              static_cast<uint32_t>(kHeaderBytes + AlignUp(e.length, kIoAlign))));
  index_[key] = e;
  by_file_[key.volume][key.file_id].insert(key);
  policy_->OnInsert(key, hint);
  stats_.used_bytes += e.length;
  volume_bytes_[key.volume] += e.length;
  m_bytes_->Set(static_cast<int64_t>(stats_.used_bytes));
  SetDiskBytesLocked(stats_.disk_bytes + e.charge);
}

uint32_t SlotFileBlockCache::ChargeLocked(uint32_t length) const {
  return slots_->punching() ? static_cast<uint32_t>(kHeaderBytes + AlignUp(length, kIoAlign))
                            : slot_size_;
}

void SlotFileBlockCache::SetDiskBytesLocked(uint64_t bytes) {
  stats_.disk_bytes = bytes;
  m_disk_bytes_->Set(static_cast<int64_t>(bytes));
}

void SlotFileBlockCache::StopPunchingLocked() {
  if (!slots_->punching()) return;
  slots_->StopPunching();
  log::Warn("cache filesystem refused to punch a hole: charging whole slots until restart",
            {{"dir", config_.dir}});
  uint64_t bytes = stats_.disk_bytes;
  for (auto& [key, e] : index_) {
    bytes += slot_size_ - e.charge;
    e.charge = slot_size_;
  }
  SetDiskBytesLocked(bytes);  // may exceed the quota: the next Puts evict down to it
}

void SlotFileBlockCache::TrimToQuotaLocked(std::vector<Event>& events) {
  while (stats_.disk_bytes > disk_quota_) {
    std::optional<BlockKey> victim = policy_->PickVictim(BlockKey{}, AdmissionHint{});
    auto it = victim ? index_.find(*victim) : index_.end();
    if (it == index_.end()) break;
    DropLocked(it, events);
    ++stats_.evictions;
    m_evictions_->Inc();
  }
}

Result<size_t> SlotFileBlockCache::Get(const BlockKey& key, char* out, size_t capacity) {
  Entry e;
  {
    MutexLock lock(mu_);
    auto it = closed_ || stats_.degraded ? index_.end() : index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return Fail(Code::kNotFound, "not cached");
    }
    if (capacity < it->second.length) {
      return Fail(Code::kInvalidArgument, "Get: buffer smaller than the block");
    }
    e = it->second;
    slots_->Pin(e.slot);
    ++inflight_;
  }

  const BlockRead got =
      ReadBlock(*store_, buffers_, e.slot, config_.block_size, key, e.seq, e.length, out, capacity);
  const Status& io = got.io;
  const std::string& bad = got.bad;

  std::vector<Event> events;
  Result<size_t> result = e.length;
  bool clear = false;
  {
    MutexLock lock(mu_);
    auto it = index_.find(key);
    const bool same = it != index_.end() && it->second.slot == e.slot && it->second.seq == e.seq;
    if (!io || !bad.empty()) {
      if (!io) {
        RecordIoLocked(io, "read block");
      } else {
        ++stats_.checksum_failures;
        m_checksum_failures_->Inc();
        log::Warn("cache block failed verification; dropped", {{"reason", bad},
                                                               {"volume", key.volume},
                                                               {"file_id", key.file_id},
                                                               {"block", key.index},
                                                               {"slot", e.slot}});
      }
      if (same) DropLocked(it, events);
      ++stats_.misses;
      result = Fail(Code::kNotFound, io ? bad : "cache read failed: " + io.error().message());
    } else {
      consecutive_errors_ = 0;
      ++stats_.hits;
      if (same) {
        it->second.last_use = ++tick_;
        policy_->OnAccess(key);
        if (it->second.origin != kDemand && !it->second.read) {
          events.push_back({true, key, it->second.origin});
        }
        it->second.read = true;
      }
    }
    slots_->Unpin(e.slot);
    clear = slots_->has_to_clear();
    --inflight_;
  }
  cv_.notify_all();
  Fire(events);
  if (clear) ClearReleased();
  return result;
}

Status SlotFileBlockCache::Put(const BlockKey& key, const char* data, size_t length,
                               const AdmissionHint& hint) {
  if (data == nullptr || length == 0 || length > config_.block_size) {
    return Fail(Code::kInvalidArgument, "Put: length must be in 1..block_size");
  }
  std::vector<Event> events;
  bool clear_victims = false;
  Result<std::optional<PendingPut>> reserved =
      ReserveForPut(key, length, hint, events, clear_victims);
  Fire(events);
  // Space of the other victims back first, so the disk stays within the quota.
  if (clear_victims) ClearReleased();
  if (!reserved) return std::unexpected(reserved.error());
  if (!*reserved) return Ok();  // cached, or being written
  PendingPut& put = **reserved;
  WriteForPut(key, data, length, hint, put);
  return FinishPut(key, length, hint, put);
}

Result<std::optional<SlotFileBlockCache::PendingPut>> SlotFileBlockCache::ReserveForPut(
    const BlockKey& key, size_t length, const AdmissionHint& hint, std::vector<Event>& events,
    bool& clear_victims) {
  MutexLock lock(mu_);
  if (closed_) return Fail(Code::kUnavailable, "cache closed");
  if (stats_.degraded) return Fail(Code::kIo, "cache degraded: disk failed");
  if (index_.contains(key) || writing_.contains(key)) return std::nullopt;
  PendingPut put;
  put.charge = ChargeLocked(static_cast<uint32_t>(length));
  Result<uint64_t> room = MakeRoomLocked(key, hint, put.charge, events);
  clear_victims = slots_->has_to_clear();
  if (!room) return std::unexpected(room.error());
  put.slot = *room;
  writing_[key] = Writing{put.slot, put.charge, false};
  SetDiskBytesLocked(stats_.disk_bytes + put.charge);  // reserved: concurrent Puts see it
  put.seq = next_seq_++;
  ++inflight_;
  // A reader still on the victim's old contents finishes first.
  cv_.wait(lock, [&]() REQUIRES(mu_) { return !slots_->pinned(put.slot); });
  put.old_extent = slots_->extent(put.slot);
  clear_victims = slots_->has_to_clear();
  return put;
}

void SlotFileBlockCache::WriteForPut(const BlockKey& key, const char* data, size_t length,
                                     const AdmissionHint& hint, PendingPut& put) {
  BlockHeader h;
  h.block_size = config_.block_size;
  h.key = key;
  h.seq = put.seq;
  h.length = static_cast<uint32_t>(length);
  h.origin = hint.origin;
  put.extent = static_cast<uint32_t>(kHeaderBytes + AlignUp(length, kIoAlign));
  put.io = WriteBlock(*store_, buffers_, put.slot, h, data);
  // A longer block held this slot before: give its tail back (never with whole-slot charges:
  // no holes, or a full block).
  if (put.io && put.charge < slot_size_ && put.old_extent > put.extent) {
    put.tail = store_->Punch(put.slot, put.extent, put.old_extent - put.extent);
  }
}

Status SlotFileBlockCache::FinishPut(const BlockKey& key, size_t length, const AdmissionHint& hint,
                                     const PendingPut& put) {
  Status result = Ok();
  bool clear = false;
  {
    MutexLock lock(mu_);
    auto w = writing_.find(key);
    const bool cancelled = w->second.cancelled;
    SetDiskBytesLocked(stats_.disk_bytes - w->second.charge);
    writing_.erase(w);
    // A failed write may have allocated anything; a failed punch kept the old tail.
    slots_->set_extent(put.slot, !put.io    ? slot_size_
                                 : put.tail ? put.extent
                                            : std::max(put.extent, put.old_extent));
    if (!put.tail && put.tail.error().ToErrno() == EOPNOTSUPP) {
      StopPunchingLocked();
    } else if (!put.tail) {
      RecordIoLocked(put.tail, "punch block tail");
    }
    if (!put.io) {
      RecordIoLocked(put.io, "write block");
      slots_->Free(put.slot);
      result = Fail(Code::kIo, "cache write failed: " + put.io.error().message());
    } else if (cancelled || closed_) {
      if (put.tail) consecutive_errors_ = 0;
      slots_->Free(put.slot);
    } else {
      if (put.tail) consecutive_errors_ = 0;
      Publish(
          key,
          Entry{put.slot, put.seq, ++tick_, static_cast<uint32_t>(length), hint.origin, false, 0},
          hint);
    }
    clear = slots_->has_to_clear();
    --inflight_;
  }
  cv_.notify_all();
  if (clear) ClearReleased();
  return result;
}

Result<uint64_t> SlotFileBlockCache::MakeRoomLocked(const BlockKey& key, const AdmissionHint& hint,
                                                    uint32_t charge, std::vector<Event>& events) {
  std::optional<uint64_t> slot = slots_->TakeFree();
  // Evict until the block fits the quota and has a slot: the first victim's slot goes to
  // this Put when no slot was free, later victims' slots are freed (and punched).
  for (int strays = 0; !slot || stats_.disk_bytes + charge > disk_quota_;) {
    std::optional<BlockKey> victim = policy_->PickVictim(key, hint);
    auto it = victim ? index_.find(*victim) : index_.end();
    if (victim && it == index_.end()) {
      // A policy naming a block the cache does not hold is a bug; recover, bounded.
      log::Error("eviction policy named an uncached block", {{"attempt", strays}});
      policy_->OnRemove(*victim);
      if (++strays < 8) continue;
      victim.reset();
    }
    if (!victim) {
      if (slot) slots_->Release(*slot);
      if (strays >= 8) return Fail(Code::kInternal, "eviction policy out of sync");
      ++stats_.rejected_admissions;
      // A refused prefetch is wasted work for its expert: tell the scorer now rather than
      // letting the verdict wait for expiry.
      if (hint.origin != kDemand) events.push_back(Event{false, key, hint.origin});
      return Fail(Code::kNoSpace, "cache full: admission refused by eviction policy");
    }
    if (!slot) {
      slot = it->second.slot;
      DropLocked(it, events, /*release_slot=*/false);  // the slot goes to this Put
    } else {
      DropLocked(it, events);
    }
    ++stats_.evictions;
    m_evictions_->Inc();
  }
  return *slot;
}

bool SlotFileBlockCache::WouldAdmit(const BlockKey& key, const AdmissionHint& hint) const {
  MutexLock lock(mu_);
  if (stats_.degraded || closed_) return false;
  if (index_.contains(key) || writing_.contains(key)) return true;
  if (slots_->free_count() > 0 &&
      stats_.disk_bytes + ChargeLocked(config_.block_size) <= disk_quota_) {
    return true;
  }
  return policy_->WouldAdmit(hint);
}

uint64_t SlotFileBlockCache::FreeBytes() const {
  MutexLock lock(mu_);
  if (stats_.degraded || closed_ || slots_->free_count() == 0) return 0;
  return disk_quota_ > stats_.disk_bytes ? disk_quota_ - stats_.disk_bytes : 0;
}

bool SlotFileBlockCache::Contains(const BlockKey& key) const {
  MutexLock lock(mu_);
  return !stats_.degraded && index_.contains(key);
}

uint64_t SlotFileBlockCache::Evict(uint64_t volume, uint64_t file_id) {
  std::vector<Event> events;
  std::vector<uint64_t> slots;
  {
    MutexLock lock(mu_);
    for (auto& [key, w] : writing_) {
      if (Matches(key, volume, file_id)) w.cancelled = true;
    }
    std::vector<BlockKey> keys;
    if (auto v = by_file_.find(volume); v != by_file_.end()) {
      const auto take = [&keys](const auto& file_keys) {
        keys.insert(keys.end(), file_keys.begin(), file_keys.end());
      };
      if (file_id == 0) {
        for (const auto& [id, file_keys] : v->second) take(file_keys);
      } else if (auto f = v->second.find(file_id); f != v->second.end()) {
        take(f->second);
      }
    }
    for (const BlockKey& key : keys) {
      auto it = index_.find(key);
      if (it == index_.end()) continue;
      // The slot stays out of the free list until its header is invalidated below.
      slots.push_back(it->second.slot);
      DropLocked(it, events, /*release_slot=*/false);
    }
    if (slots.empty() || closed_) {
      for (uint64_t s : slots) slots_->AddFree(s);
      lock.unlock();
      Fire(events);
      return slots.size();
    }
    ++inflight_;
    cv_.wait(lock, [&]() REQUIRES(mu_) {
      return std::all_of(slots.begin(), slots.end(),
                         [&](uint64_t s) REQUIRES(mu_) { return !slots_->pinned(s); });
    });
  }
  Fire(events);
  // Punch the slots (or overwrite their headers) so a crash before the next Close does not
  // resurrect the blocks, and the space goes back at once.
  ClearSlots(slots);
  {
    MutexLock lock(mu_);
    --inflight_;
  }
  cv_.notify_all();
  log::Info("cache evicted", {{"volume", volume}, {"file_id", file_id}, {"blocks", slots.size()}});
  return slots.size();
}

uint64_t SlotFileBlockCache::VolumeBytes(uint64_t volume) const {
  MutexLock lock(mu_);
  auto it = volume_bytes_.find(volume);
  return it == volume_bytes_.end() ? 0 : it->second;
}

BlockCacheStats SlotFileBlockCache::Stats() const {
  MutexLock lock(mu_);
  BlockCacheStats s = stats_;
  s.blocks = index_.size();
  return s;
}

void SlotFileBlockCache::SetListener(CacheListener* listener) {
  MutexLock lock(mu_);
  listener_ = listener;
}

Status SlotFileBlockCache::Close() {
  MutexLock lock(mu_);
  if (closed_) return Ok();
  closed_ = true;
  cv_.wait(lock, [&]() REQUIRES(mu_) { return inflight_ == 0; });
  if (slots_->has_to_clear()) {
    // Freed slots get their space back before the index records them as free.
    std::vector<uint64_t> clear = slots_->TakeToClear();
    lock.unlock();
    ClearSlots(clear);
    lock.lock();
  }
  if (stats_.degraded) {
    dir_lock_.Release();
    log::Warn("cache degraded at shutdown; index not saved (next start rescans)",
              {{"dir", config_.dir}});
    return Fail(Code::kIo, "cache degraded: index not saved");
  }
  lock.unlock();
  Status s = store_->Sync();
  if (s) s = WriteIndex();
  if (s) s = WriteCleanMarker(config_.dir);
  // The directory's lock goes with the index: after Close another cache may open it.
  dir_lock_.Release();
  if (!s) {
    log::Warn("cache index not saved; next start rescans",
              {{"dir", config_.dir}, {"error", s.error().message()}});
    return std::unexpected(s.error().Wrap("cache close"));
  }
  log::Info("cache closed cleanly", {{"dir", config_.dir}, {"blocks", Stats().blocks}});
  return Ok();
}

Status SlotFileBlockCache::WriteIndex() {
  IndexContents contents;
  {
    MutexLock lock(mu_);
    std::vector<std::pair<const BlockKey*, const Entry*>> order;
    order.reserve(index_.size());
    for (const auto& [k, e] : index_) order.emplace_back(&k, &e);
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.second->last_use < b.second->last_use; });
    contents.block_size = config_.block_size;
    contents.slot_count = slot_count_;
    contents.next_seq = next_seq_;
    contents.punched = slots_->punching();
    contents.records.reserve(order.size());
    for (const auto& [k, e] : order) {
      contents.records.push_back(IndexRecord{*k, e->slot, e->seq, e->length, e->origin, e->read});
    }
  }
  return WriteIndexFile(config_.dir, contents);
}

void SlotFileBlockCache::DropLocked(Index::iterator it, std::vector<Event>& events,
                                    bool release_slot) {
  const BlockKey key = it->first;
  const Entry e = it->second;
  policy_->OnRemove(key);
  if (e.origin != kDemand && !e.read) events.push_back({false, key, e.origin});
  stats_.used_bytes -= e.length;
  SetDiskBytesLocked(stats_.disk_bytes - e.charge);
  auto vb = volume_bytes_.find(key.volume);
  if (vb != volume_bytes_.end() && (vb->second -= e.length) == 0) volume_bytes_.erase(vb);
  m_bytes_->Set(static_cast<int64_t>(stats_.used_bytes));
  if (auto v = by_file_.find(key.volume); v != by_file_.end()) {
    if (auto f = v->second.find(key.file_id); f != v->second.end()) {
      f->second.erase(key);
      if (f->second.empty()) v->second.erase(f);
    }
    if (v->second.empty()) by_file_.erase(v);
  }
  index_.erase(it);
  if (release_slot) slots_->Release(e.slot);
}

void SlotFileBlockCache::ClearReleased() {
  std::vector<uint64_t> slots;
  {
    MutexLock lock(mu_);
    // After Close started, Close clears what is left.
    if (!slots_->has_to_clear() || closed_) return;
    slots = slots_->TakeToClear();
    ++inflight_;
  }
  ClearSlots(slots);
  {
    MutexLock lock(mu_);
    --inflight_;
  }
  cv_.notify_all();
}

void SlotFileBlockCache::ClearSlots(const std::vector<uint64_t>& slots) {
  if (slots.empty()) return;
  bool punch, degraded;
  {
    MutexLock lock(mu_);
    punch = slots_->punching();
    degraded = stats_.degraded;
  }
  SlotSpace::ClearOutcome outcome = SlotsForClearIo().ClearIo(slots, punch, degraded);
  MutexLock lock(mu_);
  if (outcome.refused) StopPunchingLocked();
  for (const Status& r : outcome.results) {
    if (!r) RecordIoLocked(r, "clear freed slot");
  }
  slots_->FinishClear(slots, outcome);
}

void SlotFileBlockCache::RecordIoLocked(const Status& s, std::string_view what) {
  ++stats_.disk_errors;
  ++consecutive_errors_;
  m_disk_errors_->Inc();
  log::Warn("cache disk error", {{"op", what}, {"error", s.error().message()}});
  if (!stats_.degraded && (consecutive_errors_ >= options_.degrade_after_consecutive_errors ||
                           stats_.disk_errors >= options_.degrade_after_total_errors)) {
    stats_.degraded = true;
    m_degraded_->Set(1);
    log::Warn("cache disk failing: cache degraded, every read goes to the hub until restart",
              {{"dir", config_.dir}, {"disk_errors", stats_.disk_errors}});
  }
}

void SlotFileBlockCache::Fire(const std::vector<Event>& events) {
  if (events.empty()) return;
  CacheListener* listener;
  {
    MutexLock lock(mu_);
    listener = listener_;
  }
  if (listener == nullptr) return;
  for (const Event& ev : events) {
    if (ev.used) {
      listener->OnPrefetchUsed(ev.key, ev.expert);
    } else {
      listener->OnPrefetchWasted(ev.key, ev.expert);
    }
  }
}

}  // namespace spoke::agent
