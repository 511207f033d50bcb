#include "cache-agent/cache/default_block_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "cache-agent/cache/block_header.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

constexpr uint64_t kIndexMagic = 0x3158444e494b5053ull;  // "SPKINDX1"
// 2: flags (holes punched) in the header. A version-1 index (preallocated files, whole-slot
// quota) is rejected: the rescan punches what the old files hold.
constexpr uint32_t kIndexVersion = 2;
constexpr uint32_t kIndexPunched = 1;  // free slots and block tails were punched at Close
// Smallest block the slot count is sized for (default_block_cache.h).
constexpr uint64_t kDenseBlockBytes = 64 << 10;
constexpr const char* kIndexFile = "index";
constexpr const char* kIndexTmpFile = "index.tmp";
constexpr const char* kCleanFile = "clean";
constexpr const char* kLockFile = "lock";

// Index file layout (little-endian): IndexHeader, entry_count x IndexEntry, XXH3-64 of all
// bytes before it.
struct IndexHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t block_size;
  uint64_t slot_count;
  uint64_t next_seq;
  uint64_t entry_count;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(IndexHeader) == 48);
struct IndexEntry {
  uint64_t volume, file_id, version, index;
  uint64_t slot;
  uint64_t seq;
  uint32_t length;
  uint8_t origin;
  uint8_t read;
  uint8_t pad[2];
};
static_assert(sizeof(IndexEntry) == 56);

std::string Path(const std::string& dir, const char* name) { return dir + "/" + name; }

Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open dir " + dir));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return std::unexpected(Error::FromErrno(err, "fsync dir " + dir));
  return Ok();
}

Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "create " + path));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      return std::unexpected(Error::FromErrno(err, "write " + path));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    int err = errno;
    close(fd);
    return std::unexpected(Error::FromErrno(err, "fsync " + path));
  }
  close(fd);
  return Ok();
}

bool ReadWholeFile(const std::string& path, std::string& out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

bool Matches(const BlockKey& k, uint64_t volume, uint64_t file_id) {
  return k.volume == volume && (file_id == 0 || k.file_id == file_id);
}

}  // namespace

Status BlockCache::Config::Validate() const {
  if (dir.empty()) return Fail(Code::kInvalidArgument, "cache dir: must be set");
  if (block_size < kMinBlockSize || block_size > kMaxBlockSize ||
      (block_size & (block_size - 1)) != 0) {
    return Fail(Code::kInvalidArgument,
                "cache block_size: must be a power of two between 64 KiB and 16 MiB, got " +
                    std::to_string(block_size));
  }
  if (capacity_bytes < 2ull * block_size) {
    return Fail(Code::kInvalidArgument, "cache capacity_bytes: must hold at least 2 blocks (" +
                                            std::to_string(2ull * block_size) + " bytes), got " +
                                            std::to_string(capacity_bytes));
  }
  if (io_depth == 0 || io_depth > 4096) {
    return Fail(Code::kInvalidArgument, "cache io_depth: must be between 1 and 4096");
  }
  return Ok();
}

DefaultBlockCache::StoreFactory DefaultBlockCache::UringStore(
    const UringBlockStore::Options& options) {
  return [options](const std::string& dir, uint64_t slot_count,
                   uint32_t slot_size) -> Result<std::unique_ptr<BlockStore>> {
    auto store = UringBlockStore::Open(dir, slot_count, slot_size, options);
    if (!store) return std::unexpected(store.error());
    return std::unique_ptr<BlockStore>(std::move(*store));
  };
}

DefaultBlockCache::DefaultBlockCache(const Config& config, const Options& options,
                                     metrics::Registry* metrics)
    : config_(config), options_(options) {
  if (metrics == nullptr) {
    own_metrics_ = std::make_unique<metrics::Registry>();
    metrics = own_metrics_.get();
  }
  m_evictions_ = &metrics->GetCounter("spoke_cache_evictions_total",
                                      "Blocks evicted from the cache to make room");
  m_checksum_failures_ = &metrics->GetCounter(
      "spoke_checksum_failures_total", "Cached blocks dropped because they failed verification");
  m_disk_errors_ =
      &metrics->GetCounter("spoke_cache_disk_errors_total", "Failed I/O on the cache disk");
  m_bytes_ = &metrics->GetGauge("spoke_cache_bytes", "Bytes of block data held in the cache");
  m_capacity_ = &metrics->GetGauge("spoke_cache_capacity_bytes", "Block data quota of the cache");
  m_disk_bytes_ =
      &metrics->GetGauge("spoke_cache_disk_bytes",
                         "Disk space charged to cached blocks (header + data rounded up to 4 KiB)");
  m_disk_quota_ = &metrics->GetGauge("spoke_cache_disk_quota_bytes",
                                     "Limit on spoke_cache_disk_bytes (capacity + block headers)");
  m_degraded_ = &metrics->GetGauge("spoke_cache_degraded",
                                   "1 when the cache disk failed and every read goes to the hub");
}

