#include "cache-agent/fs/write_back.h"

#include <algorithm>

#include "common/log.h"
#include "common/thread_name.h"

namespace spoke::agent {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Seconds(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000) + " s"; }

// The network's failures: the hub may be restarting, and a WRITE at an offset may be made again.
bool Transient(const Error& e) {
  return e.code() == Code::kTimeout || e.code() == Code::kUnavailable;
}

// A writer waiting for the agent's memory budget waits on the budget (memory any use
// releases wakes it) in slices of this, so that it sees an unmount within one.
constexpr std::chrono::milliseconds kMemoryWaitSlice{200};

}  // namespace

WriteBack::WriteBack(RemoteFs& remote, const Config& config) : remote_(remote), config_(config) {
  retry_thread_ = std::thread([this] {
    NameThisThread("spoke-writeback");
    RetryLoop();
  });
}

WriteBack::~WriteBack() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.notify_all();
    // What is answered and not committed is committed now (the caller's own flushes did that
    // already; this is the bound for the rest).
    SendDueCommitsLocked(std::nullopt);
    // Replies still to come run Done on this object: wait for them (each is bounded by the
    // hub's request timeout).
    while (!changed_.wait_until(lock, SteadyClock::now() + config_.wait_bound,
                                [&]() REQUIRES(mu_) { return held_bytes_ == 0; })) {
      log::Warn("write-back: waiting for the hub's replies to end the volume",
                {{"bytes", std::to_string(held_bytes_)}});
    }
  }
  retry_thread_.join();
}

bool WriteBack::OverlapsLocked(uint64_t file, uint64_t offset, size_t size) const {
  auto it = files_.find(file);
  if (it == files_.end()) return false;
  for (const auto& [id, p] : it->second.held) {
    if (offset < p->offset + p->data->size() && p->offset < offset + size) return true;
  }
  return false;
}

Status WriteBack::Write(uint64_t file, const Credentials& who, const std::string& path,
                        uint64_t offset, const char* data, size_t size) {
  if (size == 0) return Ok();
  auto p = std::make_shared<Piece>();
  {
    MutexLock lock(mu_);
    if (auto e = TakeErrorLocked(file)) return std::unexpected(*e);
    auto deadline = SteadyClock::now() + config_.wait_bound;
    bool room_waiter = false;
    bool file_waiter = false;
    bool timed_out = false;
    bool taken = false;  // the bytes are taken from the agent's memory budget
    bool memory_short = false;
    while (!stopping_) {
      bool fits = held_bytes_ == 0 || held_bytes_ + size <= config_.budget_bytes;
      bool overlaps = OverlapsLocked(file, offset, size);
      // The shared budget last; bytes taken are kept while the write waits for the rest.
      if (fits && !overlaps && !taken) taken = TakeMemory(size);
      if (fits && !overlaps && taken) break;
      if (SteadyClock::now() >= deadline) {
        timed_out = true;
        break;
      }
      memory_short = fits && !overlaps;
      // Waiting writers make COMMITs due (unstable mode): what they wait for may be
      // answered pieces that only a COMMIT releases. The first writer waiting for room
      // makes every file's due; replies (Done, CommitDone) make the rest due as they come.
      if ((!fits || memory_short) && !room_waiter) {
        room_waiter = true;
        if (room_waiters_++ == 0 && SendDueCommitsLocked(std::nullopt)) continue;
      }
      if (overlaps && !file_waiter) {
        file_waiter = true;
        files_[file].waiters++;
      }
      if (overlaps && SendDueCommitsLocked(file)) continue;
      if (memory_short) {
        // This volume has room; the agent's budget has not. Its Release wakes the wait, and
        // this volume's lock is let go meanwhile (its replies release the memory too).
        auto until = std::min(deadline, SteadyClock::now() + kMemoryWaitSlice);
        lock.unlock();
        taken = WaitForMemory(size, until);
        lock.lock();
        continue;
      }
      changed_.wait_until(lock, deadline);
    }
    auto give_back = [&] {
      if (taken) ReleaseMemory(size);
    };
    if (room_waiter) room_waiters_--;
    if (file_waiter) {
      files_[file].waiters--;
      EraseIfDoneLocked(file);
    }
    if (stopping_) {
      give_back();
      return Fail(Code::kUnavailable, "the volume is being unmounted");
    }
    if (timed_out && memory_short) {
      return Fail(Code::kTimeout, "write-back of " + path +
                                      ": no room in the agent's memory budget (memoryBudgetBytes) "
                                      "for " +
                                      Seconds(config_.wait_bound));
    }
    if (timed_out) {
      give_back();
      return Fail(Code::kTimeout, "write-back of " + path + ": the hub took no held write for " +
                                      Seconds(config_.wait_bound) + " (" +
                                      std::to_string(held_bytes_) + " bytes waiting)");
    }
    // An error that came while this write waited belongs to the caller now.
    if (auto e = TakeErrorLocked(file)) {
      give_back();
      return std::unexpected(*e);
    }
    p->file = file;
    p->who = who;
    p->path = path;
    p->offset = offset;
    p->data = std::make_shared<const std::vector<char>>(data, data + size);
    p->first_sent = SteadyClock::now();
    p->backoff = config_.first_backoff;
    p->id = next_id_++;
    auto& state = files_[file];
    HoldLocked(state, p);
    state.who = who;
    state.path = path;
  }
  Send(std::move(p));
  return Ok();
}

