#include "cache-agent/fs/listing_flights.h"

#include "common/interrupt.h"

namespace spoke::agent {

Status ListingFlights::Run(uint64_t ino, bool started_after_call,
                           const std::function<Status()>& list) {
  // A caller that gives up (FUSE INTERRUPT) stops waiting for another's run.
  Interrupt::Waker waker(InterruptScope::Current(), [this] {
    MutexLock lock(mu_);
    cv_.notify_all();
  });
  MutexLock lock(mu_);
  const uint64_t arrived = next_seq_;  // runs numbered from here on started after this call
  // The directory's slot stays while a caller is in here, so that a caller that wakes late
  // still finds the run it may take (a finished one is not looked for in vain, then repeated).
  Slot& slot = slots_[ino];
  slot.callers++;
  Status result;
  while (true) {
    std::shared_ptr<Flight> f = slot.latest;
    // A run its own caller gave up is no answer for the others: they run their own.
    const bool usable = f != nullptr && !f->interrupted;
    if (usable && (!started_after_call || f->seq >= arrived)) {
      cv_.wait(lock, [&f, &waker]() { return f->done || waker.fired(); });
      if (!f->done) {
        result = std::unexpected(Interrupted("a listing of the directory"));
        break;
      }
      if (f->interrupted) continue;
      result = f->status;
      break;
    }
    if (f != nullptr && !f->done) {
      // Began before this call: wait for it, then take or start a newer one.
      cv_.wait(lock, [&f, &waker]() { return f->done || waker.fired(); });
      if (!f->done) {
        result = std::unexpected(Interrupted("a listing of the directory"));
        break;
      }
      continue;
    }
    f = std::make_shared<Flight>();
    f->seq = next_seq_++;
    slot.latest = f;
    lock.unlock();
    Status status = list();
    lock.lock();
    f->status = status;
    f->interrupted = !status && status.error().code() == Code::kInterrupted;
    f->done = true;
    cv_.notify_all();
    result = std::move(status);
    break;
  }
  if (--slot.callers == 0) slots_.erase(ino);
  return result;
}

uint64_t ListingFlights::runs() const {
  MutexLock lock(mu_);
  return next_seq_;
}

}  // namespace spoke::agent
