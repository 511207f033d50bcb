#include "cache-agent/cache/nothrash_policy.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace spoke::agent {
namespace {

BlockKey K(uint64_t i) { return BlockKey{1, i, 1, 0}; }
const AdmissionHint kDemandHint{kDemand, kUnknownUse};

// A cache of `capacity` blocks driven by the policy, as BlockCache drives it.
struct Cache {
  explicit Cache(EvictionPolicy& p, size_t capacity) : policy(p), capacity(capacity) {}
  bool Read(uint64_t i) {
    if (blocks.contains(i)) {
      policy.OnAccess(K(i));
      return true;
    }
    Put(i, kDemandHint);
    return false;
  }
  bool Put(uint64_t i, const AdmissionHint& hint) {
    if (blocks.contains(i)) return true;
    if (blocks.size() >= capacity) {
      auto v = policy.PickVictim(K(i), hint);
      if (!v) return false;
      blocks.erase(v->file_id);
      policy.OnRemove(*v);
    }
    blocks.insert(i);
    policy.OnInsert(K(i), hint);
    return true;
  }
  EvictionPolicy& policy;
  size_t capacity;
  std::unordered_set<uint64_t> blocks;
};

TEST(NoThrashPolicy, CyclicWorkingSetTwiceTheCacheKeepsAStableHalf) {
  NoThrashPolicy policy;
  Cache c(policy, 100);
  uint64_t hits = 0, reads = 0;
  for (int epoch = 0; epoch < 5; ++epoch) {
    for (uint64_t i = 0; i < 200; ++i) {
      const bool hit = c.Read(i);
      if (epoch > 0) {
        hits += hit;
        ++reads;
      }
    }
  }
  EXPECT_GE(static_cast<double>(hits) / reads, 0.95 * 0.5);
}

// WouldAdmit is PickVictim's answer without its side effects: asked before every PickVictim
// of a workload mixing demand, timely and untimely prefetches and reads, they agree.
TEST(NoThrashPolicy, WouldAdmitAgreesWithPickVictim) {
  NoThrashPolicy policy;
  const size_t capacity = 64;
  std::unordered_set<uint64_t> blocks;
  uint64_t next = 0, checks = 0, refusals = 0;
  uint64_t rng = 12345;
  const auto rand = [&rng](uint64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
  };
  for (int step = 0; step < 20000; ++step) {
    if (!blocks.empty() && rand(3) == 0) {  // read a cached block
      auto it = blocks.begin();
      std::advance(it, rand(std::min<size_t>(blocks.size(), 8)));
      policy.OnAccess(K(*it));
      continue;
    }
    AdmissionHint hint = kDemandHint;
    switch (rand(3)) {
      case 0:
        hint = AdmissionHint{1, static_cast<double>(rand(16))};
        break;  // timely
      case 1:
        hint = AdmissionHint{2, static_cast<double>(1000 + rand(4000))};
        break;  // set
      default:
        break;
    }
    const uint64_t i = next++;
    if (blocks.size() >= capacity) {
      const bool would = policy.WouldAdmit(hint);
      const auto victim = policy.PickVictim(K(i), hint);
      ASSERT_EQ(would, victim.has_value()) << "step " << step;
      ++checks;
      if (!victim) {
        ++refusals;
        continue;
      }
      blocks.erase(victim->file_id);
      policy.OnRemove(*victim);
    }
    blocks.insert(i);
    policy.OnInsert(K(i), hint);
  }
  EXPECT_GT(checks, 1000u);
  EXPECT_GT(refusals, 100u);  // both answers were exercised
  EXPECT_GT(checks - refusals, 100u);
}

TEST(NoThrashPolicy, DemandIsNeverRefused) {
  NoThrashPolicy policy;
  Cache c(policy, 10);
  for (uint64_t i = 0; i < 100; ++i) {
    c.Read(i);
    EXPECT_TRUE(c.blocks.contains(i));
  }
}

TEST(NoThrashPolicy, PrefetchNeverEvictsABlockNeededSooner) {
  NoThrashPolicy::Config config;
  config.transient_fraction = 0.2;
  config.max_transient_fraction = 0.2;
  NoThrashPolicy policy(config);
  Cache c(policy, 10);
  for (uint64_t i = 0; i < 10; ++i) c.Read(i);  // fills the stable share
  c.Read(100);                                  // full: the transient share forms
  c.Read(101);
  // Two prefetches needed soon take the transient slots.
  EXPECT_TRUE(c.Put(200, AdmissionHint{1, 5}));
  EXPECT_TRUE(c.Put(201, AdmissionHint{1, 6}));
  // One needed later is refused; one needed sooner than 201 evicts 201.
  EXPECT_FALSE(c.Put(202, AdmissionHint{1, 50}));
  EXPECT_TRUE(c.Put(203, AdmissionHint{1, 1}));
  EXPECT_TRUE(c.blocks.contains(200));
  EXPECT_FALSE(c.blocks.contains(201));
  // No stable block was given up for them (0 and 1 made room for the transient share).
  for (uint64_t i = 2; i < 10; ++i) EXPECT_TRUE(c.blocks.contains(i)) << i;
}

}  // namespace
}  // namespace spoke::agent