void WriteBack::Send(std::shared_ptr<Piece> p) {
  auto done = [this, p](Result<RemoteFs::UnstableWrite> r) { Done(p, std::move(r)); };
  if (config_.unstable) {
    remote_.WriteUnstableAsAsync(p->who, p->path, p->offset, p->data, std::move(done));
  } else {
    remote_.WriteStableAsAsync(p->who, p->path, p->offset, p->data, std::move(done));
  }
}

void WriteBack::HoldLocked(FileState& state, const std::shared_ptr<Piece>& p) {
  state.held.emplace(p->id, p);
  state.sending++;
  held_bytes_ += p->data->size();
}

void WriteBack::AnsweredLocked(FileState& state, Piece& p, std::optional<uint64_t> verifier) {
  p.answered = true;
  p.verifier = verifier;
  state.sending--;
  state.uncovered += p.data->size();
}

void WriteBack::SendAgainLocked(FileState& state, Piece& p) {
  // Only a piece its COMMIT found lost is sent again: it is in no other COMMIT.
  p.answered = false;
  p.in_commit = false;
  p.verifier.reset();
  p.first_sent = SteadyClock::now();
  p.backoff = config_.first_backoff;
  p.gone_since.reset();
  state.sending++;
}

void WriteBack::ReleaseLocked(FileState& state, const std::shared_ptr<Piece>& p) {
  if (!p->answered) {
    state.sending--;
  } else if (!p->in_commit) {
    state.uncovered -= p->data->size();
  }
  state.held.erase(p->id);
  held_bytes_ -= p->data->size();
  ReleaseMemory(p->data->size());
  if (config_.on_released) config_.on_released(p->file);
}

bool WriteBack::TakeMemory(size_t bytes) {
  return config_.memory == nullptr ||
         config_.memory->TryAcquire(MemoryBudget::Use::kWriteBack, bytes);
}

bool WriteBack::WaitForMemory(size_t bytes, SteadyClock::time_point until) {
  return config_.memory == nullptr ||
         config_.memory->AcquireWait(MemoryBudget::Use::kWriteBack, bytes, until);
}

void WriteBack::ReleaseMemory(size_t bytes) {
  if (config_.memory != nullptr) config_.memory->Release(MemoryBudget::Use::kWriteBack, bytes);
}

void WriteBack::EraseIfDoneLocked(uint64_t file) {
  auto it = files_.find(file);
  if (it == files_.end()) return;
  const auto& s = it->second;
  if (s.held.empty() && !s.error && s.waiters == 0 && s.commits == 0) files_.erase(it);
}

