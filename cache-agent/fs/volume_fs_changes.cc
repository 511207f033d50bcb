// VolumeFs: changes to the volume (create, write, mkdir, unlink, rmdir, rename, attributes,
// links, nodes), each made on the hub before it is answered. Lookups, opens and reads are in
// volume_fs.cc.
#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>

#include "cache-agent/fs/volume_fs.h"
#include "common/log.h"

namespace spoke::agent {

Result<std::pair<InodeAttr, VolumeFs::OpenFile>> VolumeFs::Create(uint64_t parent,
                                                                  const std::string& name,
                                                                  uint32_t mode, int flags,
                                                                  const Credentials& who) {
  if (IsHintName(parent, name)) return std::make_pair(InodeAttr{kHintIno, HintAttr()}, OpenHints());
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  // O_EXCL must hold across nodes (lock files): the hub decides, with a guarded CREATE.
  auto how = (flags & O_EXCL) ? CreateMode::kExclusive : CreateMode::kUnchecked;
  SPOKE_TRY(auto attr, remote_.CreateAs(who, path, mode, how));
  if ((flags & O_TRUNC) && attr.size > 0) {
    // The name existed on the hub (another node created it since our lookup): O_TRUNC
    // still applies to it.
    SetAttrRequest to_zero;
    to_zero.size = 0;
    SPOKE_TRY_WRAP(attr, remote_.SetAttrAs(who, path, to_zero), "truncate on create");
    DropBlocks(attr.file_id);
  }
  InodeAttr ia = metadata_.Added(parent, name, attr, /*hold=*/true);
  metadata_.Invalidate(parent);
  auto h = std::make_shared<Handle>();
  h->ino = ia.ino;
  h->file = FileRef{path,
                    attr.file_id,
                    kDirtyVersionBit | dirty_versions_.fetch_add(1),
                    attr.size,
                    /*written_here=*/true,
                    who};
  h->writable = true;
  h->append = (flags & O_APPEND) != 0;
  h->who = who;
  OpenFile out;
  out.handle = NewHandle(h);
  RecordOpener(out.handle, *h);
  out.direct_io = config_.consistency == Consistency::kStrict;
  out.flush = write_back_ != nullptr;
  return std::make_pair(ia, out);
}

Result<size_t> VolumeFs::Write(uint64_t handle, uint64_t offset, const char* data, size_t size,
                               bool resent) {
  auto h = Get(handle);
  if (!h) return Fail(Code::kInvalidArgument, "unknown file handle");
  if (h->hints) {
    // Offsets are ignored: the hint file is a stream of lines (echo >>, a loader's writes).
    if (prefetch_ != nullptr) prefetch_->AddHints(std::string_view(data, size));
    return size;
  }
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  if (!h->writable) {
    return std::unexpected(Error::FromErrno(EBADF, "file handle not open for writing"));
  }
  SPOKE_RETURN_IF_ERROR(CheckOpenerKnown(*h));
  std::string path;
  uint64_t file_id;
  {
    MutexLock lock(mu_);
    path = h->file.path;
    file_id = h->file.file_id;
  }
  if (h->lost_writes.exchange(false)) {
    if (h->marked.exchange(false) && config_.open_records != nullptr) {
      config_.open_records->MarkSettled(handle);
    }
    return std::unexpected(
        Error::FromErrno(EIO, "writes to " + path +
                                  " answered before the agent restarted may not have reached "
                                  "the hub"));
  }
  size_t n = 0;
  uint64_t end = 0;
  if (h->append && !resent) {
    // The kernel's offset is its own idea of the end; another node may have appended since.
    // The hub's end includes this file's held writes only once they are on it.
    if (write_back_ != nullptr) {
      SPOKE_RETURN_IF_ERROR(write_back_->WaitIdle(h->ino));
      if (auto e = write_back_->TakeError(h->ino)) return std::unexpected(*e);
    }
    SPOKE_TRY(end, remote_.AppendAs(h->who, path, data, size));
    n = size;
  } else if (write_back_ != nullptr) {
    // The mark is on disk before the write is answered: a successor agent then knows this
    // handle's writer may have lost answered writes.
    if (config_.open_records != nullptr && !h->marked.exchange(true)) {
      if (auto st = config_.open_records->MarkHeld(handle); !st) {
        h->marked = false;
        return std::unexpected(st.error());
      }
    }
    SPOKE_RETURN_IF_ERROR(write_back_->Write(h->ino, h->who, path, offset, data, size));
    n = size;
    end = offset + size;
  } else {
    SPOKE_TRY(n, remote_.WriteAs(h->who, path, offset, data, size));
    end = offset + n;
  }
  bool first_write;
  uint64_t new_size;
  {
    MutexLock lock(mu_);
    first_write = !h->written;
    h->written = true;
    new_size = h->append && !resent ? end : std::max<uint64_t>(h->file.size, end);
  }
  if (first_write) DropBlocks(file_id);
  MarkChanged(h->ino, new_size);
  return n;
}

Result<InodeAttr> VolumeFs::Mkdir(uint64_t parent, const std::string& name, uint32_t mode,
                                  const Credentials& who) {
  if (IsHintName(parent, name)) return Fail(Code::kAlreadyExists, std::string(kHintFileName));
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  SPOKE_TRY(auto attr, remote_.MkdirAs(who, path, mode));
  metadata_.Invalidate(parent);
  return metadata_.Added(parent, name, attr, /*hold=*/true);
}

Status VolumeFs::Unlink(uint64_t parent, const std::string& name, const Credentials& who) {
  if (IsHintName(parent, name)) return Fail(Code::kPermissionDenied, "the hint file stays");
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  if (IsHiddenName(name)) return Fail(Code::kNotFound, "no entry " + name);
  // The kernel looked the name up right before: what the cache has is what it holds (a
  // strict Lookup here would be one more hub round trip per unlink).
  auto child = metadata_.Known(parent, name);
  if (child && !child->attr.is_dir()) SPOKE_RETURN_IF_ERROR(WaitForWrites(child->ino));
  if (child && !child->attr.is_dir() && HasHandles(child->ino)) {
    SPOKE_RETURN_IF_ERROR(HideOpenFile(parent, name, child->ino, who));
  } else {
    SPOKE_RETURN_IF_ERROR(remote_.UnlinkAs(who, path));
    metadata_.Removed(parent, name);
    if (child) DropBlocks(child->attr.file_id);
  }
  if (prefetch_ != nullptr) prefetch_->ForgetFile(path);
  return Ok();
}

Status VolumeFs::Rmdir(uint64_t parent, const std::string& name, const Credentials& who) {
  if (IsHintName(parent, name)) return Fail(Code::kPermissionDenied, "the hint file stays");
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  auto st = remote_.RmdirAs(who, path);
  if (!st) return st;
  metadata_.Removed(parent, name);
  return Ok();
}

Status VolumeFs::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                        const std::string& new_name, unsigned flags, const Credentials& who) {
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  if (flags != 0) return Fail(Code::kInvalidArgument, "rename flags are not supported");
  if (IsHintName(parent, name) || IsHintName(new_parent, new_name))
    return Fail(Code::kPermissionDenied, "the hint file cannot be renamed or replaced");
  SPOKE_TRY(auto from, ChildPath(parent, name));
  SPOKE_TRY(auto to, ChildPath(new_parent, new_name));
  if (IsHiddenName(name) || IsHiddenName(new_name))
    return Fail(Code::kNotFound, "no entry " + (IsHiddenName(name) ? name : new_name));
  auto replaced = metadata_.Lookup(new_parent, new_name, /*hold=*/false, &who);
  if (write_back_ != nullptr) {
    // Held writes go by path: the moved file's (or, for a directory, those below it) and the
    // replaced file's reach the hub under the names they were written to.
    auto moving = metadata_.Known(parent, name);
    if (!moving || moving->attr.is_dir()) {
      SPOKE_RETURN_IF_ERROR(write_back_->WaitAllIdle());
    } else {
      SPOKE_RETURN_IF_ERROR(WaitForWrites(moving->ino));
    }
    if (replaced && !replaced->attr.is_dir()) SPOKE_RETURN_IF_ERROR(WaitForWrites(replaced->ino));
  }
  std::optional<InodeAttr> aside;  // the replaced file, open here, moved to a hidden name
  std::string aside_name;
  if (replaced && !replaced->attr.is_dir() && HasHandles(replaced->ino)) {
    // Its holders keep it: moved aside first, so the rename below replaces nothing.
    auto moved = metadata_.Lookup(parent, name, /*hold=*/false, &who);
    if (moved && moved->ino != replaced->ino) {
      if (moved->attr.is_dir()) {
        return std::unexpected(Error::FromErrno(ENOTDIR, new_name + " is not a directory"));
      }
      SPOKE_TRY(aside_name, HideOpenFile(new_parent, new_name, replaced->ino, who));
      aside = *replaced;
      replaced = Fail(Code::kNotFound, "moved aside");
    }
  }
  auto st = remote_.RenameAs(who, from, to);
  if (!st) {
    if (aside) RestoreAside(new_parent, aside_name, new_name, *aside, who);
    return st;
  }
  metadata_.Renamed(parent, name, new_parent, new_name);
  if (replaced) DropBlocks(replaced->attr.file_id);
  if (prefetch_ != nullptr) {
    // The replaced file is gone; the moved one is known again by its new path when opened.
    prefetch_->ForgetFile(to);
    prefetch_->ForgetFile(from);
  }
  // Open handles keep their path: RemoteFs calls of a renamed open file use the new one.
  auto moved = metadata_.Lookup(new_parent, new_name, /*hold=*/false, &who);
  if (moved) {
    MutexLock lock(mu_);
    for (auto& [id, h] : handles_) {
      if (h->ino == moved->ino) h->file.path = to;
    }
  }
  return Ok();
}

