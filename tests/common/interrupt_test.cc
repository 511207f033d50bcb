#include "common/interrupt.h"

#include <gtest/gtest.h>

#include <thread>

namespace spoke {
namespace {

using namespace std::chrono_literals;

TEST(Interrupt, AWaitOnItsOwnConditionEndsWhenFired) {
  Interrupt interrupt;
  Mutex mu;
  CondVar cv;
  std::thread firer([&] {
    std::this_thread::sleep_for(50ms);
    interrupt.Fire();
  });
  bool done = false;  // never set: only the interrupt ends the wait
  {
    Interrupt::Waker waker(&interrupt, [&] {
      MutexLock l(mu);
      cv.notify_all();
    });
    MutexLock lock(mu);
    // A bound far past the test's own: the wait ends by the wake, not by the bound.
    bool woke = cv.wait_until(lock, std::chrono::steady_clock::now() + 600s,
                              [&] { return done || waker.fired(); });
    EXPECT_TRUE(woke);
    EXPECT_TRUE(waker.fired());
  }
  firer.join();
}

TEST(Interrupt, AlreadyFiredIsSeenWithoutAWake) {
  Interrupt interrupt;
  interrupt.Fire();
  int wakes = 0;
  Interrupt::Waker waker(&interrupt, [&] { wakes++; });
  EXPECT_TRUE(waker.fired());
  EXPECT_EQ(wakes, 0);
  interrupt.Fire();  // firing again wakes the waiter registered now
  EXPECT_EQ(wakes, 1);
}

TEST(Interrupt, NoWakeAfterTheWakerIsGone) {
  Interrupt interrupt;
  int wakes = 0;
  {
    Interrupt::Waker waker(&interrupt, [&] { wakes++; });
  }
  interrupt.Fire();
  EXPECT_EQ(wakes, 0);
  Interrupt::Waker none(nullptr, [&] { wakes++; });
  EXPECT_FALSE(none.fired());
}

TEST(InterruptScope, NamesTheThreadsInterruptAndRestoresTheOuterOne) {
  EXPECT_EQ(InterruptScope::Current(), nullptr);
  Interrupt outer, inner;
  {
    InterruptScope a(&outer);
    EXPECT_EQ(InterruptScope::Current(), &outer);
    {
      InterruptScope shield(nullptr);
      EXPECT_EQ(InterruptScope::Current(), nullptr);
      InterruptScope b(&inner);
      EXPECT_EQ(InterruptScope::Current(), &inner);
    }
    EXPECT_EQ(InterruptScope::Current(), &outer);
    std::thread other([] { EXPECT_EQ(InterruptScope::Current(), nullptr); });
    other.join();
  }
  EXPECT_EQ(InterruptScope::Current(), nullptr);
}

TEST(Interrupt, InterruptedIsEintrAtTheFuseEdge) {
  Error e = Interrupted("GETATTR of a from the hub");
  EXPECT_EQ(e.code(), Code::kInterrupted);
  EXPECT_EQ(e.ToErrno(), EINTR);
  EXPECT_EQ(e.ToString(), "interrupted: the caller gave up waiting for GETATTR of a from the hub");
}

}  // namespace
}  // namespace spoke
