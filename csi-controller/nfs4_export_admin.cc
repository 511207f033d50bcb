#include "csi-controller/nfs4_export_admin.h"

#include "cache-agent/remote/nfs4_remote.h"

namespace spoke::controller {

namespace {

using agent::Credentials;
using agent::FileAttr;
using agent::Nfs4Remote;

constexpr int kMaxTreeDepth = 64;

class Nfs4Session : public ExportSession {
 public:
  Nfs4Session(std::unique_ptr<Nfs4Remote> remote, const HubIdentityParams& identity)
      : remote_(std::move(remote)), identity_(identity) {}

  Result<EntryInfo> Stat(const std::string& path) override {
    SPOKE_TRY(FileAttr a, remote_->StatAs(Self(), path));
    return EntryInfo{a.is_dir(), a.size};
  }

  Result<std::vector<std::string>> List(const std::string& path) override {
    SPOKE_TRY(auto entries, remote_->ReadDirAs(Self(), path));
    std::vector<std::string> names;
    names.reserve(entries.size());
    for (auto& e : entries) names.push_back(std::move(e.name));
    return names;
  }

  Status MakeDir(const std::string& path, uint32_t mode) override {
    SPOKE_TRY(FileAttr made, remote_->MkdirAs(Self(), path, mode));
    // The hub applies its umask-free mode, but make sure of it as the provisioner (0777
    // scratch roots): a MKDIR's mode is a request.
    if ((made.mode & 07777) != (mode & 07777)) {
      agent::SetAttrRequest chmod;
      chmod.mode = mode & 07777;
      SPOKE_TRY(auto ignored, remote_->SetAttrAs(Self(), path, chmod));
      (void)ignored;
    }
    return Ok();
  }

