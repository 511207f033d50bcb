// Fakes for the fs layer's unit tests: an in-memory hub (FakeRemoteFs) with injectable
// failures and latency, and an in-memory BlockCache.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/thread_annotations.h"

namespace spoke::agent::testing {

class FakeRemoteFs : public RemoteFs {
 public:
  FakeRemoteFs() { Mkdirs(""); }
  ~FakeRemoteFs() override { WaitIdle(); }

  // Test set-up (no failure injection, no counting).
  void PutFile(const std::string& path, const std::string& data) {
    MutexLock lock(mu_);
    MkdirsLocked(Parent(path));
    Node& n = nodes_[path];
    if (n.attr.file_id == 0) n.attr.file_id = next_id_++;
    n.attr.mode = S_IFREG | 0644;
    n.data = data;
    Touch(n);
  }
  void Mkdirs(const std::string& path) {
    MutexLock lock(mu_);
    MkdirsLocked(path);
  }
  // Gives an existing `path` the identity (fsid, file_id): an export spanning several hub
  // file systems, whose file ids repeat.
  void SetIdentity(const std::string& path, uint64_t fsid, uint64_t file_id) {
    MutexLock lock(mu_);
    nodes_.at(path).attr.fsid = fsid;
    nodes_.at(path).attr.file_id = file_id;
  }
  std::string Data(const std::string& path) {
    MutexLock lock(mu_);
    auto it = nodes_.find(path);
    return it == nodes_.end() ? "<missing>" : it->second.data;
  }
  bool Exists(const std::string& path) {
    MutexLock lock(mu_);
    return nodes_.contains(path);
  }

  // Listings carry NFS-like handles, as READDIRPLUS does: Handle(file id), 40 bytes (the
  // size of nfs-ganesha's VFS handles).
  void GiveHandles(bool on) { handles_ = on; }
  static std::string Handle(uint64_t file_id) {
    std::string h = "fh#" + std::to_string(file_id);
    h.resize(40, '.');
    return h;
  }

  // Injection.
  void SetDown(bool down) { down_ = down; }  // every call fails with kUnavailable
  void SetReadLatency(std::chrono::milliseconds ms) { latency_ms_ = ms.count(); }
  // Holds FSSTAT calls (a hub slow to answer them) until released.
  void HoldStatFs(bool hold) {
    MutexLock lock(mu_);
    hold_statfs_ = hold;
    cv_.notify_all();
  }
  int statfs_calls() const { return statfs_calls_.load(); }
  // Holds listings of directory `path` (a directory slow to list) until HoldReadDir("").
  void HoldReadDir(const std::string& path) {
    MutexLock lock(mu_);
    held_dir_ = path;
    cv_.notify_all();
  }
  // Holds reads until Release() (to observe queues).
  void HoldReads(bool hold) {
    MutexLock lock(mu_);
    hold_ = hold;
    cv_.notify_all();
  }

  // Writes sent asynchronously (write-back) wait, not on the hub, until ReleaseHeldWrites.
  void HoldWrites(bool hold) {
    MutexLock lock(mu_);
    hold_writes_ = hold;
  }
  // Carries out the held writes and answers them, in the order they came.
  void ReleaseHeldWrites() {
    std::vector<std::function<void()>> held;
    {
      MutexLock lock(mu_);
      held.swap(held_writes_);
    }
    for (auto& w : held) w();
  }
  // Runs `fn` once, right after the next GETATTR or listing has taken its answer (before the
  // caller has it): the hub changing between its answer and the caller's next step.
  void AfterNextAnswer(std::function<void()> fn) {
    MutexLock lock(mu_);
    after_next_answer_ = std::move(fn);
  }
  // Asynchronous WRITEs fail with `e` (a hub whose disk fails); nullopt: none do.
  void FailWritesWith(std::optional<Error> e) {
    MutexLock lock(mu_);
    write_error_ = std::move(e);
  }
  void WriteAsAsync(const Credentials& who, const std::string& path, uint64_t offset,
                    std::shared_ptr<const std::vector<char>> data, WriteDone done) override {
    std::optional<Error> fail;
    {
      MutexLock lock(mu_);
      fail = write_error_;
    }
    if (fail) return done(std::unexpected(*fail));
    auto write = [this, who, path, offset, data, done = std::move(done)] {
      done(WriteAs(who, path, offset, data->data(), data->size()));
    };
    {
      MutexLock lock(mu_);
      if (hold_writes_) {
        held_writes_.push_back(std::move(write));
        return;
      }
    }
    write();
  }