Result<FileAttr> VolumeFs::SetAttr(uint64_t ino, const SetAttrRequest& request,
                                   const Credentials& who) {
  if (ino == kHintIno) return HintAttr();  // truncate (> redirection), touch: nothing to do
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, metadata_.PathOf(ino));
  // A truncate (or chmod that takes the writer's permission) comes after the writes before it.
  SPOKE_RETURN_IF_ERROR(WaitForWrites(ino));
  SPOKE_TRY(auto attr, remote_.SetAttrAs(who, path, request));
  if (request.size) {
    DropBlocks(attr.file_id);
    MarkChanged(ino, attr.size);
  }
  metadata_.SetAttr(ino, attr);
  return attr;
}

Status VolumeFs::Fsync(uint64_t handle) {
  auto h = Get(handle);
  if (!h) return Fail(Code::kInvalidArgument, "unknown file handle");
  if (!h->writable || h->hints || config_.read_only) return Ok();  // nothing of ours to flush
  SPOKE_RETURN_IF_ERROR(CheckOpenerKnown(*h));
  SPOKE_RETURN_IF_ERROR(SettleWrites(handle, *h));
  // Write-back answered every write of the file stably (FILE_SYNC, or UNSTABLE and then
  // committed by the Drain): another COMMIT would only cost a round trip.
  if (write_back_ != nullptr) return Ok();
  std::string path;
  {
    MutexLock lock(mu_);
    path = h->file.path;
  }
  return remote_.FsyncAs(h->who, path);
}

