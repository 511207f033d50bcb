#include "cache-agent/fs/volume_fs.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace spoke::agent {
namespace {

Status ValidName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return Fail(Code::kInvalidArgument, "bad name '" + name + "'");
  if (name.size() > 255) return std::unexpected(Error::FromErrno(ENAMETOOLONG, "name too long"));
  return Ok();
}

// Open files unlinked through this mount live on under this prefix until closed.
constexpr std::string_view kHiddenPrefix = ".spoke-unlinked-";

}  // namespace

VolumeFs::VolumeFs(const Config& config, RemoteFs& remote, MetadataCache& metadata,
                   BlockFetcher& fetcher, PrefetchDriver* prefetch, Clock& clock)
    : config_(config),
      remote_(remote),
      metadata_(metadata),
      fetcher_(fetcher),
      prefetch_(prefetch),
      clock_(clock),
      // Handle ids start at the wall clock (microseconds) so that a new agent never issues an
      // id an earlier one gave the kernel (see EnsureHandle).
      next_handle_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count())) {
  if (config_.write_back && !config_.read_only) {
    WriteBack::Config wc = config_.write_back_config;
    wc.on_released = [this](uint64_t ino) { metadata_.Invalidate(ino); };
    write_back_ = std::make_unique<WriteBack>(remote_, wc);
  }
}

std::shared_ptr<VolumeFs::Handle> VolumeFs::Get(uint64_t handle) const {
  MutexLock lock(mu_);
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : it->second;
}

size_t VolumeFs::open_handles() const {
  MutexLock lock(mu_);
  return handles_.size();
}

namespace {
// A handle id: [counter: 40 bits][version tag: 22 bits][writable][hint file]. The counter
// is the low bits of one that starts at the wall clock in microseconds, so a new agent does
// not issue an id an earlier one gave the kernel (it would take an id the kernel still holds
// for 12.7 days for one of its own). The tag is a hash of the content version the handle
// was opened on: an agent reopening an earlier agent's handle learns which version the
// kernel's pages of it are (see EnsureHandle).
constexpr uint64_t kHandleWritable = 1;
constexpr uint64_t kHandleHints = 2;
constexpr int kHandleFlagBits = 2;
constexpr int kHandleTagBits = 22;
constexpr uint64_t kHandleTagMask = (1ull << kHandleTagBits) - 1;
constexpr int kHandleCounterShift = kHandleFlagBits + kHandleTagBits;

uint64_t VersionTag(uint64_t version) {
  version *= 0x9e3779b97f4a7c15ull;  // every bit of the version moves the top ones
  return version >> (64 - kHandleTagBits);
}
}  // namespace

uint64_t VolumeFs::NewHandle(std::shared_ptr<Handle> h) {
  const uint64_t ino = h->hints ? 0 : h->ino;
  const uint64_t tag = h->hints ? 0 : VersionTag(h->file.version);
  uint64_t id = 0;
  {
    MutexLock lock(mu_);
    do {
      id = (next_handle_++ << kHandleCounterShift) | (tag << kHandleFlagBits) |
           (h->writable ? kHandleWritable : 0) | (h->hints ? kHandleHints : 0);
    } while (handles_.contains(id));  // an adopted handle of an earlier agent
    handles_[id] = std::move(h);
  }
  if (ino != 0) metadata_.Pin(ino);  // the kernel may FORGET it before this handle's RELEASE
  return id;
}

void VolumeFs::RecordOpener(uint64_t id, Handle& h) {
  if (config_.open_records == nullptr || h.hints) return;
  // A reader the hub sees as the agent itself reads the same without a record.
  if (!h.writable && remote_.ActsAsSelf(h.who)) return;
  const OpenRecords::Record record{h.who, h.append};
  if (auto st = h.writable ? config_.open_records->Put(id, record)
                           : config_.open_records->PutShared(id, record);
      !st) {
    log::Warn(h.writable
                  ? "cannot keep a writer's identity for a restart: after one its writes fail"
                  : "cannot keep a reader's identity for a restart: after one its reads "
                    "go to the hub as the volume's identity",
              {{"volume", config_.volume_id}, {"error", st.error().ToString()}});
    return;
  }
  h.recorded = true;
}