  Status MakeDirs(const std::string& path, uint32_t mode) override {
    std::string prefix;
    size_t start = 0;
    while (start <= path.size()) {
      size_t slash = path.find('/', start);
      std::string part = path.substr(start, slash == std::string::npos ? slash : slash - start);
      prefix = prefix.empty() ? part : prefix + "/" + part;
      auto st = Stat(prefix);
      if (!st) {
        if (st.error().code() != Code::kNotFound) return std::unexpected(st.error());
        Status made = MakeDir(prefix, mode);
        // Another request made it meanwhile: fine if it is a directory.
        if (!made && made.error().code() != Code::kAlreadyExists) return made;
        SPOKE_TRY(st, Stat(prefix));
      }
      if (!st->is_dir) {
        return Fail(Code::kAlreadyExists, prefix + " exists on the hub and is not a directory");
      }
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    // NFS RENAME replaces an existing target: refuse instead of destroying it.
    auto target = Stat(to);
    if (target) return Fail(Code::kAlreadyExists, "rename target " + to + " exists on the hub");
    if (target.error().code() != Code::kNotFound) return std::unexpected(target.error());
    return remote_->RenameAs(Self(), from, to);
  }

  Status Remove(const std::string& path) override {
    SPOKE_TRY(auto st, Stat(path));
    return st.is_dir ? remote_->RmdirAs(Self(), path) : remote_->UnlinkAs(Self(), path);
  }

  // As LibnfsExportAdmin: each directory is listed, and its entries removed, as the
  // directory's owner (the only one, root aside, the hub lets do it under any mode).
  Status RemoveTree(const std::string& path) override {
    if (path.empty()) return Fail(Code::kInternal, "refusing to remove the share root");
    auto st = remote_->StatAs(Self(), path);
    if (!st) return st.error().code() == Code::kNotFound ? Ok() : std::unexpected(st.error());
    return RemoveTreeAt(path, *st, 0, Self());
  }

  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    SPOKE_TRY(FileAttr a, remote_->StatAs(Self(), path));
    if (a.size > max_bytes) {
      return Fail(Code::kInvalidArgument,
                  path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
    SPOKE_TRY(auto read, remote_->ReadChecked(path, a.file_id, 0, static_cast<uint32_t>(a.size)));
    return std::string(read.data.begin(), read.data.end());
  }

  Status WriteFile(const std::string& path, const std::string& data) override {
    const std::string tmp = path + ".tmp";
    SPOKE_TRY(auto created, remote_->CreateAs(Self(), tmp, 0644, agent::CreateMode::kUnchecked));
    (void)created;
    agent::SetAttrRequest truncate;
    truncate.size = 0;
    SPOKE_TRY(auto emptied, remote_->SetAttrAs(Self(), tmp, truncate));
    (void)emptied;
    if (!data.empty()) {
      SPOKE_TRY(size_t n, remote_->WriteAs(Self(), tmp, 0, data.data(), data.size()));
      if (n != data.size()) return Fail(Code::kIo, "short write to " + tmp + " on the hub");
    }
    return remote_->RenameAs(Self(), tmp, path);
  }

  Result<FsUsage> Usage() override {
    SPOKE_TRY(auto s, remote_->StatFs());
    return FsUsage{s.total_bytes, s.free_bytes, s.avail_bytes};
  }

 private:
  // The provisioning identity (hubUid/hubGid, or root with allowRoot).
  Credentials Self() const {
    return identity_.allow_root ? Credentials{0, 0, {}}
                                : Credentials{identity_.uid, identity_.gid, {}};
  }
  // An owner as the hub should see it: root only with allowRoot, else the provisioning identity.
  Credentials As(const FileAttr& owner) const {
    if (identity_.allow_root) return Credentials{0, 0, {}};
    if (owner.uid == 0) return Self();
    return Credentials{owner.uid, owner.gid, {}};
  }

  Status RemoveTreeAt(const std::string& path, const FileAttr& attr, int depth,
                      const Credentials& parent) {
    if (!attr.is_dir()) {
      Status s = remote_->UnlinkAs(parent, path);
      if (!s && s.error().code() != Code::kNotFound) return s;
      return Ok();
    }
    if (depth > kMaxTreeDepth) {
      return Fail(Code::kIo, "refusing to remove " + path + ": deeper than " +
                                 std::to_string(kMaxTreeDepth) + " levels");
    }
    const Credentials self = As(attr);
    if ((attr.mode & 0700) != 0700) {
      agent::SetAttrRequest chmod;
      chmod.mode = (attr.mode & 07777) | 0700;
      SPOKE_TRY(auto ignored, remote_->SetAttrAs(self, path, chmod));
      (void)ignored;
    }
    auto entries = remote_->ReadDirAs(self, path);
    if (!entries) {
      return entries.error().code() == Code::kNotFound ? Ok() : std::unexpected(entries.error());
    }
    for (const auto& e : *entries) {
      // Only entries the hub reports as directories are descended into; a symlink is
      // unlinked, never followed.
      SPOKE_RETURN_IF_ERROR(RemoveTreeAt(path + "/" + e.name, e.attr, depth + 1, self));
    }
    Status s = remote_->RmdirAs(parent, path);
    if (!s && s.error().code() != Code::kNotFound) return s;
    return Ok();
  }

  std::unique_ptr<Nfs4Remote> remote_;
  const HubIdentityParams identity_;
};

}  // namespace

Result<std::unique_ptr<ExportSession>> Nfs4ExportAdmin::Open(const HubAddress& hub,
                                                             std::chrono::seconds timeout,
                                                             const HubIdentityParams& identity) {
  Nfs4Remote::Config config;
  config.request_timeout_seconds = static_cast<double>(timeout.count());
  config.identity_mode = Nfs4Remote::Config::IdentityMode::kCaller;
  config.allow_root = identity.allow_root;
  config.fixed_uid = identity.uid;
  config.fixed_gid = identity.gid;
  config.uid = identity.allow_root ? 0 : identity.uid;
  config.gid = identity.allow_root ? 0 : identity.gid;
  config.fh_table_size = 0;  // one request: every path looked up now
  auto remote = Nfs4Remote::Connect(hub, "", config, nullptr);
  if (!remote) return std::unexpected(remote.error());
  return std::unique_ptr<ExportSession>(
      std::make_unique<Nfs4Session>(std::move(*remote), identity));
}

}  // namespace spoke::controller
