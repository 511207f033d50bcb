#include "cache-agent/fuse/orphan_check.h"

#include <gtest/gtest.h>

namespace spoke::agent {
namespace {

using Verdict = OrphanCheck::Verdict;

// A cold epoch on a kernel before 6.9: read-ahead beyond max_background (12) waits in the
// kernel's queue while this agent serves what it read. `waiting` stays above what the agent
// has in flight the whole time, with no orphan at all: the connection must not be aborted.
TEST(OrphanCheck, AConnectionBusyWithQueuedReadAheadIsNeverTakenForOrphans) {
  OrphanCheck check;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(check.Add({/*waiting=*/40, /*in_flight=*/12, /*readable=*/true}),
              Verdict::kUndecided);
    EXPECT_EQ(check.Add({/*waiting=*/3, /*in_flight=*/0, /*readable=*/true}),  // queued, unread
              Verdict::kUndecided);
  }
  EXPECT_EQ(check.Add({0, 0, false}), Verdict::kNone) << "the first idle moment tells";
}

TEST(OrphanCheck, RequestsWaitingWhileTheAgentIsIdleAreOrphans) {
  OrphanCheck check(3);
  EXPECT_EQ(check.Add({2, 0, false}), Verdict::kUndecided);
  EXPECT_EQ(check.Add({40, 12, true}), Verdict::kUndecided);  // busy between: no evidence
  EXPECT_EQ(check.Add({2, 0, false}), Verdict::kUndecided);
  EXPECT_EQ(check.Add({2, 0, false}), Verdict::kOrphans);
}

TEST(OrphanCheck, AnIdleConnectionWithNothingWaitingHasNone) {
  OrphanCheck check;
  EXPECT_EQ(check.Add({1, 1, false}), Verdict::kUndecided);  // ours, being served
  EXPECT_EQ(check.Add({0, 0, false}), Verdict::kNone);
}

}  // namespace
}  // namespace spoke::agent