Status VolumeFs::CheckOpenerKnown(const Handle& h) {
  if (!h.opener_unknown) return Ok();
  return std::unexpected(Error::FromErrno(
      EACCES, "file " + h.file.path +
                  " was opened for writing before an agent restart by a caller this agent "
                  "has no record of: open it again"));
}

Status VolumeFs::EnsureHandle(uint64_t handle, uint64_t ino) {
  if (auto known = Get(handle); known != nullptr) {
    // Ours, or an earlier agent's id that this agent also issued (a wrap of the counter):
    // never another file's bytes under it.
    if (known->hints || known->ino == ino) return Ok();
    return std::unexpected(Error::FromErrno(
        ESTALE, "file handle " + std::to_string(handle) + " of inode " + std::to_string(ino) +
                    " is in use for another file: open the file again"));
  }
  std::shared_ptr<Handle> h;
  if (handle & kHandleHints) {
    h = std::make_shared<Handle>();
    h->ino = kHintIno;
    h->file.path = std::string(kHintFileName);
    h->writable = true;
    h->hints = true;
  } else {
    const bool writable = (handle & kHandleWritable) != 0;
    // The new handle acts as the old one did: for the caller that opened it (its reads too),
    // and O_APPEND writes land at the hub's end of file. A reader without a record is one
    // the hub sees as the agent itself.
    auto opener =
        config_.open_records != nullptr ? config_.open_records->Find(handle) : std::nullopt;
    SPOKE_TRY_WRAP(h, MakeHandle(ino, writable, opener ? &opener->who : nullptr),
                   "reopening a handle of an earlier agent");
    if (opener) {
      h->who = opener->who;
      h->recorded = true;
    }
    if (h->writable) {
      if (opener) {
        h->append = opener->append;
        if (config_.open_records->Held(handle)) {
          h->marked = true;
          h->lost_writes = true;
          log::Warn(
              "a file open for writing across the agent restart had writes not known to be "
              "on the hub: its next write, fsync or close fails with EIO",
              {{"volume", config_.volume_id}, {"path", h->file.path}});
        }
      } else if (config_.open_records != nullptr) {
        h->opener_unknown = true;
        log::Warn(
            "a file open for writing across the agent restart has no opener record: "
            "its writes fail",
            {{"volume", config_.volume_id}, {"path", h->file.path}});
      }
    }
    // The kernel holds pages this handle read under the version it was opened on. If the
    // hub file changed since, its reads fail as the agent that opened it would have failed
    // them (BlockFetcher: ESTALE), instead of putting the new version's bytes beside the old
    // ones. Writable handles changed the version themselves; strict volumes cache no pages.
    const uint64_t tag = (handle >> kHandleFlagBits) & kHandleTagMask;
    if (!h->writable && config_.consistency != Consistency::kStrict &&
        VersionTag(h->file.version) != tag) {
      h->changed_before_reopen = true;
      log::Warn("a file open across the agent restart changed on the hub: its reads fail",
                {{"volume", config_.volume_id}, {"path", h->file.path}});
    }
  }
  const uint64_t pinned = h->hints ? 0 : h->ino;
  bool added;
  {
    MutexLock lock(mu_);
    added = handles_.try_emplace(handle, std::move(h)).second;
  }
  if (added && pinned != 0) metadata_.Pin(pinned);
  return Ok();
}

Status VolumeFs::CheckWritable() const {
  if (config_.read_only) {
    return Fail(Code::kReadOnly, "volume " + config_.volume_id + " is read-only");
  }
  return Ok();
}

Result<std::string> VolumeFs::ChildPath(uint64_t parent, const std::string& name) const {
  SPOKE_RETURN_IF_ERROR(ValidName(name));
  SPOKE_TRY(auto p, metadata_.PathOf(parent));
  return p.empty() ? name : p + "/" + name;
}

void VolumeFs::DropBlocks(uint64_t file_id) { fetcher_.Evict(file_id); }

Status VolumeFs::WaitForWrites(uint64_t ino) {
  if (write_back_ == nullptr || !write_back_->Holds(ino)) return Ok();
  return write_back_->WaitIdle(ino);
}

