// Interrupt: the caller of a request gave up on it. A process that gets a signal while it
// waits on the mount makes the kernel send FUSE INTERRUPT; the FUSE adapter fires the
// request's Interrupt, and every wait for the hub on the thread serving the request (an
// InterruptScope names it) ends at once with kInterrupted (EINTR to the process) instead of
// at its hub bound. What was waited for goes on to its own bound: a block being fetched is
// still cached, a listing still kept.
//
// Only requests that change nothing on the hub install one (lookups, attributes, listings,
// reads): a change already sent may still be made on the hub, and answering EINTR would tell
// the process that a change it made was not.
//
// A wait that can be interrupted, on its own mutex `mu` and condition `cv`:
//
//   Interrupt::Waker waker(InterruptScope::Current(), [&] { MutexLock l(mu); cv.notify_all(); });
//   MutexLock lock(mu);
//   cv.wait_until(lock, deadline, [&] { return done || waker.fired(); });
//
// The waker is made before the lock is taken and outlives it (Fire calls it holding the
// Interrupt's own lock, which it then takes after `mu`'s release, never under it).
#pragma once

#include <atomic>
#include <functional>
#include <string_view>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace spoke {

class Interrupt {
 public:
  Interrupt() = default;
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // Marks it fired and wakes the waiter registered now, if any. Any thread; once is enough.
  void Fire() EXCLUDES(mu_);
  bool fired() const { return fired_.load(std::memory_order_acquire); }

  // While it lives, Fire() calls `wake` (on the firing thread). A null interrupt: nothing to
  // register, never fired.
  class Waker {
   public:
    Waker(Interrupt* interrupt, std::function<void()> wake);
    ~Waker();
    Waker(const Waker&) = delete;
    Waker& operator=(const Waker&) = delete;
    bool fired() const { return interrupt_ != nullptr && interrupt_->fired(); }

   private:
    Interrupt* interrupt_;
    std::function<void()> wake_;
  };

 private:
  std::atomic<bool> fired_{false};
  Mutex mu_;
  const std::function<void()>* wake_ GUARDED_BY(mu_) = nullptr;  // one waiter at a time
};

// Names the interrupt of the request this thread serves, for its lifetime (restoring the one
// before). A null interrupt shields what runs inside from an outer one.
class InterruptScope {
 public:
  explicit InterruptScope(Interrupt* interrupt);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  // The current thread's interrupt, or null.
  static Interrupt* Current();

 private:
  Interrupt* previous_;
};

// kInterrupted: "the caller gave up waiting for <what>".
Error Interrupted(std::string_view what);

}  // namespace spoke