bool WriteBack::WorthAnotherTry(const Error& e, const std::string& path,
                                SteadyClock::time_point first_sent,
                                std::optional<SteadyClock::time_point>& gone_since) const {
  const auto now = SteadyClock::now();
  if (stopping_ || now - first_sent >= config_.retry_bound) return false;
  if (Transient(e)) {
    gone_since.reset();
    return true;
  }
  if (e.code() != Code::kNotFound) return false;
  if (!gone_since) {
    gone_since = now;
    log::Warn(
        "write-back: the hub says the file is not there; asking again (a restarting hub "
        "answers so for files it has)",
        {{"path", path}, {"for", Seconds(config_.gone_bound)}, {"error", e.message()}});
  }
  return now - *gone_since < config_.gone_bound;
}

void WriteBack::Done(const std::shared_ptr<Piece>& p, Result<RemoteFs::UnstableWrite> r) {
  std::vector<Commit> commits;
  {
    MutexLock lock(mu_);
    if (!r && WorthAnotherTry(r.error(), p->path, p->first_sent, p->gone_since)) {
      retries_.emplace_back(SteadyClock::now() + p->backoff, p);
      p->backoff = std::min<std::chrono::milliseconds>(p->backoff * 2, std::chrono::seconds(5));
      changed_.notify_all();
      return;
    }
    auto& state = files_[p->file];
    if (!r) {
      if (!state.error) state.error = r.error().Wrap("write-back of " + p->path);
      log::Warn("write-back failed", {{"path", p->path},
                                      {"offset", std::to_string(p->offset)},
                                      {"error", r.error().message()}});
      ReleaseLocked(state, p);
    } else if (r->count != p->data->size()) {
      if (!state.error) {
        state.error = Error(Code::kIo, "write-back of " + p->path + ": the hub took " +
                                           std::to_string(r->count) + " of " +
                                           std::to_string(p->data->size()) + " bytes");
      }
      ReleaseLocked(state, p);
    } else if (r->stable) {
      ReleaseLocked(state, p);
    } else {
      AnsweredLocked(state, *p, r->verifier);
    }
    commits = DueCommitsLocked(p->file);
    EraseIfDoneLocked(p->file);
    changed_.notify_all();
  }
  SendCommits(std::move(commits));
}

std::optional<WriteBack::Commit> WriteBack::DueCommitLocked(uint64_t file, FileState& state) {
  if (state.commits >= config_.commits_in_flight || state.uncovered == 0) return std::nullopt;
  // Someone waits for the file, the volume or room: once the file's WRITEs are all answered
  // (one COMMIT then covers them); waiting for room, at once, in pieces of a quarter of
  // commit_bytes while another COMMIT is out (not one COMMIT per reply).
  bool waited_for = state.waiters > 0 || all_waiters_ > 0 || stopping_;
  bool room_wanted =
      room_waiters_ > 0 && (state.commits == 0 || state.uncovered >= config_.commit_bytes / 4);
  bool due =
      state.uncovered >= config_.commit_bytes || room_wanted || (waited_for && state.sending == 0);
  if (!due) return std::nullopt;
  Commit c{.file = file,
           .who = state.who,
           .path = state.path,
           .ids = {},
           .first_sent = SteadyClock::now(),
           .backoff = config_.first_backoff,
           .gone_since = std::nullopt};
  for (const auto& [id, p] : state.held) {
    if (!p->answered || p->in_commit) continue;
    p->in_commit = true;
    c.ids.push_back(id);
  }
  state.uncovered = 0;
  state.commits++;
  return c;
}