Status VolumeFs::SettleWrites(uint64_t id, Handle& h) {
  if (h.lost_writes.exchange(false)) {
    if (h.marked.exchange(false) && config_.open_records != nullptr) {
      config_.open_records->MarkSettled(id);
    }
    return std::unexpected(Error::FromErrno(
        EIO, "writes to " + h.file.path +
                 " answered before the agent restarted may not have reached the hub"));
  }
  if (write_back_ == nullptr) return Ok();
  auto st = write_back_->Drain(h.ino);
  // The mark goes once nothing of the file is held: what the writer was answered is on the
  // hub, or the writer has just been told it is not.
  if (!write_back_->Holds(h.ino) && h.marked.exchange(false) && config_.open_records != nullptr) {
    config_.open_records->MarkSettled(id);
  }
  return st;
}

void VolumeFs::MarkChanged(uint64_t ino, std::optional<uint64_t> size) {
  metadata_.Invalidate(ino);
  MutexLock lock(mu_);
  for (auto& [id, h] : handles_) {
    if (h->ino != ino) continue;
    h->file.version = kDirtyVersionBit | dirty_versions_.fetch_add(1);
    h->file.written_here = true;
    if (size) h->file.size = *size;
    MutexLock hl(h->mu);
    h->last_block.reset();
    h->last_index = UINT64_MAX;
  }
}

bool VolumeFs::IsHiddenName(const std::string& name) { return name.starts_with(kHiddenPrefix); }

bool VolumeFs::HasHandles(uint64_t ino) const {
  MutexLock lock(mu_);
  for (const auto& [id, h] : handles_) {
    if (h->ino == ino) return true;
  }
  return false;
}

Result<std::string> VolumeFs::HideOpenFile(uint64_t parent, const std::string& name, uint64_t ino,
                                           const Credentials& who) {
  SPOKE_TRY(auto from, ChildPath(parent, name));
  uint64_t unique;
  {
    MutexLock lock(mu_);
    unique = next_handle_++;  // never repeats, also across agents (starts at the wall clock)
  }
  char id[40];
  std::snprintf(id, sizeof(id), "%llx", static_cast<unsigned long long>(unique));
  std::string hidden_name = std::string(kHiddenPrefix) + id;
  SPOKE_TRY(auto to, ChildPath(parent, hidden_name));
  SPOKE_RETURN_IF_ERROR(remote_.RenameAs(who, from, to));
  metadata_.Hidden(parent, name, hidden_name);
  {
    MutexLock lock(mu_);
    uint64_t file_id = 0;
    for (auto& [hid, h] : handles_) {
      if (h->ino != ino) continue;
      h->file.path = to;
      file_id = h->file.file_id;
    }
    unlinked_[ino] = Unlinked{to, who, file_id};
  }
  // Its last holder may have closed it while we renamed.
  if (!HasHandles(ino)) RemoveIfUnlinked(ino);
  return hidden_name;
}

void VolumeFs::RestoreAside(uint64_t parent, const std::string& hidden_name,
                            const std::string& name, const InodeAttr& file,
                            const Credentials& who) {
  auto hidden = ChildPath(parent, hidden_name);
  auto path = ChildPath(parent, name);
  if (!hidden || !path) return;
  if (auto st = remote_.RenameAs(who, *hidden, *path); !st) {
    log::Warn("a file moved aside for a rename that failed could not get its name back",
              {{"path", *path}, {"hidden", *hidden}, {"error", st.error().ToString()}});
    return;
  }
  {
    MutexLock lock(mu_);
    unlinked_.erase(file.ino);
    for (auto& [id, h] : handles_) {
      if (h->ino == file.ino) h->file.path = *path;
    }
  }
  metadata_.Added(parent, name, file.attr);
  metadata_.Invalidate(file.ino);
}

void VolumeFs::RemoveIfUnlinked(uint64_t ino) {
  Unlinked gone;
  {
    MutexLock lock(mu_);
    auto it = unlinked_.find(ino);
    if (it == unlinked_.end()) return;
    for (const auto& [id, h] : handles_) {
      if (h->ino == ino) return;  // still held
    }
    gone = std::move(it->second);
    unlinked_.erase(it);
  }
  auto st = remote_.UnlinkAs(gone.who, gone.path);
  if (!st && st.error().code() != Code::kNotFound) {
    log::Warn("removing an unlinked file after its last close failed",
              {{"path", gone.path}, {"error", st.error().ToString()}});
  }
  if (gone.file_id != 0) DropBlocks(gone.file_id);
  metadata_.Invalidate(ino);
}