  // Counters.
  std::atomic<int> stats{0}, readdirs{0}, reads{0}, writes{0};
  // Reads asked for and not yet answered, now and at most so far (the depth the caller kept).
  int reads_in_flight() {
    MutexLock lock(mu_);
    return reads_in_flight_;
  }
  int max_reads_in_flight() {
    MutexLock lock(mu_);
    return max_reads_in_flight_;
  }
  // Reads of `path` fail with kIo (a bad file on the hub); "" = none.
  void FailReadsOf(const std::string& path) {
    MutexLock lock(mu_);
    failing_path_ = path;
  }
  // Reads of `path` return `bytes` fewer bytes than asked, the file unchanged (a hub answering
  // short mid-file); "" = none.
  void ShortenReadsOf(const std::string& path, uint32_t bytes) {
    MutexLock lock(mu_);
    short_path_ = path;
    short_by_ = bytes;
  }
  std::atomic<uint64_t> read_bytes{0};
  std::vector<std::string> ReadLog() {
    MutexLock lock(mu_);
    return read_log_;
  }
  void WaitIdle() {
    MutexLock lock(mu_);
    cv_.wait(lock, [&]() REQUIRES(mu_) { return active_ == 0; });
  }

  // What is in the directory `prefix` (its listing, the names under it) answers as a hub that
  // lets only `uid` search and read it: EACCES to the calls without a caller and to others.
  void Restrict(const std::string& prefix, uint32_t uid) {
    MutexLock lock(mu_);
    restricted_[prefix] = uid;
  }
  Result<FileAttr> StatAs(const Credentials& who, const std::string& path) override {
    Remember(who);
    if (Refused(path, &who)) return Fail(Code::kPermissionDenied, "GETATTR " + path + " refused");
    return StatOf(path);
  }
  Result<std::vector<DirEntry>> ReadDirAs(const Credentials& who,
                                          const std::string& path) override {
    Remember(who);
    if (Refused(path + "/", &who)) {
      return Fail(Code::kPermissionDenied, "READDIR " + path + " refused");
    }
    return ListingOf(path);
  }
  void ReadCheckedAsAsync(const Credentials& who, const std::string& path, uint64_t file_id,
                          uint64_t offset, uint32_t length, CheckedReadDone done) override {
    reads_as++;
    Remember(who);
    CheckedReadOf(path, file_id, offset, length, std::move(done), Refused(path, &who));
  }
  std::atomic<int> reads_as{0};