Result<std::unique_ptr<DefaultBlockCache>> DefaultBlockCache::Open(
    const Config& config, const StoreFactory& store_factory, std::unique_ptr<EvictionPolicy> policy,
    metrics::Registry* metrics, const Options& options) {
  if (Status v = config.Validate(); !v) return std::unexpected(v.error());
  if (!policy) return Fail(Code::kInvalidArgument, "cache eviction policy: must be set");
  std::unique_ptr<DefaultBlockCache> cache(new DefaultBlockCache(config, options, metrics));

  // One cache per directory: two agents sharing the data files would corrupt each other.
  const std::string lock_path = Path(config.dir, kLockFile);
  cache->lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (cache->lock_fd_ < 0) {
    return std::unexpected(Error::FromErrno(errno, "cache dir: cannot create " + lock_path));
  }
  if (flock(cache->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Fail(Code::kUnavailable, "cache dir: " + config.dir + " is in use by another cache");
  }

  // Geometry (default_block_cache.h): the quota is the disk one slot per block of capacity
  // took; with hole punching, many more slots share it.
  const uint64_t block_slots = config.capacity_bytes / config.block_size;
  const uint32_t slot_size = static_cast<uint32_t>(kHeaderBytes + config.block_size);
  cache->slot_size_ = slot_size;
  cache->disk_quota_ = block_slots * slot_size;
  cache->punch_ = options.punch_holes && UringBlockStore::CanPunchHoles(config.dir);
  if (options.punch_holes && !cache->punch_) {
    log::Warn("cache filesystem cannot punch holes: one slot per block, each charged whole",
              {{"dir", config.dir}});
  }
  cache->slot_count_ = cache->punch_
                           ? std::clamp(cache->disk_quota_ / (kDenseBlockBytes + kHeaderBytes),
                                        block_slots, std::max(block_slots, kMaxSlots))
                           : block_slots;
  auto store = store_factory(config.dir, cache->slot_count_, slot_size);
  if (!store) return std::unexpected(store.error().Wrap("cache store"));
  if ((*store)->slot_count() != cache->slot_count_ || (*store)->slot_size() != slot_size) {
    return Fail(Code::kInternal, "cache store: geometry does not match the config");
  }
  cache->store_ = std::move(*store);
  cache->policy_ = std::move(policy);
  cache->slots_.resize(cache->slot_count_);
  cache->stats_.capacity_bytes = block_slots * config.block_size;
  cache->stats_.disk_quota_bytes = cache->disk_quota_;
  cache->m_capacity_->Set(static_cast<int64_t>(cache->stats_.capacity_bytes));
  cache->m_disk_quota_->Set(static_cast<int64_t>(cache->disk_quota_));
  cache->m_disk_bytes_->Set(0);
  cache->m_degraded_->Set(0);
  if (Status s = cache->Recover(); !s) return std::unexpected(s.error());
  return cache;
}

DefaultBlockCache::~DefaultBlockCache() {
  if (store_) (void)Close();
  if (lock_fd_ >= 0) close(lock_fd_);
}

Status DefaultBlockCache::Recover() {
  const std::string clean = Path(config_.dir, kCleanFile);
  const bool was_clean = access(clean.c_str(), F_OK) == 0;
  // From here on the on-disk index is stale: a crash before the next Close must rescan.
  if (was_clean) {
    if (unlink(clean.c_str()) != 0) {
      return std::unexpected(Error::FromErrno(errno, "cache: cannot remove " + clean));
    }
    if (Status s = FsyncDir(config_.dir); !s) return s;
  }
  if (store_->fresh()) {
    recovery_ = Recovery::kFresh;
    for (uint64_t s = slot_count_; s > 0; --s) free_.push_back(s - 1);
  } else if (was_clean && LoadIndex()) {
    recovery_ = Recovery::kIndex;
  } else {
    if (!was_clean)
      log::Warn("cache was not shut down cleanly; rebuilding index by scanning",
                {{"dir", config_.dir}});
    recovery_ = Recovery::kScan;
    Scan();
  }
  unlink(Path(config_.dir, kIndexFile).c_str());
  std::vector<uint64_t> clear;
  {
    // A smaller quota than the blocks found (capacity changed), or duplicates left by a crash.
    std::vector<Event> events;  // no listener yet
    std::lock_guard lock(mu_);
    TrimToQuotaLocked(events);
    clear.swap(to_clear_);
  }
  ClearSlots(clear);
  std::lock_guard lock(mu_);
  // Sparse files reserve nothing: say so now if the filesystem cannot hold the quota.
  struct statvfs vfs {};
  if (statvfs(config_.dir.c_str(), &vfs) == 0 &&
      uint64_t{vfs.f_bavail} * vfs.f_frsize < disk_quota_ - stats_.disk_bytes) {
    log::Warn("cache filesystem has less free space than the cache quota; writes may fail",
              {{"dir", config_.dir},
               {"free_bytes", uint64_t{vfs.f_bavail} * vfs.f_frsize},
               {"quota_left_bytes", disk_quota_ - stats_.disk_bytes}});
  }
  log::Info("block cache open", {{"dir", config_.dir},
                                 {"recovery", recovery_ == Recovery::kFresh   ? "fresh"
                                              : recovery_ == Recovery::kIndex ? "index"
                                                                              : "scan"},
                                 {"blocks", index_.size()},
                                 {"slots", slot_count_},
                                 {"block_size", config_.block_size},
                                 {"punch_holes", punch_},
                                 {"disk_bytes", stats_.disk_bytes},
                                 {"disk_quota_bytes", disk_quota_}});
  return Ok();
}

bool DefaultBlockCache::punching() const {
  std::lock_guard lock(mu_);
  return punch_;
}

void DefaultBlockCache::Publish(const BlockKey& key, Entry e, const AdmissionHint& hint) {
  e.charge = ChargeLocked(e.length);
  // What this block occupies on disk, at least (the rest of its slot is a hole).
  uint32_t& extent = slots_[e.slot].extent;
  extent = std::max(extent, static_cast<uint32_t>(kHeaderBytes + AlignUp(e.length, kIoAlign)));
  index_[key] = e;
  policy_->OnInsert(key, hint);
  stats_.used_bytes += e.length;
  volume_bytes_[key.volume] += e.length;
  m_bytes_->Set(static_cast<int64_t>(stats_.used_bytes));
  SetDiskBytesLocked(stats_.disk_bytes + e.charge);
}

uint32_t DefaultBlockCache::ChargeLocked(uint32_t length) const {
  return punch_ ? static_cast<uint32_t>(kHeaderBytes + AlignUp(length, kIoAlign)) : slot_size_;
}

void DefaultBlockCache::SetDiskBytesLocked(uint64_t bytes) {
  stats_.disk_bytes = bytes;
  m_disk_bytes_->Set(static_cast<int64_t>(bytes));
}

void DefaultBlockCache::StopPunchingLocked() {
  if (!punch_) return;
  punch_ = false;
  log::Warn("cache filesystem refused to punch a hole: charging whole slots until restart",
            {{"dir", config_.dir}});
  uint64_t bytes = stats_.disk_bytes;
  for (auto& [key, e] : index_) {
    bytes += slot_size_ - e.charge;
    e.charge = slot_size_;
  }
  SetDiskBytesLocked(bytes);  // may exceed the quota: the next Puts evict down to it
}

void DefaultBlockCache::TrimToQuotaLocked(std::vector<Event>& events) {
  while (stats_.disk_bytes > disk_quota_) {
    std::optional<BlockKey> victim = policy_->PickVictim(BlockKey{}, AdmissionHint{});
    auto it = victim ? index_.find(*victim) : index_.end();
    if (it == index_.end()) break;
    DropLocked(it, events);
    ++stats_.evictions;
    m_evictions_->Inc();
  }
}

bool DefaultBlockCache::LoadIndex() {
  const std::string path = Path(config_.dir, kIndexFile);
  std::string bytes;
  auto reject = [&](const char* why) {
    log::Warn("cache index unusable; rebuilding by scanning", {{"path", path}, {"reason", why}});
    return false;
  };
  if (!ReadWholeFile(path, bytes)) return reject("missing or unreadable");
  if (bytes.size() < sizeof(IndexHeader) + 8) return reject("truncated");
  uint64_t stored_sum;
  std::memcpy(&stored_sum, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != stored_sum) return reject("checksum");
  IndexHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kIndexMagic || h.version != kIndexVersion) return reject("format");
  if (h.block_size != config_.block_size || h.slot_count != slot_count_) {
    return reject("geometry changed");
  }
  if (((h.flags & kIndexPunched) != 0) != punch_) return reject("hole punching changed");
  if (bytes.size() != sizeof(IndexHeader) + h.entry_count * sizeof(IndexEntry) + 8) {
    return reject("size");
  }
  std::vector<IndexEntry> entries(h.entry_count);
  std::memcpy(entries.data(), bytes.data() + sizeof(IndexHeader),
              entries.size() * sizeof(IndexEntry));
  std::vector<bool> used(slot_count_, false);
  Index seen;
  for (const IndexEntry& ie : entries) {
    BlockKey key{ie.volume, ie.file_id, ie.version, ie.index};
    if (ie.slot >= slot_count_ || used[ie.slot] || ie.length == 0 ||
        ie.length > config_.block_size || !seen.emplace(key, Entry{}).second ||
        ie.seq >= h.next_seq) {
      return reject("inconsistent entry");
    }
    used[ie.slot] = true;
  }
  std::lock_guard lock(mu_);
  for (const IndexEntry& ie : entries) {
    BlockKey key{ie.volume, ie.file_id, ie.version, ie.index};
    Entry e{ie.slot, ie.seq, ++tick_, ie.length, ie.origin, ie.read != 0, 0};
    // Entries are coldest first: inserting in order rebuilds the recency order. Predictions
    // do not survive a restart; a read prefetch counts as demand for admission.
    Publish(key, e, AdmissionHint{e.read ? kDemand : e.origin, kUnknownUse});
  }
  for (uint64_t s = slot_count_; s > 0; --s) {
    if (!used[s - 1]) free_.push_back(s - 1);
  }
  next_seq_ = h.next_seq;
  return true;
}

