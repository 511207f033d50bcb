// KernelInodeLog: the inodes a mount's kernel holds, kept in the mount's state directory so
// that an agent taking the connection over knows every number the kernel may send at once,
// without the hub (which may be down) and without waiting for the walk to meet it.
//
// An append-only text file: a line per inode handed to the kernel (its number, parent, name,
// attributes and NFS handle; a later line for the same number replaces it, after a rename),
// and a line per inode the kernel no longer holds. Lines are queued and written by a thread
// of the log every `flush_interval`: an agent killed in between loses the last few, which
// then resolve through the walk as before. When the file holds far more lines than live
// inodes the owner rewrites it whole (Rewrite).
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class KernelInodeLog {
 public:
  struct Entry {
    uint64_t ino = 0;
    uint64_t parent = 0;
    std::string name;
    FileAttr attr;
    std::string fh;  // empty when the inode had none
  };

  // The live entries of `file` in the order they were last written (an absent file: none).
  // A line cut short by a crash, or not of this format, is skipped.
  static std::vector<Entry> Load(const std::string& file);

  // Appends to `file` from now on; `fresh` (a new mount): what it held is discarded. kIo
  // naming the file when it cannot be opened.
  static Result<std::unique_ptr<KernelInodeLog>> Open(
      const std::string& file, bool fresh,
      std::chrono::milliseconds flush_interval = std::chrono::milliseconds(200));
  ~KernelInodeLog();  // writes what is queued
  KernelInodeLog(const KernelInodeLog&) = delete;
  KernelInodeLog& operator=(const KernelInodeLog&) = delete;

  // Queued; never blocks on the file.
  void Kept(const Entry& entry) EXCLUDES(mu_);
  void Dropped(uint64_t ino) EXCLUDES(mu_);
  // The file is replaced by `live` alone (what is queued is dropped: `live` holds it).
  void Rewrite(std::vector<Entry> live) EXCLUDES(mu_);
  // Lines written or queued since the file was last rewritten.
  uint64_t lines() const EXCLUDES(mu_);
  // Writes what is queued now (tests; the destructor).
  void Flush() EXCLUDES(mu_);

 private:
  KernelInodeLog(std::string file, int fd, uint64_t lines, std::chrono::milliseconds interval);
  void FlushLoop();
  // One write of everything queued, rewriting first if asked. Caller holds write_mu_.
  void WriteQueued() REQUIRES(write_mu_) EXCLUDES(mu_);

  const std::string file_;
  const std::chrono::milliseconds interval_;
  Mutex write_mu_;  // one writer of the file at a time; taken before mu_
  int fd_ GUARDED_BY(write_mu_);
  bool warned_ GUARDED_BY(write_mu_) = false;  // one warning per failing file, not per flush
  mutable Mutex mu_;
  CondVar cv_;
  std::string queued_ GUARDED_BY(mu_);
  std::optional<std::vector<Entry>> rewrite_ GUARDED_BY(mu_);
  uint64_t lines_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread flusher_;
};

}  // namespace spoke::agent