Status VolumeFs::Flush(uint64_t handle) {
  auto h = Get(handle);
  if (!h) return Fail(Code::kInvalidArgument, "unknown file handle");
  if (!h->writable || h->hints || config_.read_only) return Ok();
  return SettleWrites(handle, *h);
}

Status VolumeFs::FsyncDir(uint64_t) {
  if (write_back_ == nullptr) return Ok();
  return write_back_->WaitAllIdle();
}

Result<InodeAttr> VolumeFs::Symlink(uint64_t parent, const std::string& name,
                                    const std::string& target, const Credentials& who) {
  if (IsHintName(parent, name)) return Fail(Code::kAlreadyExists, std::string(kHintFileName));
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  SPOKE_TRY(auto attr, remote_.SymlinkAs(who, target, path));
  metadata_.Invalidate(parent);
  return metadata_.Added(parent, name, attr, /*hold=*/true);
}

Result<std::string> VolumeFs::ReadLink(uint64_t ino, const Caller& who) {
  if (ino == kHintIno) return Fail(Code::kInvalidArgument, "not a symbolic link");
  SPOKE_TRY(auto path, metadata_.PathOf(ino));
  return who.is_volume() ? remote_.ReadLink(path) : remote_.ReadLinkAs(who.credentials(), path);
}