  Result<FileAttr> Stat(const std::string& path) override {
    if (Refused(path, nullptr))
      return Fail(Code::kPermissionDenied, "GETATTR " + path + " refused");
    return StatOf(path);
  }
  Result<FileAttr> StatOf(const std::string& path) {
    stats++;
    if (down_) return Down("GETATTR");
    Result<FileAttr> r;
    {
      MutexLock lock(mu_);
      auto it = nodes_.find(path);
      r = it == nodes_.end() ? Fail(Code::kNotFound, "no such file " + path)
                             : Result<FileAttr>(it->second.attr);
    }
    RunAfterAnswer();
    return r;
  }
  void RunAfterAnswer() {
    std::function<void()> fn;
    {
      MutexLock lock(mu_);
      fn = std::exchange(after_next_answer_, nullptr);
    }
    if (fn) fn();
  }
  Result<std::vector<DirEntry>> ReadDir(const std::string& path) override {
    if (Refused(path + "/", nullptr)) {
      return Fail(Code::kPermissionDenied, "READDIR " + path + " refused");
    }
    return ListingOf(path);
  }
  Result<std::vector<DirEntry>> ListingOf(const std::string& path) {
    auto r = ListingNow(path);
    RunAfterAnswer();
    return r;
  }
  Result<std::vector<DirEntry>> ListingNow(const std::string& path) {
    readdirs++;
    if (down_) return Down("READDIRPLUS");
    MutexLock lock(mu_);
    cv_.wait(lock, [&]() REQUIRES(mu_) { return held_dir_.empty() || held_dir_ != path; });
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return Fail(Code::kNotFound, "no such dir " + path);
    std::vector<DirEntry> out;
    for (const auto& [p, n] : nodes_) {
      if (p.empty() || Parent(p) != path) continue;
      out.push_back(DirEntry{Base(p), n.attr, handles_ ? Handle(n.attr.file_id) : ""});
    }
    return out;
  }
  void ReadAsync(const std::string& path, uint64_t offset, uint32_t length,
                 ReadDone done) override {
    ReadOf(path, offset, length, std::move(done), Refused(path, nullptr));
  }
  void ReadOf(const std::string& path, uint64_t offset, uint32_t length, ReadDone done,
              bool refused) {
    reads++;
    {
      MutexLock lock(mu_);
      active_++;
      reads_in_flight_++;
      max_reads_in_flight_ = std::max(max_reads_in_flight_, reads_in_flight_);
      read_log_.push_back(path + "@" + std::to_string(offset));
    }
    std::thread([this, path, offset, length, refused, done = std::move(done)] {
      {
        MutexLock lock(mu_);
        cv_.wait(lock, [&]() REQUIRES(mu_) { return !hold_; });
      }
      if (latency_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(latency_ms_));
      Result<std::vector<char>> r = std::unexpected(Error(Code::kInternal, ""));
      if (down_) {
        r = Down("READ");
      } else if (refused) {
        r = Fail(Code::kPermissionDenied, "READ " + path + " refused");
      } else {
        MutexLock lock(mu_);
        auto it = nodes_.find(path);
        if (!failing_path_.empty() && path == failing_path_) {
          r = Fail(Code::kIo, "hub read error on " + path);
        } else if (it == nodes_.end()) {
          r = Fail(Code::kNotFound, "no such file " + path);
        } else {
          const std::string& d = it->second.data;
          uint64_t from = std::min<uint64_t>(offset, d.size());
          uint64_t n = std::min<uint64_t>(length, d.size() - from);
          if (!short_path_.empty() && path == short_path_) n -= std::min<uint64_t>(n, short_by_);
          r = std::vector<char>(d.begin() + from, d.begin() + from + n);
          read_bytes += n;
        }
      }
      {
        MutexLock lock(mu_);
        reads_in_flight_--;
      }
      done(std::move(r));
      MutexLock lock(mu_);
      active_--;
      cv_.notify_all();
    }).detach();
  }
  // ReadAsync, then the file's attributes as they are when the read is back (the bytes may
  // mix versions when the file changed meanwhile: the caller's version check must catch it).
  void ReadCheckedAsync(const std::string& path, uint64_t file_id, uint64_t offset, uint32_t length,
                        CheckedReadDone done) override {
    CheckedReadOf(path, file_id, offset, length, std::move(done), Refused(path, nullptr));
  }
  void CheckedReadOf(const std::string& path, uint64_t file_id, uint64_t offset, uint32_t length,
                     CheckedReadDone done, bool refused) {
    ReadOf(
        path, offset, length,
        [this, path, file_id, done = std::move(done)](Result<std::vector<char>> r) {
          if (!r) return done(std::unexpected(r.error()));
          FileAttr attr;
          {
            MutexLock lock(mu_);
            auto it = nodes_.find(path);
            if (it == nodes_.end()) return done(Fail(Code::kNotFound, "gone: " + path));
            attr = it->second.attr;
          }
          if (attr.file_id != file_id) {
            return done(std::unexpected(Error::FromErrno(ESTALE, "another file: " + path)));
          }
          done(CheckedRead{std::move(*r), attr});
        },
        refused);
  }
  Result<size_t> Write(const std::string& path, uint64_t offset, const char* data,
                       size_t length) override {
    writes++;
    if (down_) return Down("WRITE");
    MutexLock lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return Fail(Code::kNotFound, "no such file " + path);
    auto& d = it->second.data;
    if (d.size() < offset + length) d.resize(offset + length);
    std::memcpy(d.data() + offset, data, length);
    Touch(it->second);
    return length;
  }
  Result<FileAttr> Create(const std::string& path, uint32_t mode) override {
    if (down_) return Down("CREATE");
    MutexLock lock(mu_);
    if (!nodes_.contains(Parent(path))) return Fail(Code::kNotFound, "no parent");
    Node& n = nodes_[path];
    if (n.attr.file_id == 0) n.attr.file_id = next_id_++;
    n.attr.mode = S_IFREG | (mode & 07777);
    Touch(n);
    return n.attr;
  }
  Result<FileAttr> Mkdir(const std::string& path, uint32_t mode) override {
    if (down_) return Down("MKDIR");
    MutexLock lock(mu_);
    if (nodes_.contains(path)) return Fail(Code::kAlreadyExists, path);
    MkdirsLocked(path);
    return nodes_[path].attr;
  }
  Status Unlink(const std::string& path) override {
    if (down_) return std::unexpected(Down("REMOVE").error());
    MutexLock lock(mu_);
    if (nodes_.erase(path) == 0) return Fail(Code::kNotFound, path);
    return Ok();
  }
  Status Rmdir(const std::string& path) override {
    MutexLock lock(mu_);
    for (const auto& [p, n] : nodes_) {
      if (!p.empty() && Parent(p) == path) return Fail(Code::kNotEmpty, path);
    }
    if (nodes_.erase(path) == 0) return Fail(Code::kNotFound, path);
    return Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    MutexLock lock(mu_);
    auto it = nodes_.find(from);
    if (it == nodes_.end()) return Fail(Code::kNotFound, from);
    Node n = it->second;
    nodes_.erase(it);
    nodes_[to] = n;
    return Ok();
  }
  Result<FileAttr> SetAttr(const std::string& path, const SetAttrRequest& r) override {
    MutexLock lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return Fail(Code::kNotFound, path);
    if (r.size) it->second.data.resize(*r.size);
    if (r.mode) it->second.attr.mode = (it->second.attr.mode & S_IFMT) | (*r.mode & 07777);
    Touch(it->second);
    return it->second.attr;
  }
  // The caller's calls: the same changes, with the caller recorded (last_who) and O_EXCL
  // and O_APPEND carried out as the hub would.
  Result<FileAttr> CreateAs(const Credentials& who, const std::string& path, uint32_t mode,
                            CreateMode how) override {
    Remember(who);
    if (how == CreateMode::kExclusive && Exists(path)) return Fail(Code::kAlreadyExists, path);
    return Create(path, mode);
  }
  Result<size_t> WriteAs(const Credentials& who, const std::string& path, uint64_t offset,
                         const char* data, size_t length) override {
    Remember(who);
    return Write(path, offset, data, length);
  }
  Result<uint64_t> AppendAs(const Credentials& who, const std::string& path, const char* data,
                            size_t length) override {
    Remember(who);
    uint64_t at = Data(path).size();
    SPOKE_TRY(auto n, Write(path, at, data, length));
    return at + n;
  }
  Result<FileAttr> SetAttrAs(const Credentials& who, const std::string& path,
                             const SetAttrRequest& r) override {
    Remember(who);
    return SetAttr(path, r);
  }
  Result<FileAttr> MkdirAs(const Credentials& who, const std::string& path,
                           uint32_t mode) override {
    Remember(who);
    return Mkdir(path, mode);
  }
  Status UnlinkAs(const Credentials& who, const std::string& path) override {
    Remember(who);
    return Unlink(path);
  }
  Status RmdirAs(const Credentials& who, const std::string& path) override {
    Remember(who);
    return Rmdir(path);
  }
  Status RenameAs(const Credentials& who, const std::string& from, const std::string& to) override {
    Remember(who);
    return Rename(from, to);
  }
  Result<FileAttr> SymlinkAs(const Credentials& who, const std::string& target,
                             const std::string& path) override {
    Remember(who);
    MutexLock lock(mu_);
    if (nodes_.contains(path)) return Fail(Code::kAlreadyExists, path);
    Node& n = nodes_[path];
    n.attr.file_id = next_id_++;
    n.attr.mode = S_IFLNK | 0777;
    n.attr.uid = who.uid;
    n.attr.gid = who.gid;
    n.data = target;
    Touch(n);
    return n.attr;
  }
  // The hub sees only the default (root) caller as the client itself.
  bool ActsAsSelf(const Credentials& who) const override { return who == Credentials{}; }
  // A second name for the file (same file id); the copies' bytes are not kept in step.
  Result<FileAttr> LinkAs(const Credentials& who, const std::string& existing,
                          const std::string& path) override {
    Remember(who);
    MutexLock lock(mu_);
    auto it = nodes_.find(existing);
    if (it == nodes_.end()) return Fail(Code::kNotFound, existing);
    if (nodes_.contains(path)) return Fail(Code::kAlreadyExists, path);
    nodes_[path] = it->second;
    return it->second.attr;
  }
  Result<std::string> ReadLinkAs(const Credentials& who, const std::string& path) override {
    Remember(who);
    if (Refused(path, &who)) return Fail(Code::kPermissionDenied, "READLINK " + path + " refused");
    return LinkTarget(path);
  }
  Result<std::string> ReadLink(const std::string& path) override {
    if (Refused(path, nullptr))
      return Fail(Code::kPermissionDenied, "READLINK " + path + " refused");
    return LinkTarget(path);
  }
  Result<std::string> LinkTarget(const std::string& path) {
    MutexLock lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return Fail(Code::kNotFound, path);
    if ((it->second.attr.mode & S_IFMT) != S_IFLNK)
      return Fail(Code::kInvalidArgument, "not a symbolic link");
    return it->second.data;
  }
  Result<FileAttr> MknodAs(const Credentials& who, const std::string& path, uint32_t mode,
                           uint64_t) override {
    Remember(who);
    MutexLock lock(mu_);
    if (nodes_.contains(path)) return Fail(Code::kAlreadyExists, path);
    Node& n = nodes_[path];
    n.attr.file_id = next_id_++;
    n.attr.mode = mode;
    Touch(n);
    return n.attr;
  }
  Credentials last_who() {
    MutexLock lock(mu_);
    return last_who_;
  }
  void last_who_reset() {
    MutexLock lock(mu_);
    last_who_ = Credentials{};
  }
  Status Fsync(const std::string&) override { return Ok(); }
  Status FsyncAs(const Credentials& who, const std::string& path) override {
    Remember(who);
    return Fsync(path);
  }
  Result<FsStat> StatFs() override {
    statfs_calls_.fetch_add(1);
    {
      MutexLock lock(mu_);
      cv_.wait(lock, [&]() REQUIRES(mu_) { return !hold_statfs_; });
    }
    if (down_) return Down("FSSTAT");
    return FsStat{1 << 30, 1 << 29, 1 << 29, 1000, 500};
  }
  bool Reachable() const override { return !down_; }
  std::string LastError() const override { return down_ ? "hub down" : ""; }

