#include "cache-agent/fs/listing_flights.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/interrupt.h"

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;

// A listing the test lets go when it says so; the run's own interrupt ends it early, as a hub
// call under an interrupted request does.
struct HeldListing {
  Mutex mu;
  CondVar cv;
  bool release GUARDED_BY(mu) = false;
  std::atomic<int> started{0};

  Status Run() {
    started++;
    Interrupt::Waker waker(InterruptScope::Current(), [this] {
      MutexLock l(mu);
      cv.notify_all();
    });
    MutexLock lock(mu);
    cv.wait(lock, [&]() REQUIRES(mu) { return release || waker.fired(); });
    if (!release) return std::unexpected(Interrupted("a held listing"));
    return Ok();
  }
  void Release() {
    MutexLock lock(mu);
    release = true;
    cv.notify_all();
  }
};

void WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 5000 && !cond(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(cond());
}

// The caller that runs a listing is interrupted: it gets kInterrupted, and a caller that
// joined its run is not handed that answer: it runs a listing of its own.
TEST(ListingFlights, ARunItsCallerGaveUpIsNotTheAnswerOfTheOthers) {
  ListingFlights flights;
  HeldListing listing;
  Interrupt interrupt;
  Status first, second;
  std::thread runner([&] {
    InterruptScope scope(&interrupt);
    first = flights.Run(1, false, [&] { return listing.Run(); });
  });
  WaitFor([&] { return listing.started.load() == 1; });
  std::thread joiner([&] { second = flights.Run(1, false, [&] { return listing.Run(); }); });
  std::this_thread::sleep_for(20ms);  // the joiner waits on the first run
  EXPECT_EQ(listing.started.load(), 1);
  interrupt.Fire();
  runner.join();
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code(), Code::kInterrupted);
  WaitFor([&] { return listing.started.load() == 2; });
  listing.Release();
  joiner.join();
  EXPECT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(flights.runs(), 2u);
}

// A caller waiting on another's run stops waiting when interrupted; the run goes on and its
// own caller gets its answer.
TEST(ListingFlights, AnInterruptedJoinerStopsWaitingAndTheRunGoesOn) {
  ListingFlights flights;
  HeldListing listing;
  Interrupt interrupt;
  Status first, second;
  std::thread runner([&] { first = flights.Run(1, false, [&] { return listing.Run(); }); });
  WaitFor([&] { return listing.started.load() == 1; });
  std::thread joiner([&] {
    InterruptScope scope(&interrupt);
    second = flights.Run(1, false, [&] { return listing.Run(); });
  });
  std::this_thread::sleep_for(20ms);
  interrupt.Fire();
  joiner.join();
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), Code::kInterrupted);
  listing.Release();
  runner.join();
  EXPECT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(flights.runs(), 1u);
  EXPECT_EQ(listing.started.load(), 1);
}

}  // namespace
}  // namespace spoke::agent