void DefaultBlockCache::Scan() {
  // Several threads read headers (strided slots) so the ring pool keeps the disk busy: a
  // header read is latency-bound, and a 1 TiB cache has a million of them.
  struct Found {
    uint64_t slot;
    BlockHeader header;
  };
  const unsigned threads = static_cast<unsigned>(std::min<uint64_t>(8, 1 + slot_count_ / 64));
  std::vector<std::vector<Found>> found(threads);
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      AlignedBuffer buf = TakeBuffer();
      if (!buf) return;
      for (uint64_t slot = t; slot < slot_count_; slot += threads) {
        iovec seg{buf.get(), kHeaderBytes};
        Status io = store_->Read(slot, 0, {&seg, 1});
        if (!io) {
          std::lock_guard lock(mu_);
          RecordIoLocked(io, "scan header");
          if (stats_.degraded) break;
          continue;
        }
        auto h = DecodeHeader(buf.get(), config_.block_size);
        if (h) {
          found[t].push_back({slot, *h});
        } else if (std::any_of(buf.get(), buf.get() + 8, [](char c) { return c != 0; })) {
          ++bad;  // torn or foreign; a never-written slot reads as zeros
        }
      }
      GiveBuffer(std::move(buf));
    });
  }
  for (auto& w : workers) w.join();

  std::unique_lock lock(mu_);
  Index best;
  uint64_t max_seq = 0;
  for (const auto& list : found) {
    for (const Found& f : list) {
      max_seq = std::max(max_seq, f.header.seq);
      Entry e{f.slot, f.header.seq, 0, f.header.length, f.header.origin, false, 0};
      auto [it, inserted] = best.emplace(f.header.key, e);
      if (!inserted && it->second.seq < e.seq) it->second = e;  // newest generation wins
    }
  }
  // Oldest writes are the coldest blocks.
  std::vector<std::pair<BlockKey, Entry>> order(best.begin(), best.end());
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
  std::vector<bool> used(slot_count_, false);
  for (auto& [key, e] : order) {
    e.last_use = ++tick_;
    used[e.slot] = true;
    Publish(key, e, AdmissionHint{e.origin, kUnknownUse});
  }
  // Older generations still carry a valid header: clear them, or a crash after the newest is
  // evicted would bring them back.
  uint64_t stale = 0;
  for (const auto& list : found) {
    for (const Found& f : list) {
      if (used[f.slot]) continue;
      used[f.slot] = true;
      slots_[f.slot].extent = slot_size_;
      FreeSlotLocked(f.slot);
      ++stale;
    }
  }
  for (uint64_t s = slot_count_; s > 0; --s) {
    if (!used[s - 1]) free_.push_back(s - 1);
  }
  next_seq_ = max_seq + 1;
  lock.unlock();
  log::Info("cache scan done",
            {{"blocks", order.size()}, {"invalid_headers", bad.load()}, {"stale_copies", stale}});
  PunchUnaccounted();
}

