#include "cache-agent/remote/remote_fs.h"

#include <cerrno>
#include <future>

namespace spoke::agent {

uint64_t FileAttr::ContentVersion() const {
  // Size and mtime (ns) identify a version of the content; ctime catches same-size rewrites
  // within one mtime tick where the hub keeps ctime finer.
  uint64_t h = size;
  h = h * 1000003u ^ static_cast<uint64_t>(mtime.tv_sec);
  h = h * 1000003u ^ static_cast<uint64_t>(mtime.tv_nsec);
  h = h * 1000003u ^ static_cast<uint64_t>(ctime.tv_sec);
  h = h * 1000003u ^ static_cast<uint64_t>(ctime.tv_nsec);
  return h;
}

Result<std::vector<char>> RemoteFs::Read(const std::string& path, uint64_t offset,
                                         uint32_t length) {
  std::promise<Result<std::vector<char>>> p;
  auto f = p.get_future();
  ReadAsync(path, offset, length, [&p](Result<std::vector<char>> r) { p.set_value(std::move(r)); });
  return f.get();
}

namespace {
Error NotSupported(const char* op) {
  return Error::FromErrno(ENOSYS, std::string(op) + ": not supported by this hub client");
}
}  // namespace

void RemoteFs::ReadCheckedAsync(const std::string&, uint64_t, uint64_t, uint32_t,
                                CheckedReadDone done) {
  done(std::unexpected(NotSupported("checked read")));
}

Result<RemoteFs::CheckedRead> RemoteFs::ReadChecked(const std::string& path, uint64_t file_id,
                                                    uint64_t offset, uint32_t length) {
  std::promise<Result<CheckedRead>> p;
  auto f = p.get_future();
  ReadCheckedAsync(path, file_id, offset, length,
                   [&p](Result<CheckedRead> r) { p.set_value(std::move(r)); });
  return f.get();
}

Result<FileAttr> RemoteFs::CreateAs(const Credentials&, const std::string&, uint32_t, CreateMode) {
  return std::unexpected(NotSupported("create"));
}
Result<FileAttr> RemoteFs::MkdirAs(const Credentials&, const std::string&, uint32_t) {
  return std::unexpected(NotSupported("mkdir"));
}
Result<size_t> RemoteFs::WriteAs(const Credentials&, const std::string&, uint64_t, const char*,
                                 size_t) {
  return std::unexpected(NotSupported("write"));
}
void RemoteFs::WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                            std::shared_ptr<const std::vector<char>> data, WriteDone done) {
  done(WriteAs(who, path, offset, data->data(), data->size()));
}

void RemoteFs::WriteUnstableAsAsync(const Credentials& who, const std::string& path,
                                    uint64_t offset, std::shared_ptr<const std::vector<char>> data,
                                    UnstableWriteDone done) {
  WriteStableAsAsync(who, path, offset, std::move(data), std::move(done));
}

void RemoteFs::WriteStableAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                                  std::shared_ptr<const std::vector<char>> data,
                                  UnstableWriteDone done) {
  WriteAsAsync(who, path, offset, std::move(data), [done = std::move(done)](Result<size_t> r) {
    if (!r) return done(std::unexpected(r.error()));
    done(UnstableWrite{.count = *r, .stable = true});
  });
}

void RemoteFs::CommitAsAsync(const Credentials& who, const std::string& path, CommitDone done) {
  auto st = FsyncAs(who, path);
  if (!st) return done(std::unexpected(st.error()));
  done(uint64_t{0});
}

Result<uint64_t> RemoteFs::AppendAs(const Credentials&, const std::string&, const char*, size_t) {
  return std::unexpected(NotSupported("append"));
}
Result<FileAttr> RemoteFs::SymlinkAs(const Credentials&, const std::string&, const std::string&) {
  return std::unexpected(NotSupported("symlink"));
}
Result<std::string> RemoteFs::ReadLink(const std::string&) {
  return std::unexpected(NotSupported("readlink"));
}
Result<std::string> RemoteFs::ReadLinkAs(const Credentials&, const std::string& path) {
  return ReadLink(path);
}
Result<FileAttr> RemoteFs::LinkAs(const Credentials&, const std::string&, const std::string&) {
  return std::unexpected(NotSupported("link"));
}
Result<FileAttr> RemoteFs::MknodAs(const Credentials&, const std::string&, uint32_t, uint64_t) {
  return std::unexpected(NotSupported("mknod"));
}
Result<FileAttr> RemoteFs::SetAttrAs(const Credentials&, const std::string&,
                                     const SetAttrRequest&) {
  return std::unexpected(NotSupported("setattr"));
}
Status RemoteFs::FsyncAs(const Credentials&, const std::string& path) { return Fsync(path); }

Result<FileAttr> RemoteFs::StatAs(const Credentials&, const std::string& path) {
  return Stat(path);
}

Result<std::vector<DirEntry>> RemoteFs::ReadDirAs(const Credentials&, const std::string& path) {
  return ReadDir(path);
}

void RemoteFs::ReadCheckedAsAsync(const Credentials&, const std::string& path, uint64_t file_id,
                                  uint64_t offset, uint32_t length, CheckedReadDone done) {
  ReadCheckedAsync(path, file_id, offset, length, std::move(done));
}
Status RemoteFs::UnlinkAs(const Credentials&, const std::string&) {
  return std::unexpected(NotSupported("unlink"));
}
Status RemoteFs::RmdirAs(const Credentials&, const std::string&) {
  return std::unexpected(NotSupported("rmdir"));
}
Status RemoteFs::RenameAs(const Credentials&, const std::string&, const std::string&) {
  return std::unexpected(NotSupported("rename"));
}

}  // namespace spoke::agent