bool VolumeFs::IsHintName(uint64_t parent, const std::string& name) {
  return parent == kRootIno && name == kHintFileName;
}

FileAttr VolumeFs::HintAttr() const {
  FileAttr a;
  a.file_id = kHintIno;
  a.mode = S_IFREG | 0666;  // any pod user may disclose its order
  a.nlink = 1;
  return a;
}

VolumeFs::OpenFile VolumeFs::OpenHints() {
  auto h = std::make_shared<Handle>();
  h->ino = kHintIno;
  h->file.path = std::string(kHintFileName);
  h->writable = true;
  h->hints = true;
  OpenFile out;
  out.handle = NewHandle(std::move(h));
  out.direct_io = true;  // every write reaches us at once; nothing to keep in the page cache
  return out;
}

Result<InodeAttr> VolumeFs::Lookup(uint64_t parent, const std::string& name, const Caller& who) {
  SPOKE_RETURN_IF_ERROR(ValidName(name));
  if (IsHintName(parent, name)) return InodeAttr{kHintIno, HintAttr()};
  if (IsHiddenName(name)) return Fail(Code::kNotFound, "no entry " + name);
  // An answer the hub gave while a held write was landing is not taken: the write's release
  // invalidates the inode (WriteBack::Config::on_released), and the metadata cache asks again.
  auto r = metadata_.Lookup(parent, name, /*hold=*/true, who);
  if (!r || write_back_ == nullptr || !write_back_->Holds(r->ino)) return r;
  // The hub's size lacks the held writes: the kernel would take it for the file's end.
  SPOKE_RETURN_IF_ERROR(write_back_->WaitIdle(r->ino));
  metadata_.Forget(r->ino, 1);
  metadata_.Invalidate(r->ino);
  return metadata_.Lookup(parent, name, /*hold=*/true, who);
}

bool VolumeFs::AddKernelRef(uint64_t ino) { return ino == kHintIno || metadata_.AddKernelRef(ino); }

void VolumeFs::Forget(uint64_t ino, uint64_t count) {
  if (ino != kHintIno) metadata_.Forget(ino, count);
}

Result<FileAttr> VolumeFs::GetAttr(uint64_t ino, const Caller& who) {
  if (ino == kHintIno) return HintAttr();
  SPOKE_RETURN_IF_ERROR(WaitForWrites(ino));  // the size and times of what was written
  auto attr = metadata_.GetAttr(ino, who);
  if (attr) {
    // The hidden name of an unlinked open file is not one of its links.
    MutexLock lock(mu_);
    if (unlinked_.contains(ino) && attr->nlink > 0) attr->nlink--;
  }
  return attr;
}

Result<Listing> VolumeFs::ReadDir(uint64_t ino, const Caller& who) {
  auto r = metadata_.ReadDir(ino, who);
  if (!r) return r;
  // Hidden names of unlinked open files, and the control file, which is ours: never listed
  // (a hub file of that name is shadowed).
  const auto left_out = [ino](const NamedInode& e) {
    return IsHiddenName(e.name) || (ino == kRootIno && e.name == kHintFileName);
  };
  if (std::none_of(r->begin(), r->end(), left_out)) return r;  // shared as it is
  auto kept = std::make_shared<std::vector<NamedInode>>();
  for (const NamedInode& e : *r) {
    if (!left_out(e)) kept->push_back(e);
  }
  return Listing(std::move(kept));
}

Result<std::shared_ptr<VolumeFs::Handle>> VolumeFs::MakeHandle(uint64_t ino, bool write,
                                                               const Credentials* who) {
  // Close-to-open: a strict volume asks the hub on every open.
  SPOKE_TRY(auto attr, config_.consistency == Consistency::kStrict ? metadata_.Revalidate(ino, who)
                                                                   : metadata_.GetAttr(ino, who));
  if (attr.is_dir()) return Fail(Code::kInvalidArgument, "is a directory");
  SPOKE_TRY(auto path, metadata_.PathOf(ino));
  auto h = std::make_shared<Handle>();
  h->ino = ino;
  h->file = FileRef{path, attr.file_id, attr.ContentVersion(), attr.size};
  if (who != nullptr) h->file.reader = *who;
  h->writable = write;
  return h;
}