void DefaultBlockCache::PunchUnaccounted() {
  // Free slots are assumed empty and blocks to end at their data. What a crash between a
  // write and its punch left, or an older version's preallocated files, breaks that: when the
  // files hold clearly more than that (a few interrupted operations and the filesystem's
  // extent maps are tolerated), punch every slot beyond its block. A punch per slot costs ~3x
  // a header read, so an ordinary crash does not pay for it.
  std::vector<uint32_t> keep(slot_count_);
  uint64_t expected = 0;
  {
    std::lock_guard lock(mu_);
    if (!punch_) return;
    for (uint64_t s = 0; s < slot_count_; ++s) {
      keep[s] = slots_[s].extent;
      expected += keep[s];
    }
  }
  const std::optional<uint64_t> allocated = store_->allocated_bytes();
  const uint64_t tolerated = 16ull * slot_size_ + disk_quota_ / 1024;
  if (allocated && *allocated <= expected + tolerated) return;
  log::Info("cache files hold more than their blocks; punching every slot",
            {{"dir", config_.dir},
             {"allocated_bytes", allocated.value_or(0)},
             {"expected_bytes", expected}});
  const unsigned threads = static_cast<unsigned>(std::min<uint64_t>(8, 1 + slot_count_ / 64));
  std::atomic<bool> refused{false};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t slot = t; slot < slot_count_ && !refused; slot += threads) {
        if (keep[slot] >= slot_size_) continue;
        Status p = store_->Punch(slot, keep[slot], slot_size_ - keep[slot]);
        if (!p && p.error().ToErrno() == EOPNOTSUPP) {
          refused = true;
        } else if (!p) {
          std::lock_guard lock(mu_);
          RecordIoLocked(p, "punch unaccounted space");
          if (stats_.degraded) break;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  std::lock_guard lock(mu_);
  if (refused) StopPunchingLocked();
}

Result<size_t> DefaultBlockCache::Get(const BlockKey& key, char* out, size_t capacity) {
  Entry e;
  {
    std::lock_guard lock(mu_);
    auto it = closed_ || stats_.degraded ? index_.end() : index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return Fail(Code::kNotFound, "block not cached");
    }
    if (capacity < it->second.length) {
      return Fail(Code::kInvalidArgument, "Get: buffer smaller than the block");
    }
    e = it->second;
    ++slots_[e.slot].pins;
    ++inflight_;
  }

  const size_t padded = AlignUp(e.length, kIoAlign);
  AlignedBuffer buf = TakeBuffer();
  // Zero copy when the caller's buffer takes O_DIRECT: header into ours, data into theirs.
  const bool direct = reinterpret_cast<uintptr_t>(out) % kIoAlign == 0 && capacity >= padded;
  iovec segs[2];
  size_t nsegs;
  if (direct) {
    segs[0] = {buf.get(), kHeaderBytes};
    segs[1] = {out, padded};
    nsegs = 2;
  } else {
    segs[0] = {buf.get(), kHeaderBytes + padded};
    nsegs = 1;
  }
  Status io = buf ? store_->Read(e.slot, 0, {segs, nsegs})
                  : Status(Fail(Code::kIo, "out of memory for a bounce buffer"));
  const char* data = nullptr;
  std::string bad;
  if (io) {
    data = direct ? out : buf.get() + kHeaderBytes;
    auto h = DecodeHeader(buf.get(), config_.block_size);
    if (!h) {
      bad = h.error().message();
    } else if (h->key != key) {
      bad = "block header: key mismatch";
    } else if (h->seq != e.seq || h->length != e.length) {
      bad = "block header: generation or length mismatch";
    } else if (DataChecksum(data, e.length) != h->data_checksum) {
      bad = "block data: checksum mismatch";
    }
  }
  if (io && bad.empty() && !direct) std::memcpy(out, data, e.length);
  GiveBuffer(std::move(buf));

  std::vector<Event> events;
  Result<size_t> result = e.length;
  bool clear = false;
  {
    std::lock_guard lock(mu_);
    SlotState& st = slots_[e.slot];
    --st.pins;
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
    if (st.pins == 0 && st.free_when_unpinned) {
      st.free_when_unpinned = false;
      FreeSlotLocked(e.slot);
    }
    clear = !to_clear_.empty();
    --inflight_;
  }
  cv_.notify_all();
  Fire(events);
  if (clear) ClearReleased();
  return result;
}

