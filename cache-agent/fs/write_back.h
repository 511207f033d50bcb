// WriteBack: a scratch volume's writes, answered once held here and sent to the hub with many
// WRITEs in flight per file. A write is held until the hub has it stably:
// - stable mode: each WRITE is FILE_SYNC, so its reply means the bytes are stable on the hub;
// - unstable mode: WRITEs are UNSTABLE (the hub answers before its disk has them) and COMMITs
//   make them stable: when the file's answered bytes not yet in a COMMIT reach
//   `commit_bytes`, when a caller waits for the file (fsync, close, a read or rename of it, an
//   overlapping write) or for the volume, and when writers wait for room. Up to
//   `commits_in_flight` COMMITs of a file are out at once, so bytes answered while one is out
//   do not wait for it. A WRITE answered with another write verifier than its COMMIT's was
//   lost by a hub restart and is sent again.
// A WRITE that fails for the network (kTimeout, kUnavailable: the hub restarting) is sent
// again, with backoff, until `retry_bound` has passed since its first send; so is a COMMIT.
// One the hub answers "no such file" (kNotFound: NOENT, STALE) is sent again for
// `gone_bound` (within retry_bound): a hub shutting down or starting answers so for files it
// has, while its exports go and come back.
// Any other failure (ENOSPC, EDQUOT, EACCES, EIO), or running out of retries, is kept as the
// file's error and returned by its next Write, Drain or TakeError.
//
// Bounds: the bytes held (copied, in flight, answered but not committed, or waiting for a
// retry) are at most `budget_bytes` per volume, and are taken from the agent's memory budget
// (`memory`, use kWriteBack, background level) too; a Write waits for room, and waits for an
// earlier held write of an overlapping range of the same file (so the hub applies them in the
// caller's order, also when one is sent again), both at most `wait_bound`. Files are keyed by
// the caller's choice (the inode).
// Thread-safe; `done` callbacks of the RemoteFs run on its I/O threads.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/remote/remote_fs.h"
#include "common/memory_budget.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

class WriteBack {
 public:
  struct Config {
    size_t budget_bytes = 64u << 20;
    // How long a failed WRITE is sent again before its error is kept.
    std::chrono::milliseconds retry_bound{60000};
    // How long a Write waits for room or a Drain for the file's WRITEs (the hub's own bound
    // per call sits below it).
    std::chrono::milliseconds wait_bound{90000};
    std::chrono::milliseconds first_backoff{100};
    // How long a WRITE or COMMIT answered "no such file" is sent again before that is the
    // file's error (the count starts again after a failure of the network).
    std::chrono::milliseconds gone_bound{10000};
    // UNSTABLE WRITEs and COMMIT (RemoteFs::WriteUnstableAsAsync) instead of FILE_SYNC ones.
    bool unstable = false;
    // A file's answered bytes in no COMMIT yet that start one without anyone waiting.
    size_t commit_bytes = 4u << 20;
    // A file's COMMITs out at once (each covers the pieces answered before it was sent).
    int commits_in_flight = 4;
    // The agent's memory budget, shared with every volume (optional; must outlive this).
    MemoryBudget* memory = nullptr;
    // Called with the file when one of its held writes is let go (on the hub, or failed),
    // under the write-back's lock: it may take leaf locks only. VolumeFs invalidates the
    // file's cached attributes there, so that a hub answer about the file on its way
    // meanwhile, which predates the write, is not kept (MetadataCache::Invalidate).
    std::function<void(uint64_t file)> on_released;
  };

  WriteBack(RemoteFs& remote, const Config& config);
  // Waits (bounded by wait_bound) for the WRITEs in flight; what is left is dropped.
  ~WriteBack();
  WriteBack(const WriteBack&) = delete;
  WriteBack& operator=(const WriteBack&) = delete;

  // Copies `data` and starts its WRITE as `who`. Fails with the file's kept error (taking
  // it), or kTimeout when no room came within wait_bound; the bytes are then not taken.
  Status Write(uint64_t file, const Credentials& who, const std::string& path, uint64_t offset,
               const char* data, size_t size);
  // Waits until none of the file's WRITEs is held here, then returns and clears its error.
  Status Drain(uint64_t file);
  // Waits as Drain and leaves the error for the file's next Write, Drain or TakeError
  // (reads, truncates and renames order themselves after the writes this way).
  Status WaitIdle(uint64_t file);
  // WaitIdle for every file (a directory's fsync, a rename of a directory).
  Status WaitAllIdle();
  std::optional<Error> TakeError(uint64_t file);
  bool Holds(uint64_t file) const;
  size_t held_bytes() const;