Result<VolumeFs::OpenFile> VolumeFs::Open(uint64_t ino, int flags, const Credentials& who) {
  if (ino == kHintIno) return OpenHints();
  bool write = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  if (write) {
    SPOKE_RETURN_IF_ERROR(CheckWritable());
  }
  SPOKE_TRY(std::shared_ptr<Handle> h, MakeHandle(ino, write, &who));
  // libfuse negotiates FUSE_CAP_ATOMIC_O_TRUNC: the kernel sends no SETATTR for O_TRUNC and
  // relies on open to truncate, so it must happen on the hub before open returns.
  bool truncated = (flags & O_TRUNC) != 0;
  if (truncated) {
    SPOKE_RETURN_IF_ERROR(WaitForWrites(ino));
    SetAttrRequest to_zero;
    to_zero.size = 0;
    SPOKE_TRY_WRAP(auto after, remote_.SetAttrAs(who, h->file.path, to_zero), "truncate on open");
    DropBlocks(after.file_id);
    MarkChanged(ino, 0);
    metadata_.SetAttr(ino, after);
    h->file = FileRef{h->file.path, after.file_id, after.ContentVersion(), after.size};
    h->file.reader = who;
  }
  h->append = (flags & O_APPEND) != 0;
  h->who = who;
  OpenFile out;
  out.handle = NewHandle(h);
  RecordOpener(out.handle, *h);
  // The kernel's pages of the old content must go: keep_cache=false makes it drop them. So
  // must what an earlier agent gave the kernel (pages and attributes of the version that
  // agent knew, which may not be the one this open reads).
  out.kernel_attrs_stale = metadata_.TakeKernelCopyStale(ino);
  out.keep_cache =
      config_.consistency == Consistency::kImmutable && !truncated && !out.kernel_attrs_stale;
  out.direct_io = config_.consistency == Consistency::kStrict;
  out.flush = write && write_back_ != nullptr;
  if (prefetch_ != nullptr) {
    prefetch_->OnOpen(OpenEvent{out.handle, h->file.path, h->file.file_id, h->file.version,
                                h->file.size, clock_.Now()});
  }
  return out;
}

Result<size_t> VolumeFs::Read(uint64_t handle, uint64_t offset, size_t size, char* out) {
  SPOKE_TRY(auto pieces, ReadPieces(handle, offset, size));
  size_t copied = 0;
  for (const ReadPiece& p : pieces) {
    std::memcpy(out + copied, p.block->data() + p.offset, p.length);
    copied += p.length;
  }
  return copied;
}

Result<std::vector<VolumeFs::ReadPiece>> VolumeFs::ReadPieces(uint64_t handle, uint64_t offset,
                                                              size_t size) {
  auto h = Get(handle);
  if (!h) return Fail(Code::kInvalidArgument, "unknown file handle");
  std::vector<ReadPiece> pieces;
  if (h->hints) return pieces;  // write-only in effect: reads see an empty file
  if (h->changed_before_reopen) {
    return std::unexpected(Error::FromErrno(
        ESTALE, "hub file " + h->file.path +
                    " changed while it was open across an agent restart: open it again"));
  }
  // Read-your-writes: the hub has the file's held writes before its blocks are read.
  SPOKE_RETURN_IF_ERROR(WaitForWrites(h->ino));
  FileRef file;
  {
    MutexLock lock(mu_);
    file = h->file;
  }
  if (offset >= file.size || size == 0) return pieces;
  uint64_t end = std::min<uint64_t>(offset + size, file.size);
  uint32_t bs = fetcher_.block_size();
  uint64_t first = offset / bs, last = (end - 1) / bs;
  uint64_t count = last - first + 1;

  std::vector<Result<BlockData>> blocks;
  uint64_t hits = 0;
  {
    // Small reads inside the block the handle read last need no cache lookup.
    MutexLock lock(h->mu);
    if (count == 1 && h->last_index == first && h->last_block) {
      blocks.emplace_back(h->last_block);
      hits = 1;
    }
  }
  // The prefetcher hears of the read before we wait for missed blocks: its prefetches start
  // one round trip earlier. The callback captures one pointer, so std::function keeps it
  // inline (no allocation per read).
  struct Notice {
    VolumeFs* fs;
    uint64_t blocks;
    ReadEvent event;
  } notice{this, count,
           ReadEvent{handle, file.path, file.file_id, file.version, file.size, offset, end - offset,
                     false, SteadyTime{}}};
  auto tell_prefetcher = [&notice](uint64_t cached) {
    notice.event.hit = cached == notice.blocks;
    notice.event.time = notice.fs->clock_.Now();
    notice.fs->prefetch_->OnRead(notice.event);
  };
  if (blocks.empty()) {
    std::function<void(uint64_t)> before_wait;
    if (prefetch_ != nullptr) before_wait = tell_prefetcher;
    blocks = fetcher_.GetBlocks(file, first, count, &hits, before_wait);
  } else if (prefetch_ != nullptr) {
    tell_prefetcher(hits);
  }

  pieces.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!blocks[i]) return std::unexpected(blocks[i].error());
    const auto& data = **blocks[i];
    uint64_t block_start = (first + i) * bs;
    uint64_t from = std::max(offset, block_start);
    uint64_t to = std::min(end, block_start + bs);
    if (from - block_start >= data.size()) break;  // the hub's file is shorter now
    uint64_t avail = std::min<uint64_t>(to - from, data.size() - (from - block_start));
    pieces.push_back(ReadPiece{*blocks[i], from - block_start, avail});
    if (avail < to - from) break;
  }
  {
    MutexLock lock(h->mu);
    if (blocks.back()) {
      h->last_block = *blocks.back();
      h->last_index = last;
    }
  }
  return pieces;
}