Status DefaultBlockCache::Put(const BlockKey& key, const char* data, size_t length,
                              const AdmissionHint& hint) {
  if (data == nullptr || length == 0 || length > config_.block_size) {
    return Fail(Code::kInvalidArgument, "Put: length must be in 1..block_size");
  }
  std::vector<Event> events;
  std::optional<uint64_t> slot;
  uint64_t seq = 0;
  uint32_t charge = 0;
  uint32_t old_extent = 0;
  bool clear_victims = false;
  {
    std::unique_lock lock(mu_);
    if (closed_) return Fail(Code::kUnavailable, "cache closed");
    if (stats_.degraded) return Fail(Code::kIo, "cache degraded: disk failed");
    if (index_.contains(key) || writing_.contains(key)) return Ok();
    charge = ChargeLocked(static_cast<uint32_t>(length));
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    }
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
        if (slot) ReleaseSlotLocked(*slot);
        const bool clear = !to_clear_.empty();
        Status refused =
            strays >= 8 ? Fail(Code::kInternal, "eviction policy out of sync")
                        : Fail(Code::kNoSpace, "cache full: admission refused by eviction policy");
        if (strays < 8) {
          ++stats_.rejected_admissions;
          // A refused prefetch is wasted work for its expert: tell the scorer now rather
          // than letting the verdict wait for expiry.
          if (hint.origin != kDemand) events.push_back(Event{false, key, hint.origin});
        }
        lock.unlock();
        Fire(events);
        if (clear) ClearReleased();
        return refused;
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
    writing_[key] = Writing{*slot, charge, false};
    SetDiskBytesLocked(stats_.disk_bytes + charge);  // reserved: concurrent Puts see it
    seq = next_seq_++;
    ++inflight_;
    // A reader still on the victim's old contents finishes first.
    cv_.wait(lock, [&] { return slots_[*slot].pins == 0; });
    old_extent = slots_[*slot].extent;
    clear_victims = !to_clear_.empty();
  }
  Fire(events);
  events.clear();
  // Space of the other victims back first, so the disk stays within the quota.
  if (clear_victims) ClearReleased();

  BlockHeader h;
  h.block_size = config_.block_size;
  h.key = key;
  h.seq = seq;
  h.length = static_cast<uint32_t>(length);
  h.origin = hint.origin;
  h.data_checksum = DataChecksum(data, length);
  const size_t padded = AlignUp(length, kIoAlign);
  const auto extent = static_cast<uint32_t>(kHeaderBytes + padded);
  AlignedBuffer buf = TakeBuffer();
  Status io = Ok();
  if (!buf) {
    io = Fail(Code::kIo, "out of memory for a bounce buffer");
  } else {
    EncodeHeader(h, buf.get());
    iovec segs[2];
    size_t nsegs;
    if (reinterpret_cast<uintptr_t>(data) % kIoAlign == 0 && length == padded) {
      segs[0] = {buf.get(), kHeaderBytes};
      segs[1] = {const_cast<char*>(data), length};
      nsegs = 2;
    } else {
      std::memcpy(buf.get() + kHeaderBytes, data, length);
      std::memset(buf.get() + kHeaderBytes + length, 0, padded - length);
      segs[0] = {buf.get(), kHeaderBytes + padded};
      nsegs = 1;
    }
    io = store_->Write(*slot, 0, {segs, nsegs});
  }
  GiveBuffer(std::move(buf));
  // A longer block held this slot before: give its tail back (never with whole-slot charges:
  // no holes, or a full block).
  Status tail = Ok();
  if (io && charge < slot_size_ && old_extent > extent) {
    tail = store_->Punch(*slot, extent, old_extent - extent);
  }

  Status result = Ok();
  bool clear = false;
  {
    std::lock_guard lock(mu_);
    auto w = writing_.find(key);
    const bool cancelled = w->second.cancelled;
    SetDiskBytesLocked(stats_.disk_bytes - w->second.charge);
    writing_.erase(w);
    // A failed write may have allocated anything; a failed punch kept the old tail.
    slots_[*slot].extent = !io ? slot_size_ : tail ? extent : std::max(extent, old_extent);
    if (!tail && tail.error().ToErrno() == EOPNOTSUPP) {
      StopPunchingLocked();
    } else if (!tail) {
      RecordIoLocked(tail, "punch block tail");
    }
    if (!io) {
      RecordIoLocked(io, "write block");
      FreeSlotLocked(*slot);
      result = Fail(Code::kIo, "cache write failed: " + io.error().message());
    } else if (cancelled || closed_) {
      if (tail) consecutive_errors_ = 0;
      FreeSlotLocked(*slot);
    } else {
      if (tail) consecutive_errors_ = 0;
      Publish(key, Entry{*slot, seq, ++tick_, static_cast<uint32_t>(length), hint.origin, false, 0},
              hint);
    }
    clear = !to_clear_.empty();
    --inflight_;
  }
  cv_.notify_all();
  if (clear) ClearReleased();
  return result;
}

