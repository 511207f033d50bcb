// Clang thread-safety annotations and the annotated mutex every lock-protected member uses.
//
// clang checks the annotations at compile time with -Wthread-safety (the clang build turns it
// on: SPOKE_THREAD_SAFETY / SPOKE_TSAN in the top CMakeLists.txt); on GCC they expand to
// nothing. libstdc++'s std::mutex and std::lock_guard carry no annotations, so a member
// guarded by a std::mutex is not checked: use spoke::Mutex, spoke::MutexLock and
// spoke::CondVar instead.
//
//   class Counter {
//    public:
//     void Add(int n) EXCLUDES(mu_) {
//       spoke::MutexLock lock(mu_);
//       AddLocked(n);
//     }
//    private:
//     void AddLocked(int n) REQUIRES(mu_) { total_ += n; }
//     spoke::Mutex mu_;
//     int64_t total_ GUARDED_BY(mu_) = 0;
//   };
//
// Waiting on a condition: spoke::CondVar takes the MutexLock. The analysis sees a predicate
// lambda as a function of its own, so a predicate that reads guarded members says so:
//   cv_.wait(lock, [&]() REQUIRES(mu_) { return !queue_.empty(); });
//
// abseil (pulled in by gRPC) defines some of these names too (GUARDED_BY, PT_GUARDED_BY,
// ACQUIRED_*, NO_THREAD_SAFETY_ANALYSIS) with the same meaning; whichever header comes first
// defines them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SPOKE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SPOKE_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (spoke::Mutex).
#ifndef CAPABILITY
#define CAPABILITY(name) SPOKE_THREAD_ANNOTATION(capability(name))
#endif
// An RAII type that holds a lock for its lifetime (spoke::MutexLock).
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY SPOKE_THREAD_ANNOTATION(scoped_lockable)
#endif
// A member read or written only with the lock held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) SPOKE_THREAD_ANNOTATION(guarded_by(x))
#endif
// A pointer (or smart pointer) whose pointee is accessed only with the lock held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) SPOKE_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
// Lock order: this lock is taken before / after the named ones.
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) SPOKE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) SPOKE_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
// The caller holds the lock (the *Locked() helpers).
#ifndef REQUIRES
#define REQUIRES(...) SPOKE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
// The caller must not hold the lock (the function takes it).
#ifndef EXCLUDES
#define EXCLUDES(...) SPOKE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
// The function takes / releases the lock and returns with it held / not held.
#ifndef ACQUIRE
#define ACQUIRE(...) SPOKE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) SPOKE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) SPOKE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
// A run-time check that the lock is held; the analysis trusts it from there on.
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) SPOKE_THREAD_ANNOTATION(assert_capability(x))
#endif
// The function returns (a reference to) the named lock.
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) SPOKE_THREAD_ANNOTATION(lock_returned(x))
#endif
// Opts a function out of the analysis. Each use says why in a comment.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS SPOKE_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace spoke {

// std::mutex with annotations. lock()/unlock()/try_lock() keep it a standard Lockable, so
// std::scoped_lock over two of them still works (unchecked: prefer MutexLock).
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis the lock is held where it cannot see it (a callback run under the
  // lock by code the analysis does not follow). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // The escape to the unannotated mutex, for code that needs a std::mutex itself (a
  // std::condition_variable outside CondVar). Whatever is done through it is unchecked.
  std::mutex& native_handle() RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, like std::unique_lock: unlock()/lock() in
// between release and retake it (e.g. around I/O), and the destructor releases it only if
// held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  bool owns_lock() const { return held_; }
  Mutex& mutex() const { return mu_; }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// std::condition_variable for a MutexLock: the same wait/notify names, so call sites read as
// with std::unique_lock. The lock is held again when a wait returns, as the analysis assumes.
class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  // The waits hand the held std::mutex to std::condition_variable and take it back; the
  // analysis cannot follow that hand-over, and the lock is held on entry and on return.
  void wait(MutexLock& lock) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    cv_.wait(native);
    native.release();
  }
  template <typename Predicate>
  void wait(MutexLock& lock, Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    cv_.wait(native, std::move(pred));
    native.release();
  }
  template <typename Clock, typename Duration>
  std::cv_status wait_until(MutexLock& lock,
                            const std::chrono::time_point<Clock, Duration>& deadline)
      NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    std::cv_status status = cv_.wait_until(native, deadline);
    native.release();
    return status;
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                  Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    bool satisfied = cv_.wait_until(native, deadline, std::move(pred));
    native.release();
    return satisfied;
  }
  template <typename Rep, typename Period>
  std::cv_status wait_for(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout)
      NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    std::cv_status status = cv_.wait_for(native, timeout);
    native.release();
    return status;
  }
  template <typename Rep, typename Period, typename Predicate>
  bool wait_for(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout,
                Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native(lock.mutex().native_handle(), std::adopt_lock);
    bool satisfied = cv_.wait_for(native, timeout, std::move(pred));
    native.release();
    return satisfied;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace spoke
