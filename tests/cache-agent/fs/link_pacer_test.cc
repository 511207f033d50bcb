// LinkPacer over a model of one WAN link: requests cross in rtt / 2, and the replies leave the
// hub one after the other at `rate` bytes/s (a FIFO queue: a reply sent behind a backlog
// waits for it) and arrive rtt / 2 later. Background reads of 128 KiB always wait for the
// window (held back), and are sent as soon as it has room. The model is what the pacer
// assumes, so these tests check its arithmetic and bounds, not a network (the fetcher over
// the capped proxy does:
// LibnfsRemoteHub.BackgroundReadsOnASlowLinkLeaveReadersWithinTheHubTimeout).
#include "cache-agent/fs/link_pacer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using Duration = LinkPacer::Duration;
using TimePoint = LinkPacer::TimePoint;

constexpr uint64_t kMiB = 1ull << 20;

struct Link {
  double rate;   // bytes per second
  Duration rtt;  // with no queue
};

LinkPacer::Config Paced() {
  LinkPacer::Config c;
  c.target_queue = 200ms;
  c.min_window = 1 * kMiB;
  c.initial_window = 16 * kMiB;
  c.max_window = 512 * kMiB;
  return c;
}

// Runs the link for `seconds` from `now`; returns the queue delay of the last reply (s).
double RunLink(LinkPacer& pacer, const Link& link, TimePoint& now, double seconds) {
  constexpr uint64_t kRead = 128 << 10;
  const Duration half_rtt = link.rtt / 2;
  const Duration per_read = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(static_cast<double>(kRead) / link.rate));
  const TimePoint end =
      now + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
  std::deque<std::pair<TimePoint, TimePoint>> in_flight;  // (sent, arrives), in send order
  TimePoint link_free = now;
  double queue_s = 0;
  auto send = [&] {
    while (in_flight.size() * kRead < pacer.window()) {
      const TimePoint start = std::max(now + half_rtt, link_free);
      queue_s = std::chrono::duration<double>(start - (now + half_rtt)).count();
      link_free = start + per_read;
      in_flight.emplace_back(now, link_free + half_rtt);
    }
    pacer.OnHeldBack(now);
  };
  send();
  while (now < end) {
    auto [sent, arrives] = in_flight.front();
    in_flight.pop_front();
    now = arrives;
    pacer.OnCompleted(kRead, arrives - sent, now);
    send();
  }
  return queue_s;
}

TEST(LinkPacer, OffLetsTheWholeBoundGoAndLearnsNothing) {
  LinkPacer::Config c = Paced();
  c.target_queue = 0ms;
  TimePoint now{};
  LinkPacer pacer(c, now);
  EXPECT_FALSE(pacer.enabled());
  EXPECT_EQ(pacer.window(), 512 * kMiB);
  RunLink(pacer, Link{7.2e6, 60ms}, now, 5);
  EXPECT_EQ(pacer.window(), 512 * kMiB);
}

TEST(LinkPacer, OnASlowLinkTheQueueSettlesAtTheTarget) {
  // 7.2 MB/s, 60 ms: the 16 MiB first window is 2.3 s of queue, the fetcher's 192 MiB 28 s.
  TimePoint now{};
  LinkPacer pacer(Paced(), now);
  const Link link{7.2e6, 60ms};
  const double queue = RunLink(pacer, link, now, 10);
  // rate x (lowest latency + target) = 7.2 MB/s x 0.278 s = 2.0 MB in flight, 0.2 s of it
  // queued.
  EXPECT_NEAR(static_cast<double>(pacer.window()), 7.2e6 * 0.278, 7.2e6 * 0.278 * 0.1);
  EXPECT_NEAR(queue, 0.2, 0.03);
  // The lowest latency is a round trip plus one read's own 18 ms on the link.
  EXPECT_NEAR(std::chrono::duration<double>(pacer.base_latency()).count(), 0.078, 0.002);
}