bool DefaultBlockCache::Contains(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  return !stats_.degraded && index_.contains(key);
}

uint64_t DefaultBlockCache::Evict(uint64_t volume, uint64_t file_id) {
  std::vector<Event> events;
  std::vector<uint64_t> slots;
  {
    std::unique_lock lock(mu_);
    for (auto& [key, w] : writing_) {
      if (Matches(key, volume, file_id)) w.cancelled = true;
    }
    for (auto it = index_.begin(); it != index_.end();) {
      auto next = std::next(it);
      if (Matches(it->first, volume, file_id)) {
        // The slot stays out of the free list until its header is invalidated below.
        slots.push_back(it->second.slot);
        DropLocked(it, events, /*release_slot=*/false);
      }
      it = next;
    }
    if (slots.empty() || closed_) {
      for (uint64_t s : slots) free_.push_back(s);
      lock.unlock();
      Fire(events);
      return slots.size();
    }
    ++inflight_;
    cv_.wait(lock, [&] {
      return std::all_of(slots.begin(), slots.end(),
                         [&](uint64_t s) { return slots_[s].pins == 0; });
    });
  }
  Fire(events);
  // Punch the slots (or overwrite their headers) so a crash before the next Close does not
  // resurrect the blocks, and the space goes back at once.
  ClearSlots(slots);
  {
    std::lock_guard lock(mu_);
    --inflight_;
  }
  cv_.notify_all();
  log::Info("cache evicted", {{"volume", volume}, {"file_id", file_id}, {"blocks", slots.size()}});
  return slots.size();
}