 private:
  struct Node {
    FileAttr attr;
    std::string data;
  };
  static std::string Parent(const std::string& p) {
    auto s = p.rfind('/');
    return s == std::string::npos ? "" : p.substr(0, s);
  }
  static std::string Base(const std::string& p) {
    auto s = p.rfind('/');
    return s == std::string::npos ? p : p.substr(s + 1);
  }
  std::unexpected<Error> Down(const char* op) {
    return std::unexpected(Error(Code::kUnavailable, std::string("hub down: ") + op));
  }
  void MkdirsLocked(const std::string& path) REQUIRES(mu_) {
    if (!path.empty()) MkdirsLocked(Parent(path));
    Node& n = nodes_[path];
    if (n.attr.file_id == 0) {
      n.attr.file_id = next_id_++;
      n.attr.mode = S_IFDIR | 0755;
      Touch(n);
    }
  }
  void Remember(const Credentials& who) {
    MutexLock lock(mu_);
    last_who_ = who;
  }
  bool Refused(const std::string& path, const Credentials* who) {
    MutexLock lock(mu_);
    for (const auto& [prefix, uid] : restricted_) {
      if (path.starts_with(prefix + "/") && (who == nullptr || who->uid != uid)) return true;
    }
    return false;
  }
  void Touch(Node& n) REQUIRES(mu_) {
    n.attr.size = n.data.size();
    ++tick_;
    n.attr.mtime = {static_cast<time_t>(1000 + tick_), 0};
    n.attr.ctime = n.attr.mtime;
  }