Status VolumeFs::Release(uint64_t handle) {
  std::shared_ptr<Handle> h;
  {
    MutexLock lock(mu_);
    auto it = handles_.find(handle);
    if (it != handles_.end()) {
      h = std::move(it->second);
      handles_.erase(it);
    }
  }
  // Writers always have a record; a reader has one when it says so, or may have one when
  // it is an earlier agent's handle closed before any request reopened it here.
  if (config_.open_records != nullptr && !(handle & kHandleHints)) {
    if (handle & kHandleWritable) {
      config_.open_records->Forget(handle);
    } else if (h == nullptr || h->recorded) {
      config_.open_records->ForgetShared(handle);
    }
  }
  if (h == nullptr) return Fail(Code::kInvalidArgument, "unknown file handle");
  if (h->hints) {
    if (prefetch_ != nullptr) prefetch_->FlushHints();
    return Ok();
  }
  if (h->writable && write_back_ != nullptr) {
    // FLUSH reported errors to close(); what comes after it (writes through an mmap, a dup
    // closed later) reaches the hub before the handle goes.
    if (auto st = SettleWrites(handle, *h); !st) {
      log::Warn(
          "write-back failed after the last close",
          {{"volume", config_.volume_id}, {"path", h->file.path}, {"error", st.error().message()}});
    }
  }
  if (prefetch_ != nullptr) prefetch_->OnClose(CloseEvent{handle, clock_.Now()});
  if (h->written) metadata_.Invalidate(h->ino);
  RemoveIfUnlinked(h->ino);
  metadata_.Unpin(h->ino);  // the inode goes if nothing else keeps it
  return Ok();
}

Result<FsStat> VolumeFs::StatFs() {
  MutexLock lock(statfs_mu_);
  auto now = clock_.Now();
  if (statfs_ && now - statfs_time_ < config_.statfs_cache) return *statfs_;
  // One FSSTAT at a time crosses the WAN, never under the lock: while it is out, callers get
  // the last figures (a slow hub must not hold every df, and the FUSE workers in it, for a
  // round trip); only the very first callers wait for it.
  if (statfs_refreshing_) {
    if (statfs_) return *statfs_;
    statfs_cv_.wait(lock, [&]() REQUIRES(statfs_mu_) { return !statfs_refreshing_; });
    if (statfs_) return *statfs_;
    if (statfs_error_) return std::unexpected(*statfs_error_);
    return Fail(Code::kUnavailable, "FSSTAT of the hub did not complete");
  }
  statfs_refreshing_ = true;
  lock.unlock();
  auto st = remote_.StatFs();
  lock.lock();
  statfs_refreshing_ = false;
  statfs_cv_.notify_all();
  if (!st) {
    statfs_error_ = st.error();
    if (statfs_) return *statfs_;  // stale figures beat a failed df
    return std::unexpected(st.error());
  }
  statfs_ = *st;
  statfs_time_ = now;
  return *st;
}

}  // namespace spoke::agent
