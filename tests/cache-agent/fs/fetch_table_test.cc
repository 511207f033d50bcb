// FetchTable alone: one fetch per block whatever the asker, promotion into a more urgent
// queue, stale queue entries skipped, demand fetches dropped at their readers' deadline.
#include "cache-agent/fs/fetch_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;
using SteadyTime = FetchTable::SteadyTime;

const std::string kPath = "data/a";

BlockKey Key(uint64_t index) { return BlockKey{7, 1, 1, index}; }
FetchTable::Block Block(uint64_t index) { return {kPath, index * 4096, 4096, false}; }

// A block asked for in the background (no caller) takes the identity of the first reader
// that joins it before it is sent; one already sent keeps the identity it went with.
TEST(FetchTable, ABackgroundFetchTakesTheFirstReadersIdentityUntilSent) {
  FetchTable table;
  const Credentials alice{1000, 1000, {}}, bob{1001, 1001, {}};
  auto warm = table.Join(Key(0), Block(0), {.cls = kPrefetchClass});
  EXPECT_FALSE(warm.fetch->reader);
  FetchTable::Block as_alice = Block(0);
  as_alice.reader = &alice;
  table.Join(Key(0), as_alice, {.cls = kDemandClass});
  ASSERT_TRUE(warm.fetch->reader);
  EXPECT_EQ(*warm.fetch->reader, alice);
  FetchTable::Block as_bob = Block(0);
  as_bob.reader = &bob;
  table.Join(Key(0), as_bob, {.cls = kDemandClass});
  EXPECT_EQ(*warm.fetch->reader, alice) << "the first reader's";
  auto sent = table.Join(Key(1), Block(1), {.cls = kPrefetchClass});
  sent.fetch->dispatched = true;
  FetchTable::Block b1 = Block(1);
  b1.reader = &bob;
  table.Join(Key(1), b1, {.cls = kDemandClass});
  EXPECT_FALSE(sent.fetch->reader) << "already on its way as the volume's identity";
}

TEST(FetchTable, AskersOfOneBlockShareOneFetch) {
  FetchTable table;
  const SteadyTime t0 = std::chrono::steady_clock::now();
  auto first = table.Join(Key(0), Block(0), {.cls = kPrefetchClass, .expert = 3});
  ASSERT_TRUE(first.created);
  EXPECT_EQ(first.fetch->path, kPath);
  EXPECT_EQ(first.fetch->length, 4096u);
  EXPECT_FALSE(first.fetch->stored_as_demand);  // credited to its expert
  auto again = table.Join(Key(0), Block(0), {.cls = kPrefetchClass, .expert = 4});
  EXPECT_FALSE(again.created);
  EXPECT_FALSE(again.promoted);
  EXPECT_EQ(again.fetch, first.fetch);
  EXPECT_EQ(first.fetch->expert, 3);
  EXPECT_TRUE(table.Contains(Key(0)));
  EXPECT_FALSE(table.Contains(Key(1)));
  // Readers keep the latest deadline of them all.
  table.Join(Key(1), Block(1), {.cls = kDemandClass, .deadline = t0 + 5s});
  auto later = table.Join(Key(1), Block(1), {.cls = kDemandClass, .deadline = t0 + 9s});
  table.Join(Key(1), Block(1), {.cls = kDemandClass, .deadline = t0 + 1s});
  EXPECT_EQ(later.fetch->deadline, t0 + 9s);
}

TEST(FetchTable, APromotedFetchGoesAheadAndIsSentOnce) {
  FetchTable table;
  std::vector<BlockFetchPtr> expired;
  const SteadyTime now = std::chrono::steady_clock::now();
  table.Join(Key(0), Block(0), {.cls = kPrefetchClass});
  table.Join(Key(1), Block(1), {.cls = kPrefetchClass});
  auto promoted = table.Join(Key(1), Block(1), {.cls = kDemandClass, .deadline = now + 1h});
  EXPECT_TRUE(promoted.promoted);
  EXPECT_TRUE(promoted.fetch->stored_as_demand);
  EXPECT_EQ(table.PopQueued(kDemandClass, now, &expired), promoted.fetch);
  // Its old prefetch entry is stale: block 0 is the next prefetch, then none.
  auto next = table.PopQueued(kPrefetchClass, now, &expired);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->key, Key(0));
  EXPECT_EQ(table.PopQueued(kPrefetchClass, now, &expired), nullptr);
  EXPECT_FALSE(table.QueuedFrom(kDemandClass));
  EXPECT_TRUE(expired.empty());
}

TEST(FetchTable, AWarmUpJoiningMarksItsWaiterAndPromotesPrefetchOnly) {
  FetchTable table;
  auto demand = table.Join(Key(0), Block(0), {.cls = kDemandClass});
  auto warm = table.Join(Key(0), Block(0), {.cls = kWarmClass});
  EXPECT_FALSE(warm.promoted);  // demand is more urgent already
  EXPECT_EQ(demand.fetch->cls, kDemandClass);
  EXPECT_TRUE(demand.fetch->warm_waiter);
  table.Join(Key(1), Block(1), {.cls = kPrefetchClass});
  EXPECT_TRUE(table.Join(Key(1), Block(1), {.cls = kWarmClass}).promoted);
  EXPECT_TRUE(table.QueuedFrom(kWarmClass));
}

TEST(FetchTable, ADemandFetchPastEveryDeadlineIsDroppedUnlessAWarmUpWaits) {
  FetchTable table;
  std::vector<BlockFetchPtr> expired;
  const SteadyTime now = std::chrono::steady_clock::now();
  table.Join(Key(0), Block(0), {.cls = kDemandClass, .deadline = now - 1s});
  table.Join(Key(1), Block(1), {.cls = kDemandClass, .deadline = now - 1s});
  table.Join(Key(1), Block(1), {.cls = kWarmClass});
  auto next = table.PopQueued(kDemandClass, now, &expired);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->key, Key(1));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0]->key, Key(0));
  EXPECT_TRUE(expired[0]->done && expired[0]->settled);
  EXPECT_EQ(expired[0]->result.error().code(), Code::kTimeout);
  EXPECT_FALSE(table.Contains(Key(0)));
}

TEST(FetchTable, EraseTakesOutOnlyThatFetchAndCancelFailsTheUnsent) {
  FetchTable table;
  auto sent = table.Join(Key(0), Block(0), {.cls = kPrefetchClass}).fetch;
  sent->dispatched = true;
  auto queued = table.Join(Key(1), Block(1), {.cls = kWarmClass}).fetch;
  // A later fetch of the same key (a done block waiting for its store) is not the one erased.
  BlockFetch other;
  other.key = Key(0);
  table.Erase(other);
  EXPECT_TRUE(table.Contains(Key(0)));
  auto cancelled = table.CancelQueued(Error(Code::kCancelled, "stopping"));
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0], queued);
  EXPECT_EQ(queued->result.error().code(), Code::kCancelled);
  EXPECT_FALSE(table.Contains(Key(1)));
  EXPECT_TRUE(table.Contains(Key(0)));  // sent: its answer settles it
  EXPECT_FALSE(table.QueuedFrom(kDemandClass));
  table.Erase(*sent);
  EXPECT_FALSE(table.Contains(Key(0)));
  auto done = std::make_shared<BlockFetch>();
  done->key = Key(2);
  done->done = true;
  table.AddDone(done);
  EXPECT_TRUE(table.Contains(Key(2)));
  EXPECT_EQ(table.Join(Key(2), Block(2), {.cls = kDemandClass}).fetch, done);
}

}  // namespace
}  // namespace spoke::agent
