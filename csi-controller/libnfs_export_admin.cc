#include "csi-controller/libnfs_export_admin.h"

#include <fcntl.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace spoke::controller {
namespace {

// rm -r never descends deeper than this: deeper trees are not a scratch volume's normal
// shape and the bound keeps the recursion (and the stack) finite.
constexpr int kMaxTreeDepth = 256;

std::string Abs(const std::string& path) { return "/" + path; }

// True when libnfs's error text says the transport failed (timeout, cancel, connection
// refused or dropped) rather than the server answering with an NFS status.
bool IsTransportError(int rc, std::string_view text) {
  int err = rc < 0 ? -rc : rc;
  if (err == EINTR || err == ETIMEDOUT || err == ECONNREFUSED || err == ECONNRESET ||
      err == ENOTCONN || err == EPIPE || err == EHOSTUNREACH || err == ENETUNREACH ||
      err == ECANCELED || err == EAGAIN) {
    return true;
  }
  for (std::string_view needle :
       {"timed out", "cancelled", "canceled", "POLLHUP", "POLLERR", "connect", "Connect", "Socket",
        "socket", "RPC", "Failed to start", "reconnect"}) {
    if (text.find(needle) != std::string_view::npos) return true;
  }
  return false;
}

class LibnfsSession : public ExportSession {
 public:
  LibnfsSession(nfs_context* ctx, HubAddress hub, std::chrono::seconds timeout,
                HubIdentityParams identity)
      : ctx_(ctx), hub_(std::move(hub)), timeout_(timeout), identity_(identity) {}
  ~LibnfsSession() override { nfs_destroy_context(ctx_); }

  // Turns a negative libnfs return into an Error naming the hub, the operation and path.
  Error HubError(int rc, std::string_view op, const std::string& path) {
    std::string text = nfs_get_error(ctx_) ? nfs_get_error(ctx_) : "";
    return MakeError(rc, text, op, path);
  }

  Error MakeError(int rc, const std::string& text, std::string_view op, const std::string& path) {
    std::string where = "hub " + hub_.server + ":" + std::to_string(hub_.nfs_port);
    if (IsTransportError(rc, text)) {
      return Error(Code::kUnavailable, where + " did not answer within " +
                                           std::to_string(timeout_.count()) + "s (" +
                                           std::string(op) + " " + Abs(path) + ": " + text + ")");
    }
    return Error::FromErrno(rc, where + ": " + std::string(op) + " " + hub_.share + Abs(path) +
                                    ": " + (text.empty() ? std::strerror(-rc) : text));
  }

  Result<EntryInfo> Stat(const std::string& path) override {
    struct nfs_stat_64 st {};
    int rc = nfs_lstat64(ctx_, Abs(path).c_str(), &st);
    if (rc < 0) return std::unexpected(HubError(rc, "stat", path));
    return EntryInfo{S_ISDIR(st.nfs_mode), st.nfs_size};
  }

  struct DirEntry {
    std::string name;
    bool is_dir;
  };

  Result<std::vector<DirEntry>> ListTyped(const std::string& path) {
    struct nfsdir* dir = nullptr;
    int rc = nfs_opendir(ctx_, Abs(path).c_str(), &dir);
    if (rc < 0) return std::unexpected(HubError(rc, "readdir", path));
    std::vector<DirEntry> out;
    while (struct nfsdirent* e = nfs_readdir(ctx_, dir)) {
      std::string_view name = e->name;
      if (name == "." || name == "..") continue;
      out.push_back({std::string(name), e->type == NF3DIR});
    }
    nfs_closedir(ctx_, dir);
    return out;
  }

  Result<std::vector<std::string>> List(const std::string& path) override {
    SPOKE_TRY(auto entries, ListTyped(path));
    std::vector<std::string> names;
    for (auto& e : entries) names.push_back(std::move(e.name));
    return names;
  }

  Status MakeDir(const std::string& path, uint32_t mode) override {
    int rc = nfs_mkdir2(ctx_, Abs(path).c_str(), static_cast<int>(mode));
    if (rc < 0) return std::unexpected(HubError(rc, "mkdir", path));
    // The server may apply its own umask to the mode of a new directory: set it explicitly.
    rc = nfs_chmod(ctx_, Abs(path).c_str(), static_cast<int>(mode));
    if (rc < 0) return std::unexpected(HubError(rc, "chmod", path));
    return Ok();
  }

  Status MakeDirs(const std::string& path, uint32_t mode) override {
    if (path.empty()) return Ok();
    size_t pos = 0;
    while (true) {
      size_t slash = path.find('/', pos);
      std::string prefix = slash == std::string::npos ? path : path.substr(0, slash);
      auto st = Stat(prefix);
      if (st && !st->is_dir) {
        return Fail(Code::kAlreadyExists,
                    "hub " + hub_.server + ": " + hub_.share + Abs(prefix) + " is not a directory");
      }
      if (!st) {
        if (st.error().code() != Code::kNotFound) return std::unexpected(st.error());
        auto made = MakeDir(prefix, mode);
        // Lost a race with another creator: fine if it is a directory now.
        if (!made && made.error().code() != Code::kAlreadyExists) return made;
        if (!made) {
          SPOKE_TRY(auto again, Stat(prefix));
          if (!again.is_dir) return made;
        }
      }
      if (slash == std::string::npos) return Ok();
      pos = slash + 1;
    }
  }

