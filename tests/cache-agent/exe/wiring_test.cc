#include "cache-agent/exe/wiring.h"

#include <gtest/gtest.h>

#include "cache-agent/cache/nothrash_policy.h"
#include "tests/support/hub.h"  // TempDir

namespace spoke::agent {
namespace {

TEST(Wiring, EveryConfigurablePolicyHasAFactory) {
  BlockCache::Config cc;
  for (const std::string& name : EvictionPolicyNames()) {
    auto p = MakeEvictionPolicy(name, cc);
    ASSERT_TRUE(p) << name << ": " << p.error().message();
    EXPECT_NE(p->get(), nullptr) << name;
  }
}

TEST(Wiring, NoThrashNameMakesTheNoThrashPolicy) {
  BlockCache::Config cc;
  auto p = MakeEvictionPolicy("nothrash", cc);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_NE(dynamic_cast<NoThrashPolicy*>(p->get()), nullptr);
  auto lru = MakeEvictionPolicy("lru", cc);
  ASSERT_TRUE(lru);
  EXPECT_EQ(dynamic_cast<NoThrashPolicy*>(lru->get()), nullptr);
}

TEST(Wiring, UnknownPolicyIsRefusedByName) {
  auto p = MakeEvictionPolicy("fifo", BlockCache::Config{});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code(), Code::kInvalidArgument);
  EXPECT_NE(p.error().message().find("fifo"), std::string::npos);
}

// memoryBudgetBytes: 0 = 75% of the container's memory limit (as the chart derives it), the
// built-in default without a limit, never below the configuration's minimum.
TEST(Wiring, MemoryBudgetIsDerivedFromTheMemoryLimit) {
  EXPECT_EQ(DeriveMemoryBudgetBytes(2ull << 30, 1 << 20), 1536ull << 20);
  EXPECT_EQ(DeriveMemoryBudgetBytes(std::nullopt, 1 << 20), kDefaultMemoryBudgetBytes);
  EXPECT_EQ(DeriveMemoryBudgetBytes(4ull << 20, 1 << 20), kMinMemoryBudgetBlocks << 20);
}

TEST(Wiring, MemoryBudgetFromTheConfigIsExported) {
  AgentConfig config;
  config.memory_budget_bytes = 64ull << 20;
  metrics::Registry registry;
  auto budget = MakeMemoryBudget(config, registry);
  ASSERT_TRUE(budget) << budget.error().message();
  EXPECT_EQ((*budget)->total(), 64ull << 20);
  EXPECT_EQ(registry.GetGauge("spoke_memory_budget_bytes", "").Value(), 64 << 20);
  config.memory_budget_bytes = 0;
  auto derived = MakeMemoryBudget(config, registry);
  ASSERT_TRUE(derived);
  EXPECT_EQ((*derived)->total(),
            DeriveMemoryBudgetBytes(CgroupMemoryLimit(), config.block_size_bytes));
}

// A config with only cacheSizeBytes (and a private cacheDir) goes through everything the
// agent builds before it serves: the block cache, the memory budget and the FUSE mounter's
// per-volume settings (Volume::Config). Any cache of 64 MiB or more starts.
TEST(Wiring, SmallCachesStartWithNoOtherKeySet) {
  for (const char* size : {"64MiB", "98MB", "98M", "1GiB"}) {
    spoke::testing::TempDir dir("spoke-wiring");
    auto config = ParseAgentConfig(
        std::string("cacheSizeBytes: ") + size + "\ncacheDir: " + dir.path() + "/cache\n",
        "agent.yaml");
    ASSERT_TRUE(config) << size << ": " << config.error().message();
    metrics::Registry registry;
    auto cache = OpenAgentCache(*config, registry);
    ASSERT_TRUE(cache) << size << ": " << cache.error().message();
    auto memory = MakeMemoryBudget(*config, registry);
    ASSERT_TRUE(memory) << size << ": " << memory.error().message();
    auto mounter = MakeAgentMounter(*config, **cache, registry, **memory);
    ASSERT_TRUE(mounter) << size << ": " << mounter.error().message();
  }
}

}  // namespace
}  // namespace spoke::agent
