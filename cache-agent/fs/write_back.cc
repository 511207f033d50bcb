#include "cache-agent/fs/write_back.h"

#include <algorithm>

#include "common/log.h"

namespace spoke::agent {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Seconds(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000) + " s"; }

// The network's failures: the hub may be restarting, and a WRITE at an offset may be made again.
bool Transient(const Error& e) {
  return e.code() == Code::kTimeout || e.code() == Code::kUnavailable;
}

}  // namespace

WriteBack::WriteBack(RemoteFs& remote, const Config& config) : remote_(remote), config_(config) {
  retry_thread_ = std::thread([this] { RetryLoop(); });
}

WriteBack::~WriteBack() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.notify_all();
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
    bool room = changed_.wait_until(lock, deadline, [&]() REQUIRES(mu_) {
      bool fits = held_bytes_ == 0 || held_bytes_ + size <= config_.budget_bytes;
      return stopping_ || (fits && !OverlapsLocked(file, offset, size));
    });
    if (stopping_) return Fail(Code::kUnavailable, "the volume is being unmounted");
    if (!room) {
      return Fail(Code::kTimeout, "write-back of " + path + ": the hub took no held write for " +
                                      Seconds(config_.wait_bound) + " (" +
                                      std::to_string(held_bytes_) + " bytes waiting)");
    }
    // An error that came while this write waited belongs to the caller now.
    if (auto e = TakeErrorLocked(file)) return std::unexpected(*e);
    p->file = file;
    p->who = who;
    p->path = path;
    p->offset = offset;
    p->data = std::make_shared<const std::vector<char>>(data, data + size);
    p->first_sent = SteadyClock::now();
    p->backoff = config_.first_backoff;
    p->id = next_id_++;
    files_[file].held.emplace(p->id, p);
    held_bytes_ += size;
  }
  Send(std::move(p));
  return Ok();
}

void WriteBack::Send(std::shared_ptr<Piece> p) {
  remote_.WriteAsAsync(p->who, p->path, p->offset, p->data,
                       [this, p](Result<size_t> r) { Done(p, std::move(r)); });
}

void WriteBack::Done(const std::shared_ptr<Piece>& p, Result<size_t> r) {
  MutexLock lock(mu_);
  if (!r && Transient(r.error()) && !stopping_ &&
      SteadyClock::now() - p->first_sent < config_.retry_bound) {
    retries_.emplace_back(SteadyClock::now() + p->backoff, p);
    p->backoff = std::min<std::chrono::milliseconds>(p->backoff * 2, std::chrono::seconds(5));
    changed_.notify_all();
    return;
  }
  auto& state = files_[p->file];
  if (!r) {
    if (!state.error) state.error = r.error().Wrap("write-back of " + p->path);
    log::Warn(
        "write-back failed",
        {{"path", p->path}, {"offset", std::to_string(p->offset)}, {"error", r.error().message()}});
  } else if (*r != p->data->size()) {
    if (!state.error) {
      state.error =
          Error(Code::kIo, "write-back of " + p->path + ": the hub took " + std::to_string(*r) +
                               " of " + std::to_string(p->data->size()) + " bytes");
    }
  }
  state.held.erase(p->id);
  held_bytes_ -= p->data->size();
  if (state.held.empty() && !state.error) files_.erase(p->file);
  changed_.notify_all();
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
        state.held.erase(p->id);
        held_bytes_ -= p->data->size();
      }
      retries_.clear();
      changed_.notify_all();
      if (held_bytes_ == 0) return;
      changed_.wait_until(lock, SteadyClock::now() + std::chrono::milliseconds(100));
      continue;
    }
    if (retries_.empty()) {
      changed_.wait(lock);
      continue;
    }
    // Due times are in order of arrival, close enough: each waits at least its backoff.
    auto due = retries_.front().first;
    if (SteadyClock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    auto p = retries_.front().second;
    retries_.pop_front();
    lock.unlock();
    Send(p);
    lock.lock();
  }
}

Status WriteBack::WaitLocked(MutexLock& lock, uint64_t file, const char* what) {
  auto deadline = SteadyClock::now() + config_.wait_bound;
  bool idle = changed_.wait_until(lock, deadline, [&]() REQUIRES(mu_) {
    auto it = files_.find(file);
    return it == files_.end() || it->second.held.empty();
  });
  if (!idle) {
    return Fail(Code::kTimeout, std::string(what) + ": the hub took no held write for " +
                                    Seconds(config_.wait_bound));
  }
  return Ok();
}

Status WriteBack::Drain(uint64_t file) {
  MutexLock lock(mu_);
  SPOKE_RETURN_IF_ERROR(WaitLocked(lock, file, "fsync/close"));
  if (auto e = TakeErrorLocked(file)) return std::unexpected(*e);
  return Ok();
}

Status WriteBack::WaitIdle(uint64_t file) {
  MutexLock lock(mu_);
  return WaitLocked(lock, file, "waiting for earlier writes of the file");
}

Status WriteBack::WaitAllIdle() {
  MutexLock lock(mu_);
  auto deadline = SteadyClock::now() + config_.wait_bound;
  bool idle = changed_.wait_until(lock, deadline, [&]() REQUIRES(mu_) { return held_bytes_ == 0; });
  if (!idle) {
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
  if (it->second.held.empty()) files_.erase(it);
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