std::vector<WriteBack::Commit> WriteBack::DueCommitsLocked(std::optional<uint64_t> file) {
  std::vector<Commit> out;
  if (!config_.unstable) return out;
  if (file) {
    auto it = files_.find(*file);
    if (it != files_.end()) {
      if (auto c = DueCommitLocked(*file, it->second)) out.push_back(std::move(*c));
    }
    return out;
  }
  for (auto& [f, state] : files_) {
    if (auto c = DueCommitLocked(f, state)) out.push_back(std::move(*c));
  }
  return out;
}

bool WriteBack::SendDueCommitsLocked(std::optional<uint64_t> file) {
  auto commits = DueCommitsLocked(file);
  if (commits.empty()) return false;
  // A COMMIT's reply may come on this thread (CommitDone takes the lock).
  mu_.unlock();
  SendCommits(std::move(commits));
  mu_.lock();
  return true;
}

void WriteBack::SendCommits(std::vector<Commit> commits) {
  for (auto& c : commits) {
    auto shared = std::make_shared<Commit>(std::move(c));
    remote_.CommitAsAsync(shared->who, shared->path, [this, shared](Result<uint64_t> r) {
      CommitDone(std::move(*shared), std::move(r));
    });
  }
}

void WriteBack::CommitDone(Commit c, Result<uint64_t> r) {
  std::vector<std::shared_ptr<Piece>> again;
  std::vector<Commit> commits;
  {
    MutexLock lock(mu_);
    auto& state = files_[c.file];
    if (!r && WorthAnotherTry(r.error(), c.path, c.first_sent, c.gone_since)) {
      auto due = SteadyClock::now() + c.backoff;
      c.backoff = std::min<std::chrono::milliseconds>(c.backoff * 2, std::chrono::seconds(5));
      commit_retries_.emplace_back(due, std::move(c));
      changed_.notify_all();
      return;
    }
    state.commits--;
    for (uint64_t id : c.ids) {
      auto it = state.held.find(id);
      if (it == state.held.end()) continue;
      auto p = it->second;
      if (!r) {
        // The COMMIT failed for good: these bytes may not be on the hub's disk.
        ReleaseLocked(state, p);
        continue;
      }
      if (p->verifier && *p->verifier == *r) {
        ReleaseLocked(state, p);
        continue;
      }
      // Answered by an earlier instance of the hub: lost with it, sent again.
      if (stopping_) {
        if (!state.error) {
          state.error = Error(Code::kUnavailable, "write-back of " + p->path +
                                                      ": the hub restarted and the volume "
                                                      "was unmounted before it took it again");
        }
        ReleaseLocked(state, p);
        continue;
      }
      SendAgainLocked(state, *p);
      again.push_back(p);
    }
    if (!r) {
      if (!state.error) state.error = r.error().Wrap("write-back of " + c.path + " (COMMIT)");
      log::Warn("write-back COMMIT failed", {{"path", c.path}, {"error", r.error().message()}});
    } else if (!again.empty()) {
      log::Warn("write-back: the hub's write verifier changed (it restarted); sending again",
                {{"path", c.path}, {"writes", std::to_string(again.size())}});
    }
    commits = DueCommitsLocked(c.file);
    EraseIfDoneLocked(c.file);
    changed_.notify_all();
  }
  for (auto& p : again) Send(p);
  SendCommits(std::move(commits));
}