  Status Rename(const std::string& from, const std::string& to) override {
    // NFS RENAME replaces an existing target: refuse instead of destroying it.
    auto target = Stat(to);
    if (target) return Fail(Code::kAlreadyExists, "rename target " + Abs(to) + " exists");
    if (target.error().code() != Code::kNotFound) return std::unexpected(target.error());
    int rc = nfs_rename(ctx_, Abs(from).c_str(), Abs(to).c_str());
    if (rc < 0) return std::unexpected(HubError(rc, "rename", from));
    return Ok();
  }

  Status Remove(const std::string& path) override {
    SPOKE_TRY(auto st, Stat(path));
    int rc = st.is_dir ? nfs_rmdir(ctx_, Abs(path).c_str()) : nfs_unlink(ctx_, Abs(path).c_str());
    if (rc < 0) return std::unexpected(HubError(rc, st.is_dir ? "rmdir" : "unlink", path));
    return Ok();
  }

  // A scratch volume's files belong to whoever the pods ran as (uid 1000, not the
  // provisioning identity): each directory is listed, and each of its entries removed, as
  // the directory's owner, the only one (root aside) the hub lets do it under any mode. A
  // directory whose owner cannot write it (chmod 0555) is made writable first. Root-owned
  // directories are left to root: without allowRoot they stay, and the error says so.
  Status RemoveTree(const std::string& path) override {
    if (path.empty()) return Fail(Code::kInternal, "refusing to remove the share root");
    auto st = Stat(path);
    if (!st) return st.error().code() == Code::kNotFound ? Ok() : std::unexpected(st.error());
    Status removed = RemoveTreeAt(path, st->is_dir, 0, Owner{identity_.uid, identity_.gid});
    ActAs(Owner{identity_.uid, identity_.gid});
    return removed;
  }

  struct Owner {
    uint32_t uid = 0;
    uint32_t gid = 0;
  };

  // The AUTH_SYS identity of the next calls: `who`, unless that is root and root is not
  // allowed (then the provisioning identity), or root is allowed (root does it all).
  void ActAs(const Owner& who) {
    if (identity_.allow_root) return;
    Owner as = who.uid == 0 ? Owner{identity_.uid, identity_.gid} : who;
    nfs_set_uid(ctx_, static_cast<int>(as.uid));
    nfs_set_gid(ctx_, static_cast<int>(as.gid));
  }

  // Removes `path` as `parent` (the owner of the directory holding it).
  Status RemoveTreeAt(const std::string& path, bool is_dir, int depth, const Owner& parent) {
    if (!is_dir) {
      ActAs(parent);
      int rc = nfs_unlink(ctx_, Abs(path).c_str());
      if (rc < 0 && rc != -ENOENT) return std::unexpected(HubError(rc, "unlink", path));
      return Ok();
    }
    if (depth > kMaxTreeDepth) {
      return Fail(Code::kIo, "refusing to remove " + Abs(path) + ": deeper than " +
                                 std::to_string(kMaxTreeDepth) + " levels");
    }
    struct nfs_stat_64 st {};
    int rc = nfs_lstat64(ctx_, Abs(path).c_str(), &st);
    if (rc == -ENOENT) return Ok();
    if (rc < 0) return std::unexpected(HubError(rc, "stat", path));
    const Owner self{static_cast<uint32_t>(st.nfs_uid), static_cast<uint32_t>(st.nfs_gid)};
    ActAs(self);
    if ((st.nfs_mode & 0700) != 0700) {
      rc = nfs_chmod(ctx_, Abs(path).c_str(), static_cast<int>((st.nfs_mode & 07777) | 0700));
      if (rc < 0) return std::unexpected(HubError(rc, "chmod u+rwx", path));
    }
    auto entries = ListTyped(path);
    if (!entries) {
      return entries.error().code() == Code::kNotFound ? Ok() : std::unexpected(entries.error());
    }
    for (const DirEntry& e : *entries) {
      // Only entries the server reports as directories are descended into; a symlink is
      // unlinked, never followed.
      SPOKE_RETURN_IF_ERROR(RemoveTreeAt(path + "/" + e.name, e.is_dir, depth + 1, self));
    }
    ActAs(parent);
    rc = nfs_rmdir(ctx_, Abs(path).c_str());
    if (rc < 0 && rc != -ENOENT) return std::unexpected(HubError(rc, "rmdir", path));
    return Ok();
  }

  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    struct nfsfh* fh = nullptr;
    int rc = nfs_open(ctx_, Abs(path).c_str(), O_RDONLY, &fh);
    if (rc < 0) return std::unexpected(HubError(rc, "open", path));
    std::string data;
    char buf[4096];
    while (true) {
      rc = nfs_read(ctx_, fh, sizeof buf, buf);
      if (rc < 0) {
        Error e = HubError(rc, "read", path);
        nfs_close(ctx_, fh);
        return std::unexpected(e);
      }
      if (rc == 0) break;
      data.append(buf, static_cast<size_t>(rc));
      if (data.size() > max_bytes) {
        nfs_close(ctx_, fh);
        return Fail(Code::kInvalidArgument,
                    Abs(path) + " is larger than " + std::to_string(max_bytes) + " bytes");
      }
    }
    nfs_close(ctx_, fh);
    return data;
  }