  Mutex mu_;
  CondVar cv_;
  bool hold_writes_ GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> held_writes_ GUARDED_BY(mu_);
  std::function<void()> after_next_answer_ GUARDED_BY(mu_);
  std::map<std::string, Node> nodes_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 100;
  uint64_t tick_ GUARDED_BY(mu_) = 0;
  int active_ GUARDED_BY(mu_) = 0;
  int reads_in_flight_ GUARDED_BY(mu_) = 0;
  int max_reads_in_flight_ GUARDED_BY(mu_) = 0;
  std::string failing_path_ GUARDED_BY(mu_);
  std::string short_path_ GUARDED_BY(mu_);
  uint32_t short_by_ GUARDED_BY(mu_) = 0;
  bool hold_ GUARDED_BY(mu_) = false;
  bool hold_statfs_ GUARDED_BY(mu_) = false;
  std::string held_dir_ GUARDED_BY(mu_);
  std::atomic<int> statfs_calls_{0};
  std::vector<std::string> read_log_ GUARDED_BY(mu_);
  std::atomic<bool> down_{false};
  std::atomic<bool> handles_{false};
  std::atomic<int64_t> latency_ms_{0};
  Credentials last_who_ GUARDED_BY(mu_);
  std::map<std::string, uint32_t> restricted_ GUARDED_BY(mu_);
  std::optional<Error> write_error_ GUARDED_BY(mu_);
};

class FakeBlockCache : public BlockCache {
 public:
  explicit FakeBlockCache(uint32_t block_size = 1 << 20) : block_size_(block_size) {}