TEST(LinkPacer, OnAFastLinkTheWindowGrowsUntilItFillsTheLink) {
  TimePoint now{};
  LinkPacer pacer(Paced(), now);
  now += 10s;                  // idle before the first read (the mount): not a slow link
  const Link link{1e9, 60ms};  // 60 MB per round trip: the 16 MiB window cannot fill it
  // Intervals are two round trips (120 ms), growing at most 4x each: the first, from the
  // first read's send, holds one round trip of replies (2.2x); then 4x.
  RunLink(pacer, link, now, 0.125);
  EXPECT_GE(pacer.window(), 32 * kMiB);
  RunLink(pacer, link, now, 0.25);
  EXPECT_GE(pacer.window(), 128 * kMiB);
  RunLink(pacer, link, now, 1);
  // Full at 1 GB/s x 0.26 s = 260 MB; never beyond the bound.
  EXPECT_NEAR(static_cast<double>(pacer.window()), 2.6e8, 2.6e7);
  LinkPacer::Config small = Paced();
  small.max_window = 64 * kMiB;
  LinkPacer capped(small, now);
  RunLink(capped, link, now, 2);
  EXPECT_EQ(capped.window(), 64 * kMiB);
}

TEST(LinkPacer, ReadersStartingOnAFastLinkDoNotCutTheWindow) {
  // After a mount the readers start: a few reads come back before they ask for more than the
  // window allows. The interval's rate is measured from when the window held reads back,
  // not over those first reads (whose rate was what was asked for, and cut 16 MiB to 4).
  TimePoint now{};
  LinkPacer pacer(Paced(), now);
  now += 10s;
  for (int i = 0; i < 2; ++i) {
    now += 40ms;
    pacer.OnCompleted(1 * kMiB, 60ms, now);
  }
  RunLink(pacer, Link{1e9, 60ms}, now, 0.125);
  EXPECT_GE(pacer.window(), 32 * kMiB);
}

TEST(LinkPacer, AFasterLinkIsFollowedAndASlowerOneToo) {
  TimePoint now{};
  LinkPacer pacer(Paced(), now);
  RunLink(pacer, Link{7.2e6, 60ms}, now, 5);
  RunLink(pacer, Link{50e6, 60ms}, now, 5);
  EXPECT_NEAR(static_cast<double>(pacer.window()), 50e6 * 0.26, 50e6 * 0.26 * 0.1);
  // Slower: the lowest latency is still the fast link's (kept for its window), so the
  // window is 4 MB/s x (0.063 + 0.2) s, a little under the target.
  const double queue = RunLink(pacer, Link{4e6, 60ms}, now, 10);
  EXPECT_NEAR(static_cast<double>(pacer.window()), 4e6 * 0.263, 4e6 * 0.263 * 0.1);
  EXPECT_GT(queue, 0.1);
  EXPECT_LT(queue, 0.25);
}

TEST(LinkPacer, IntervalsWithoutHeldBackReadsDoNotMoveIt) {
  // Only readers: the rate is what they asked for, not what the link carries.
  TimePoint now{};
  LinkPacer pacer(Paced(), now);
  for (int i = 0; i < 100; ++i) {
    now += 50ms;
    pacer.OnCompleted(100'000, 60ms, now);  // never held back
  }
  EXPECT_EQ(pacer.window(), 16 * kMiB);
  // The window never drops below one block however slow the link.
  RunLink(pacer, Link{10e3, 60ms}, now, 5);
  EXPECT_EQ(pacer.window(), 1 * kMiB);
}

TEST(LinkPacer, TheBaseLatencyIsForgottenAfterItsWindow) {
  LinkPacer::Config c = Paced();
  c.base_window = 10s;
  TimePoint now{};
  LinkPacer pacer(c, now);
  EXPECT_EQ(pacer.base_latency(), 0ms);
  pacer.OnCompleted(1000, 20ms, now);
  now += 6s;
  pacer.OnCompleted(1000, 80ms, now);
  EXPECT_EQ(pacer.base_latency(), 20ms);  // still within the window
  now += 6s;
  pacer.OnCompleted(1000, 80ms, now);
  EXPECT_EQ(pacer.base_latency(), 80ms);  // the path got slower: learnt
}

}  // namespace
}  // namespace spoke::agent