 private:
  struct Piece {
    uint64_t file = 0;
    Credentials who;
    std::string path;
    uint64_t offset = 0;
    std::shared_ptr<const std::vector<char>> data;
    std::chrono::steady_clock::time_point first_sent{};
    std::chrono::milliseconds backoff{};
    std::optional<std::chrono::steady_clock::time_point> gone_since;  // first "no such file"
    uint64_t id = 0;
    // Unstable mode: the hub answered (the bytes wait for a COMMIT), with this verifier
    // (none when it changed between the WRITE's chunks: sent again whatever the COMMIT says).
    bool answered = false;
    std::optional<uint64_t> verifier;
    bool in_commit = false;  // answered and covered by a COMMIT out or waiting for its retry
  };
  struct FileState {
    std::map<uint64_t, std::shared_ptr<Piece>> held;  // by piece id
    std::optional<Error> error;
    // Counts of `held` kept for the hot path, changed only by HoldLocked, AnsweredLocked,
    // SendAgainLocked, ReleaseLocked and DueCommitLocked (`uncovered`).
    size_t sending = 0;    // pieces sent or waiting for a retry, not yet answered
    size_t uncovered = 0;  // bytes of answered pieces in no COMMIT yet
    int commits = 0;       // COMMITs out or waiting for their retry
    int waiters = 0;       // callers waiting for the file: it is committed for them
    Credentials who;       // the latest writer, whose COMMIT it is
    std::string path;
  };
  // A COMMIT to send: the pieces answered before it, which it makes stable.
  struct Commit {
    uint64_t file = 0;
    Credentials who;
    std::string path;
    std::vector<uint64_t> ids;
    std::chrono::steady_clock::time_point first_sent{};
    std::chrono::milliseconds backoff{};
    std::optional<std::chrono::steady_clock::time_point> gone_since;
  };

  // Whether a WRITE or COMMIT that failed with `e` is sent again (see the top); `gone_since`
  // is its first "no such file" answer since the network last failed it.
  bool WorthAnotherTry(const Error& e, const std::string& path,
                       std::chrono::steady_clock::time_point first_sent,
                       std::optional<std::chrono::steady_clock::time_point>& gone_since) const
      REQUIRES(mu_);
  void Send(std::shared_ptr<Piece> p);
  void Done(const std::shared_ptr<Piece>& p, Result<RemoteFs::UnstableWrite> r);
  void SendCommits(std::vector<Commit> commits);
  void CommitDone(Commit c, Result<uint64_t> r);
  // Starts (marks) the COMMITs now due: of `file` only, or of every file. Every change that
  // can make a file's COMMIT due checks that file; all files are looked at only when a
  // condition for all of them starts (the first writer waiting for room, a WaitAllIdle, the
  // end of the volume).
  std::vector<Commit> DueCommitsLocked(std::optional<uint64_t> file) REQUIRES(mu_);
  std::optional<Commit> DueCommitLocked(uint64_t file, FileState& state) REQUIRES(mu_);
  // Starts the COMMITs due (as DueCommitsLocked) and sends them with mu_ released for the
  // while; true when there were any (what the caller waits for may have changed).
  bool SendDueCommitsLocked(std::optional<uint64_t> file) REQUIRES(mu_);
  // A piece's life: held and sent, answered (unstable mode), sent again (its COMMIT found
  // another verifier), no longer held.
  void HoldLocked(FileState& state, const std::shared_ptr<Piece>& p) REQUIRES(mu_);
  void AnsweredLocked(FileState& state, Piece& p, std::optional<uint64_t> verifier) REQUIRES(mu_);
  void SendAgainLocked(FileState& state, Piece& p) REQUIRES(mu_);
  void ReleaseLocked(FileState& state, const std::shared_ptr<Piece>& p) REQUIRES(mu_);
  // The agent's memory budget (no-ops without one).
  bool TakeMemory(size_t bytes);
  // Waits until `until` for room (called with mu_ released); a timeout counts a refusal.
  bool WaitForMemory(size_t bytes, std::chrono::steady_clock::time_point until) EXCLUDES(mu_);
  void ReleaseMemory(size_t bytes);
  void EraseIfDoneLocked(uint64_t file) REQUIRES(mu_);
  bool OverlapsLocked(uint64_t file, uint64_t offset, size_t size) const REQUIRES(mu_);
  void RetryLoop();
  // Waits until none of the file's writes is held (committing them in unstable mode).
  Status WaitFileIdle(uint64_t file, const char* what) EXCLUDES(mu_);
  std::optional<Error> TakeErrorLocked(uint64_t file) REQUIRES(mu_);

  RemoteFs& remote_;
  Config config_;

  mutable Mutex mu_;
  CondVar changed_;  // a piece finished, a retry is due, or stopping
  std::map<uint64_t, FileState> files_ GUARDED_BY(mu_);
  size_t held_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::shared_ptr<Piece>>> retries_
      GUARDED_BY(mu_);
  std::deque<std::pair<std::chrono::steady_clock::time_point, Commit>> commit_retries_
      GUARDED_BY(mu_);
  int room_waiters_ GUARDED_BY(mu_) = 0;  // Writes waiting for room in the budget
  int all_waiters_ GUARDED_BY(mu_) = 0;   // WaitAllIdle callers
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread retry_thread_;
};

}  // namespace spoke::agent
