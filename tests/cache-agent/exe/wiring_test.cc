#include "cache-agent/exe/wiring.h"

#include <gtest/gtest.h>

#include "cache-agent/cache/nothrash_policy.h"

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

}  // namespace
}  // namespace spoke::agent