  Status WriteFile(const std::string& path, const std::string& data) override {
    std::string tmp = path + ".tmp";
    struct nfsfh* fh = nullptr;
    int rc = nfs_create(ctx_, Abs(tmp).c_str(), O_WRONLY | O_TRUNC, 0644, &fh);
    if (rc < 0) return std::unexpected(HubError(rc, "create", tmp));
    size_t done = 0;
    while (done < data.size()) {
      rc = nfs_write(ctx_, fh, data.size() - done, data.data() + done);
      if (rc <= 0) {
        Error e = rc < 0 ? HubError(rc, "write", tmp)
                         : Error(Code::kIo, "short write to " + Abs(tmp) + " on hub");
        nfs_close(ctx_, fh);
        return std::unexpected(e);
      }
      done += static_cast<size_t>(rc);
    }
    rc = nfs_fsync(ctx_, fh);
    if (rc < 0) {
      Error e = HubError(rc, "fsync", tmp);
      nfs_close(ctx_, fh);
      return std::unexpected(e);
    }
    rc = nfs_close(ctx_, fh);
    if (rc < 0) return std::unexpected(HubError(rc, "close", tmp));
    rc = nfs_rename(ctx_, Abs(tmp).c_str(), Abs(path).c_str());
    if (rc < 0) return std::unexpected(HubError(rc, "rename", tmp));
    return Ok();
  }

  Result<FsUsage> Usage() override {
    struct nfs_statvfs_64 sv {};
    int rc = nfs_statvfs64(ctx_, "/", &sv);
    if (rc < 0) return std::unexpected(HubError(rc, "fsstat", ""));
    uint64_t unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    return FsUsage{sv.f_blocks * unit, sv.f_bfree * unit, sv.f_bavail * unit};
  }

 private:
  nfs_context* ctx_;
  HubAddress hub_;
  std::chrono::seconds timeout_;
  HubIdentityParams identity_;
};

}  // namespace

Result<std::unique_ptr<ExportSession>> LibnfsExportAdmin::Open(const HubAddress& hub,
                                                               std::chrono::seconds timeout,
                                                               const HubIdentityParams& identity) {
  SPOKE_RETURN_IF_ERROR(hub.Validate());  // glued into a URL
  if (timeout.count() < 1) timeout = std::chrono::seconds(1);
  nfs_context* ctx = nfs_init_context();
  if (ctx == nullptr) return Fail(Code::kInternal, "nfs_init_context failed");
  // libnfs takes whole seconds, in milliseconds. Without a timeout a call on a hung hub
  // blocks forever (ENVIRONMENT.md); autoreconnect keeps its default (-1) on purpose.
  nfs_set_timeout(ctx, static_cast<int>(timeout.count() * 1000));
  // The controller removes and re-creates names: a stale directory cache would lie.
  nfs_set_dircache(ctx, 0);
  // Provisioning is no caller's request: it runs as the StorageClass's hubUid/hubGid.
  if (!identity.allow_root) {
    nfs_set_uid(ctx, static_cast<int>(identity.uid));
    nfs_set_gid(ctx, static_cast<int>(identity.gid));
  }
  auto session = std::make_unique<LibnfsSession>(ctx, hub, timeout, identity);
  // The URL carries version=3 and the explicit ports (no portmapper when given).
  std::string url_text = hub.NfsUrl();
  nfs_url* url = nfs_parse_url_dir(ctx, url_text.c_str());
  if (url == nullptr) {
    return Fail(Code::kInvalidArgument,
                "cannot parse hub URL " + url_text + ": " + nfs_get_error(ctx));
  }
  int rc = nfs_mount(ctx, url->server, url->path);
  nfs_destroy_url(url);
  if (rc < 0) {
    std::string text = nfs_get_error(ctx) ? nfs_get_error(ctx) : "";
    std::string where = "hub " + hub.server + ":" + std::to_string(hub.nfs_port);
    // The MOUNT protocol's refusals (no such export, access denied) are answers, not an
    // outage.
    if (text.find("MNT3ERR") != std::string::npos || rc == -ENOENT || rc == -EACCES) {
      Code code = text.find("ACCES") != std::string::npos || rc == -EACCES ? Code::kPermissionDenied
                                                                           : Code::kNotFound;
      return Fail(code, where + " refused to mount share " + hub.share + ": " + text);
    }
    return Fail(Code::kUnavailable, where + " did not answer within " +
                                        std::to_string(timeout.count()) + "s (mount " + hub.share +
                                        ": " + text + ")");
  }
  return std::unique_ptr<ExportSession>(std::move(session));
}

}  // namespace spoke::controller
