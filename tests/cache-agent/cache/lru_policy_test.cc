#include "cache-agent/cache/lru_policy.h"

#include <gtest/gtest.h>

namespace spoke::agent {
namespace {

BlockKey K(uint64_t i) { return BlockKey{1, 2, 3, i}; }
AdmissionHint Demand() { return AdmissionHint{}; }
AdmissionHint Prefetch(double when, ExpertId e = 1) { return AdmissionHint{e, when}; }

TEST(LruPolicyTest, EvictsLeastRecentlyUsed) {
  LruPolicy p;
  for (uint64_t i = 0; i < 4; ++i) p.OnInsert(K(i), Demand());
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(0));
  p.OnAccess(K(0));
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(1));
  p.OnRemove(K(1));
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(2));
  p.OnAccess(K(2));
  p.OnAccess(K(3));
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(0));
  EXPECT_EQ(p.size(), 3u);
}

TEST(LruPolicyTest, EmptyPolicyHasNoVictim) {
  LruPolicy p;
  EXPECT_EQ(p.PickVictim(K(1), Demand()), std::nullopt);
  p.OnInsert(K(1), Demand());
  p.OnRemove(K(1));
  EXPECT_EQ(p.PickVictim(K(1), Demand()), std::nullopt);
}

TEST(LruPolicyTest, PrefetchDoesNotEvictAnUnreadPrefetchNeededSooner) {
  LruPolicy p;
  p.OnInsert(K(0), Prefetch(1.0));  // LRU tail, needed in 1 s
  p.OnInsert(K(1), Demand());
  // A prefetch needed later (5 s) is refused rather than evicting K(0).
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(5.0, 2)), std::nullopt);
  // One needed sooner (0.5 s) may evict it; so may one needed at the same time.
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(0.5, 2)), K(0));
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(1.0, 2)), K(0));
  // Demand is never refused.
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(0));
}

TEST(LruPolicyTest, ReadPrefetchOrDemandTailIsNotProtected) {
  LruPolicy p;
  p.OnInsert(K(0), Demand());
  p.OnInsert(K(1), Prefetch(1.0));
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(5.0)), K(0));  // tail is demand
  p.OnRemove(K(0));
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(5.0)), std::nullopt);
  p.OnAccess(K(1));  // read: its prediction came true, it is an ordinary block now
  EXPECT_EQ(p.PickVictim(K(9), Prefetch(5.0)), K(1));
}

TEST(LruPolicyTest, ReinsertMovesToFront) {
  LruPolicy p;
  p.OnInsert(K(0), Demand());
  p.OnInsert(K(1), Demand());
  p.OnInsert(K(0), Demand());
  EXPECT_EQ(p.size(), 2u);
  EXPECT_EQ(p.PickVictim(K(9), Demand()), K(1));
}

TEST(LruPolicyTest, FactoryMakesAnLru) {
  auto p = MakeLruPolicy();
  p->OnInsert(K(0), Demand());
  p->OnInsert(K(1), Demand());
  EXPECT_EQ(p->PickVictim(K(9), Demand()), K(0));
}

}  // namespace
}  // namespace spoke::agent