  Result<size_t> Get(const BlockKey& key, char* out, size_t capacity) override {
    MutexLock lock(mu_);
    lookups_++;
    last_get_ = {out, capacity};
    auto it = blocks_.find(key);
    if (it == blocks_.end()) {
      misses_++;
      return Fail(Code::kNotFound, "not cached");
    }
    hits_++;
    std::memcpy(out, it->second.data(), it->second.size());
    return it->second.size();
  }
  Status Put(const BlockKey& key, const char* data, size_t length,
             const AdmissionHint& hint) override {
    MutexLock lock(mu_);
    put_cv_.wait(lock, [&]() REQUIRES(mu_) { return !hold_puts_; });
    puts_++;
    if (fail_puts_) return Fail(Code::kIo, "cache disk failed");
    blocks_[key] = std::vector<char>(data, data + length);
    origins_[key] = hint.origin;
    return Ok();
  }
  bool Contains(const BlockKey& key) const override {
    bool found;
    std::function<void()> after;
    {
      MutexLock lock(mu_);
      lookups_++;
      found = blocks_.contains(key);
      after.swap(after_next_contains_);
    }
    if (after) after();  // the asker acts on `found`, which is stale by now
    return found;
  }
  // Runs `fn` once, after the next Contains looked and before it answers: what happens
  // between a caller's look into the cache and its next step.
  void AfterNextContains(std::function<void()> fn) {
    MutexLock lock(mu_);
    after_next_contains_ = std::move(fn);
  }
  bool WouldAdmit(const BlockKey&, const AdmissionHint& hint) const override {
    return hint.origin == kDemand || !refuse_prefetches_;
  }
  uint64_t FreeBytes() const override { return 0; }
  // Puts wait until released (a slow cache disk).
  void HoldPuts(bool hold) {
    {
      MutexLock lock(mu_);
      hold_puts_ = hold;
    }
    put_cv_.notify_all();
  }
  // WouldAdmit answers no for every prefetch (a full cache whose policy refuses them).
  void RefusePrefetches(bool r) { refuse_prefetches_ = r; }
  uint64_t Evict(uint64_t volume, uint64_t file_id) override {
    MutexLock lock(mu_);
    uint64_t n = 0;
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      if (it->first.volume == volume && (file_id == 0 || it->first.file_id == file_id)) {
        it = blocks_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }
  uint64_t VolumeBytes(uint64_t volume) const override {
    MutexLock lock(mu_);
    uint64_t n = 0;
    for (const auto& [k, v] : blocks_) {
      if (k.volume == volume) n += v.size();
    }
    return n;
  }
  BlockCacheStats Stats() const override {
    MutexLock lock(mu_);
    BlockCacheStats s;
    s.blocks = blocks_.size();
    s.hits = hits_;
    s.misses = misses_;
    return s;
  }
  uint32_t block_size() const override { return block_size_; }
  Status Close() override { return Ok(); }
  void SetListener(CacheListener*) override {}

  void FailPuts(bool f) { fail_puts_ = f; }
  size_t blocks() const {
    MutexLock lock(mu_);
    return blocks_.size();
  }
  int puts() const { return puts_; }
  // Get + Contains calls: the index lookups a reader costs.
  uint64_t lookups() const { return lookups_.load(); }
  // The buffer the last Get was given.
  struct GetBuffer {
    const char* out = nullptr;
    size_t capacity = 0;
  };
  GetBuffer last_get() const {
    MutexLock lock(mu_);
    return last_get_;
  }
  ExpertId Origin(const BlockKey& k) const {
    MutexLock lock(mu_);
    auto it = origins_.find(k);
    return it == origins_.end() ? 255 : it->second;
  }

 private:
  uint32_t block_size_;
  mutable Mutex mu_;
  std::unordered_map<BlockKey, std::vector<char>, BlockKeyHash> blocks_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, ExpertId, BlockKeyHash> origins_ GUARDED_BY(mu_);
  mutable std::function<void()> after_next_contains_ GUARDED_BY(mu_);
  uint64_t hits_ GUARDED_BY(mu_) = 0;
  uint64_t misses_ GUARDED_BY(mu_) = 0;
  GetBuffer last_get_ GUARDED_BY(mu_);
  std::atomic<int> puts_{0};
  mutable std::atomic<uint64_t> lookups_{0};
  std::atomic<bool> fail_puts_{false};
  std::atomic<bool> refuse_prefetches_{false};
  CondVar put_cv_;
  bool hold_puts_ GUARDED_BY(mu_) = false;
};

}  // namespace spoke::agent::testing