uint64_t DefaultBlockCache::VolumeBytes(uint64_t volume) const {
  std::lock_guard lock(mu_);
  auto it = volume_bytes_.find(volume);
  return it == volume_bytes_.end() ? 0 : it->second;
}

BlockCacheStats DefaultBlockCache::Stats() const {
  std::lock_guard lock(mu_);
  BlockCacheStats s = stats_;
  s.blocks = index_.size();
  return s;
}

void DefaultBlockCache::SetListener(CacheListener* listener) {
  std::lock_guard lock(mu_);
  listener_ = listener;
}

Status DefaultBlockCache::Close() {
  std::unique_lock lock(mu_);
  if (closed_) return Ok();
  closed_ = true;
  cv_.wait(lock, [&] { return inflight_ == 0; });
  if (!to_clear_.empty()) {
    // Freed slots get their space back before the index records them as free.
    std::vector<uint64_t> clear;
    clear.swap(to_clear_);
    lock.unlock();
    ClearSlots(clear);
    lock.lock();
  }
  if (stats_.degraded) {
    close(lock_fd_);
    lock_fd_ = -1;
    log::Warn("cache degraded at shutdown; index not saved (next start rescans)",
              {{"dir", config_.dir}});
    return Fail(Code::kIo, "cache degraded: index not saved");
  }
  lock.unlock();
  // The directory's lock goes with the index: after Close another cache may open it.
  struct ReleaseLock {
    int& fd;
    ~ReleaseLock() {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  } release{lock_fd_};
  Status s = store_->Sync();
  if (s) s = WriteIndex();
  if (s) s = WriteFileDurably(Path(config_.dir, kCleanFile), "clean\n");
  if (s) s = FsyncDir(config_.dir);
  if (!s) {
    log::Warn("cache index not saved; next start rescans",
              {{"dir", config_.dir}, {"error", s.error().message()}});
    return std::unexpected(s.error().Wrap("cache close"));
  }
  log::Info("cache closed cleanly", {{"dir", config_.dir}, {"blocks", Stats().blocks}});
  return Ok();
}

Status DefaultBlockCache::WriteIndex() {
  std::string bytes;
  {
    std::lock_guard lock(mu_);
    std::vector<std::pair<const BlockKey*, const Entry*>> order;
    order.reserve(index_.size());
    for (const auto& [k, e] : index_) order.emplace_back(&k, &e);
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.second->last_use < b.second->last_use; });
    IndexHeader h{kIndexMagic, kIndexVersion, config_.block_size,          slot_count_,
                  next_seq_,   order.size(),  punch_ ? kIndexPunched : 0u, 0};
    bytes.reserve(sizeof(h) + order.size() * sizeof(IndexEntry) + 8);
    bytes.append(reinterpret_cast<const char*>(&h), sizeof(h));
    for (const auto& [k, e] : order) {
      IndexEntry ie{k->volume, k->file_id, k->version,
                    k->index,  e->slot,    e->seq,
                    e->length, e->origin,  static_cast<uint8_t>(e->read ? 1 : 0),
                    {0, 0}};
      bytes.append(reinterpret_cast<const char*>(&ie), sizeof(ie));
    }
  }
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  const std::string tmp = Path(config_.dir, kIndexTmpFile);
  const std::string path = Path(config_.dir, kIndexFile);
  if (Status s = WriteFileDurably(tmp, bytes); !s) return s;
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return std::unexpected(Error::FromErrno(errno, "rename " + tmp));
  }
  return Ok();
}