void WriteBack::RetryLoop() {
  MutexLock lock(mu_);
  while (true) {
    if (stopping_) {
      // Retries are not sent once the volume ends; their writes fail.
      for (auto& [due, p] : retries_) {
        auto& state = files_[p->file];
        if (!state.error)
          state.error = Error(Code::kUnavailable, "unmounted before the hub took it");
        ReleaseLocked(state, p);
      }
      retries_.clear();
      for (auto& [due, c] : commit_retries_) {
        auto& state = files_[c.file];
        if (!state.error)
          state.error = Error(Code::kUnavailable, "unmounted before the hub committed it");
        state.commits--;
        for (uint64_t id : c.ids) {
          if (auto it = state.held.find(id); it != state.held.end()) {
            auto p = it->second;
            ReleaseLocked(state, p);
          }
        }
      }
      commit_retries_.clear();
      // Pieces answered after a dropped COMMIT was started still need one.
      SendDueCommitsLocked(std::nullopt);
      changed_.notify_all();
      if (held_bytes_ == 0) return;
      changed_.wait_until(lock, SteadyClock::now() + std::chrono::milliseconds(100));
      continue;
    }
    if (retries_.empty() && commit_retries_.empty()) {
      changed_.wait(lock);
      continue;
    }
    // Due times are in order of arrival, close enough: each waits at least its backoff.
    auto due = SteadyClock::time_point::max();
    if (!retries_.empty()) due = retries_.front().first;
    if (!commit_retries_.empty()) due = std::min(due, commit_retries_.front().first);
    if (SteadyClock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    if (!retries_.empty() && retries_.front().first <= SteadyClock::now()) {
      auto p = retries_.front().second;
      retries_.pop_front();
      lock.unlock();
      Send(p);
      lock.lock();
      continue;
    }
    auto c = std::move(commit_retries_.front().second);
    commit_retries_.pop_front();
    lock.unlock();
    SendCommits({std::move(c)});
    lock.lock();
  }
}

Status WriteBack::WaitFileIdle(uint64_t file, const char* what) {
  MutexLock lock(mu_);
  auto deadline = SteadyClock::now() + config_.wait_bound;
  auto idle = [&]() REQUIRES(mu_) {
    auto it = files_.find(file);
    return it == files_.end() || it->second.held.empty();
  };
  if (idle()) return Ok();
  files_[file].waiters++;
  bool timed_out = false;
  while (!idle()) {
    if (SteadyClock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (SendDueCommitsLocked(file)) continue;
    changed_.wait_until(lock, deadline);
  }
  files_[file].waiters--;
  EraseIfDoneLocked(file);
  if (timed_out) {
    return Fail(Code::kTimeout, std::string(what) + ": the hub took no held write for " +
                                    Seconds(config_.wait_bound));
  }
  return Ok();
}

Status WriteBack::Drain(uint64_t file) {
  SPOKE_RETURN_IF_ERROR(WaitFileIdle(file, "fsync/close"));
  MutexLock lock(mu_);
  if (auto e = TakeErrorLocked(file)) return std::unexpected(*e);
  return Ok();
}

Status WriteBack::WaitIdle(uint64_t file) {
  return WaitFileIdle(file, "waiting for earlier writes of the file");
}

Status WriteBack::WaitAllIdle() {
  MutexLock lock(mu_);
  auto deadline = SteadyClock::now() + config_.wait_bound;
  all_waiters_++;
  // Every file's COMMIT is due once its WRITEs are answered: those already are now, the
  // others as their replies come.
  SendDueCommitsLocked(std::nullopt);
  bool timed_out = false;
  while (held_bytes_ != 0) {
    if (SteadyClock::now() >= deadline) {
      timed_out = true;
      break;
    }
    changed_.wait_until(lock, deadline);
  }
  all_waiters_--;
  if (timed_out) {
    return Fail(Code::kTimeout, "waiting for the volume's held writes: the hub took none for " +
                                    Seconds(config_.wait_bound));
  }
  return Ok();
}

std::optional<Error> WriteBack::TakeErrorLocked(uint64_t file) {
  auto it = files_.find(file);
  if (it == files_.end() || !it->second.error) return std::nullopt;
  auto e = std::move(it->second.error);
  it->second.error.reset();
  EraseIfDoneLocked(file);
  return e;
}

std::optional<Error> WriteBack::TakeError(uint64_t file) {
  MutexLock lock(mu_);
  return TakeErrorLocked(file);
}

bool WriteBack::Holds(uint64_t file) const {
  MutexLock lock(mu_);
  auto it = files_.find(file);
  return it != files_.end() && !it->second.held.empty();
}

size_t WriteBack::held_bytes() const {
  MutexLock lock(mu_);
  return held_bytes_;
}

}  // namespace spoke::agent