Result<InodeAttr> VolumeFs::Link(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                                 const Credentials& who) {
  if (ino == kHintIno || IsHintName(new_parent, new_name))
    return Fail(Code::kPermissionDenied, "the hint file cannot be linked");
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto existing, metadata_.PathOf(ino));
  SPOKE_TRY(auto path, ChildPath(new_parent, new_name));
  SPOKE_RETURN_IF_ERROR(WaitForWrites(ino));
  SPOKE_TRY(auto attr, remote_.LinkAs(who, existing, path));
  metadata_.Invalidate(new_parent);
  metadata_.Invalidate(ino);  // nlink and ctime changed
  return metadata_.Added(new_parent, new_name, attr, /*hold=*/true);
}

Result<InodeAttr> VolumeFs::Mknod(uint64_t parent, const std::string& name, uint32_t mode,
                                  uint64_t rdev, const Credentials& who) {
  if (IsHintName(parent, name)) return Fail(Code::kAlreadyExists, std::string(kHintFileName));
  SPOKE_RETURN_IF_ERROR(CheckWritable());
  SPOKE_TRY(auto path, ChildPath(parent, name));
  SPOKE_TRY(auto attr, remote_.MknodAs(who, path, mode, rdev));
  metadata_.Invalidate(parent);
  return metadata_.Added(parent, name, attr, /*hold=*/true);
}

bool VolumeFs::RemovedBefore(uint64_t parent, const std::string& name, const Credentials& who) {
  auto r = metadata_.LookupOnHub(parent, name, /*hold=*/false, &who);
  return !r && r.error().code() == Code::kNotFound;
}

bool VolumeFs::RenamedBefore(uint64_t parent, const std::string& name, uint64_t new_parent,
                             const std::string& new_name, const Credentials& who) {
  const auto moving = metadata_.Known(parent, name);  // before the hub lookup forgets it
  if (!RemovedBefore(parent, name, who)) return false;
  auto target = metadata_.LookupOnHub(new_parent, new_name, /*hold=*/false, &who);
  if (!target) return false;
  return !moving || moving->attr.file_id == target->attr.file_id;
}

Result<InodeAttr> VolumeFs::MadeBefore(uint64_t parent, const std::string& name, uint32_t type,
                                       const Credentials& who, const std::string& symlink_target) {
  SPOKE_TRY(auto e, metadata_.LookupOnHub(parent, name, /*hold=*/true, &who));
  bool same = (e.attr.mode & S_IFMT) == (type & S_IFMT) && e.attr.uid == who.uid;
  if (same && S_ISLNK(type)) {
    auto path = metadata_.PathOf(e.ino);
    same = path && remote_.ReadLinkAs(who, *path) == symlink_target;
  }
  if (!same) {
    metadata_.Forget(e.ino, 1);
    return Fail(Code::kAlreadyExists, name + " exists, and not as this request would have made it");
  }
  return e;
}

Result<InodeAttr> VolumeFs::LinkedBefore(uint64_t ino, uint64_t new_parent,
                                         const std::string& new_name, const Credentials& who) {
  SPOKE_TRY(auto e, metadata_.LookupOnHub(new_parent, new_name, /*hold=*/true, &who));
  if (e.ino != ino) {
    metadata_.Forget(e.ino, 1);
    return Fail(Code::kAlreadyExists, new_name + " exists, and is another file");
  }
  return e;
}

}  // namespace spoke::agent