void DefaultBlockCache::DropLocked(Index::iterator it, std::vector<Event>& events,
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
  index_.erase(it);
  if (release_slot) ReleaseSlotLocked(e.slot);
}

void DefaultBlockCache::ReleaseSlotLocked(uint64_t slot) {
  if (slots_[slot].pins > 0) {
    slots_[slot].free_when_unpinned = true;
  } else {
    FreeSlotLocked(slot);
  }
}

void DefaultBlockCache::FreeSlotLocked(uint64_t slot) {
  // Without holes there is no space to give back: the slot is simply reused (Evict() still
  // invalidates its headers itself).
  if (punch_ && slots_[slot].extent > 0) {
    to_clear_.push_back(slot);
  } else {
    free_.push_back(slot);
  }
}

void DefaultBlockCache::ClearReleased() {
  std::vector<uint64_t> slots;
  {
    std::lock_guard lock(mu_);
    // After Close started, Close clears what is left.
    if (to_clear_.empty() || closed_) return;
    slots.swap(to_clear_);
    ++inflight_;
  }
  ClearSlots(slots);
  {
    std::lock_guard lock(mu_);
    --inflight_;
  }
  cv_.notify_all();
}

void DefaultBlockCache::ClearSlots(const std::vector<uint64_t>& slots) {
  if (slots.empty()) return;
  bool punch, degraded;
  {
    std::lock_guard lock(mu_);
    punch = punch_;
    degraded = stats_.degraded;
  }
  bool refused = false;
  AlignedBuffer zero;
  std::vector<Status> results;
  std::vector<bool> punched;
  for (uint64_t s : slots) {
    Status r = Ok();
    bool p = false;
    if (!degraded && punch) {
      r = store_->Punch(s, 0, slot_size_);
      p = r.has_value();
      if (!r && r.error().ToErrno() == EOPNOTSUPP) {
        refused = true;
        punch = false;
      }
    }
    if (!degraded && !punch) {
      // No holes: overwrite the header, so the block cannot come back after a crash.
      if (!zero) zero = AllocateAligned(kHeaderBytes);
      iovec seg{zero.get(), kHeaderBytes};
      r = zero ? store_->Write(s, 0, {&seg, 1}) : Status(Ok());
    }
    results.push_back(std::move(r));
    punched.push_back(p);
  }
  std::lock_guard lock(mu_);
  if (refused) StopPunchingLocked();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!results[i]) RecordIoLocked(results[i], "clear freed slot");
    if (punched[i]) slots_[slots[i]].extent = 0;
    free_.push_back(slots[i]);
  }
}

void DefaultBlockCache::RecordIoLocked(const Status& s, std::string_view what) {
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

void DefaultBlockCache::Fire(const std::vector<Event>& events) {
  if (events.empty()) return;
  CacheListener* listener;
  {
    std::lock_guard lock(mu_);
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

AlignedBuffer DefaultBlockCache::TakeBuffer() {
  {
    std::lock_guard lock(buffers_mu_);
    if (!buffers_.empty()) {
      AlignedBuffer b = std::move(buffers_.back());
      buffers_.pop_back();
      return b;
    }
  }
  return AllocateAligned(kHeaderBytes + config_.block_size);
}

void DefaultBlockCache::GiveBuffer(AlignedBuffer buf) {
  if (!buf) return;
  std::lock_guard lock(buffers_mu_);
  if (buffers_.size() < options_.spare_buffers) buffers_.push_back(std::move(buf));
}

Result<std::unique_ptr<BlockCache>> OpenBlockCache(const BlockCache::Config& config,
                                                   std::unique_ptr<EvictionPolicy> policy,
                                                   metrics::Registry* metrics) {
  if (Status v = config.Validate(); !v) return std::unexpected(v.error());
  std::error_code ec;
  std::filesystem::create_directories(config.dir, ec);
  if (ec) {
    return Fail(Code::kInvalidArgument,
                "cache dir: cannot create " + config.dir + ": " + ec.message());
  }
  if (access(config.dir.c_str(), W_OK | X_OK) != 0) {
    return Fail(Code::kInvalidArgument, "cache dir: " + config.dir + " is not writable");
  }
  UringBlockStore::Options store_options;
  // io_depth bounds device requests in flight: rings x chunks per transfer.
  store_options.rings = std::max(1u, config.io_depth / 8);
  store_options.ring_entries = 16;
  auto cache = DefaultBlockCache::Open(config, DefaultBlockCache::UringStore(store_options),
                                       std::move(policy), metrics);
  if (!cache) return std::unexpected(cache.error());
  return std::unique_ptr<BlockCache>(std::move(*cache));
}

}  // namespace spoke::agent
