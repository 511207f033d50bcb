#include "cache-agent/peer/rendezvous.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace spoke::agent {
namespace {

std::vector<std::string> Members(int n) {
  std::vector<std::string> m;
  for (int i = 0; i < n; ++i) m.push_back("10.0.0." + std::to_string(i + 1) + ":7311");
  return m;
}

std::vector<std::string> Owners(const std::vector<std::string>& members, int keys) {
  std::vector<std::string> out;
  for (int k = 0; k < keys; ++k) {
    int o = RendezvousOwner(members, PeerBlockHash("hub:2049/data", 42, 7, k));
    out.push_back(o < 0 ? "" : members[o]);
  }
  return out;
}

TEST(Rendezvous, NoMembersNoOwner) { EXPECT_EQ(RendezvousOwner({}, 1), -1); }

TEST(Rendezvous, EveryAgentPicksTheSameOwnerWhateverTheOrderOfItsList) {
  auto m = Members(5);
  auto reversed = std::vector<std::string>(m.rbegin(), m.rend());
  EXPECT_EQ(Owners(m, 2000), Owners(reversed, 2000));
}

TEST(Rendezvous, KeysSpreadEvenlyOverMembers) {
  auto m = Members(4);
  auto owners = Owners(m, 20000);
  for (const auto& member : m) {
    auto n = std::count(owners.begin(), owners.end(), member);
    EXPECT_GT(n, 20000 / 4 * 0.9) << member;
    EXPECT_LT(n, 20000 / 4 * 1.1) << member;
  }
}

TEST(Rendezvous, AMemberLeavingMovesOnlyItsOwnKeys) {
  const int kKeys = 20000;
  auto m = Members(10);
  auto before = Owners(m, kKeys);
  const std::string gone = m[3];
  m.erase(m.begin() + 3);
  auto after = Owners(m, kKeys);
  int moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    if (before[k] != after[k]) {
      moved++;
      EXPECT_EQ(before[k], gone) << "key " << k << " moved although its owner stayed";
    }
  }
  // About 1/10 of the keys: the departed member's share.
  EXPECT_GT(moved, kKeys / 10 * 0.85);
  EXPECT_LT(moved, kKeys / 10 * 1.15);
}

TEST(Rendezvous, AMemberJoiningTakesOnlyKeysForItself) {
  const int kKeys = 20000;
  auto m = Members(10);
  auto before = Owners(m, kKeys);
  m.push_back("10.0.1.1:7311");
  auto after = Owners(m, kKeys);
  int moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    if (before[k] != after[k]) {
      moved++;
      EXPECT_EQ(after[k], "10.0.1.1:7311");
    }
  }
  EXPECT_GT(moved, kKeys / 11 * 0.85);
  EXPECT_LT(moved, kKeys / 11 * 1.15);
}

TEST(Rendezvous, BlockHashDependsOnEveryPartOfTheKey) {
  uint64_t h = PeerBlockHash("hub:2049/a", 1, 2, 3);
  EXPECT_NE(h, PeerBlockHash("hub:2049/b", 1, 2, 3));
  EXPECT_NE(h, PeerBlockHash("hub:2049/a", 9, 2, 3));
  EXPECT_NE(h, PeerBlockHash("hub:2049/a", 1, 9, 3));
  EXPECT_NE(h, PeerBlockHash("hub:2049/a", 1, 2, 9));
  EXPECT_EQ(h, PeerBlockHash("hub:2049/a", 1, 2, 3));
}

}  // namespace
}  // namespace spoke::agent
