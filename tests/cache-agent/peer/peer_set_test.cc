#include "cache-agent/peer/peer_set.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

namespace spoke::agent {
namespace {

using namespace std::chrono_literals;

// A DNS stand-in: what each name resolves to, changeable during the test.
struct FakeDns {
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> names;
  PeerSet::Resolver resolver() {
    return [this](const std::string& name) {
      std::lock_guard lock(mu);
      return names[name];
    };
  }
};

PeerSet::LocalAddresses Local(std::set<std::string> addrs) {
  return [addrs] { return addrs; };
}

TEST(PeerSet, ConfigNamesWhatIsMissing) {
  PeerSet::Config c;
  c.self_port = 7311;
  auto s = c.Validate();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("peers"), std::string::npos);
  c.static_peers = {"10.0.0.1:7311"};
  EXPECT_TRUE(c.Validate());
  c.failures_to_mark_down = 0;
  EXPECT_FALSE(c.Validate());
}

TEST(PeerSet, SelfIsTheMemberOnALocalAddressWithTheOwnPort) {
  FakeDns dns;
  dns.names["spoke-peers.spoke.svc:7311"] = {"10.0.0.2:7311", "10.0.0.1:7311", "10.0.0.3:7311"};
  PeerSet::Config c;
  c.service = "spoke-peers.spoke.svc:7311";
  c.self_port = 7311;
  PeerSet set(c, dns.resolver(), Local({"127.0.0.1", "10.0.0.2"}));
  set.Refresh();
  auto v = set.Live();
  ASSERT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0], "10.0.0.1:7311");  // sorted: every agent sees the same list
  ASSERT_GE(v.self, 0);
  EXPECT_EQ(v.members[v.self], "10.0.0.2:7311");
}

TEST(PeerSet, OnLoopbackThePortTellsTheAgentsApart) {
  FakeDns dns;
  for (auto p : {"127.0.0.1:9001", "127.0.0.1:9002"}) dns.names[p] = {p};
  PeerSet::Config c;
  c.static_peers = {"127.0.0.1:9001", "127.0.0.1:9002"};
  c.self_port = 9002;
  PeerSet set(c, dns.resolver(), Local({"127.0.0.1"}));
  set.Refresh();
  auto v = set.Live();
  ASSERT_EQ(v.self, 1);
}

TEST(PeerSet, APodLeavingTheServiceIsDroppedAtTheNextRefresh) {
  FakeDns dns;
  dns.names["svc:1"] = {"10.0.0.1:1", "10.0.0.2:1"};
  PeerSet::Config c;
  c.service = "svc:1";
  c.self_port = 1;
  c.refresh_interval = 100ms;
  PeerSet set(c, dns.resolver(), Local({"10.0.0.1"}));
  set.Start();
  EXPECT_EQ(set.Live().members.size(), 2u);
  {
    std::lock_guard lock(dns.mu);
    dns.names["svc:1"] = {"10.0.0.1:1"};  // not ready any more: DNS stops publishing it
  }
  for (int i = 0; i < 100 && set.Live().members.size() != 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(set.Live().members, std::vector<std::string>{"10.0.0.1:1"});
}

TEST(PeerSet, RepeatedFailuresMarkAPeerDownForABackoffThenItComesBack) {
  FakeDns dns;
  dns.names["svc:1"] = {"10.0.0.1:1", "10.0.0.2:1"};
  PeerSet::Config c;
  c.service = "svc:1";
  c.self_port = 1;
  c.failures_to_mark_down = 3;
  c.down_period = 300ms;
  PeerSet set(c, dns.resolver(), Local({"10.0.0.1"}));
  set.Refresh();
  set.ReportFailure("10.0.0.2:1");
  set.ReportFailure("10.0.0.2:1");
  EXPECT_EQ(set.Live().members.size(), 2u);  // two failures: still a member
  set.ReportSuccess("10.0.0.2:1");           // a success resets the count
  set.ReportFailure("10.0.0.2:1");
  set.ReportFailure("10.0.0.2:1");
  EXPECT_EQ(set.Live().members.size(), 2u);
  set.ReportFailure("10.0.0.2:1");
  EXPECT_EQ(set.Live().members, std::vector<std::string>{"10.0.0.1:1"});
  EXPECT_EQ(set.Live().self, 0);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(set.Live().members.size(), 2u);
}

TEST(PeerSet, ResolvesLoopbackByName) {
  auto r = ResolveHostPort("localhost:7311");
  ASSERT_FALSE(r.empty());
  for (const auto& m : r) EXPECT_TRUE(m.ends_with(":7311")) << m;
  EXPECT_TRUE(ResolveHostPort("no-such-host.invalid:1").empty());
  EXPECT_TRUE(HostAddresses().contains("127.0.0.1"));
}

// What the owner checks a client certificate against (peerTlsIdentity: address).
TEST(PeerSet, ACertificateNamesAMemberByItsIpOrAStaticPeersHostName) {
  FakeDns dns;
  dns.names["spoke-peers.spoke.svc:7311"] = {"10.0.0.1:7311", "[fd00::2]:7311"};
  dns.names["agent-c.example:7311"] = {"10.0.0.3:7311"};
  PeerSet::Config c;
  c.service = "spoke-peers.spoke.svc:7311";
  c.static_peers = {"agent-c.example:7311"};
  c.self_port = 7311;
  PeerSet set(c, dns.resolver(), Local({}));
  set.Refresh();
  EXPECT_TRUE(set.NamesMember({"10.0.0.1"}, {}));
  EXPECT_TRUE(set.NamesMember({"fd00:0:0::2"}, {}));  // any spelling of the address
  EXPECT_TRUE(set.NamesMember({"10.0.0.3"}, {}));
  EXPECT_TRUE(set.NamesMember({}, {"AGENT-C.example"}));
  EXPECT_FALSE(set.NamesMember({"10.0.0.9"}, {"node-a", "spoke-peers.spoke.svc"}));
  EXPECT_FALSE(set.NamesMember({}, {}));
  // A pod gone from the Service: its certificate (still valid) names no member now.
  dns.names["spoke-peers.spoke.svc:7311"] = {"[fd00::2]:7311"};
  set.Refresh();
  EXPECT_FALSE(set.NamesMember({"10.0.0.1"}, {}));
}

TEST(PeerSet, AMemberOnTheListenAddressIsSelfEvenWhenNotAnInterfaceAddress) {
  FakeDns dns;
  dns.names["127.0.0.2:7311"] = {"127.0.0.2:7311"};
  dns.names["127.0.0.3:7311"] = {"127.0.0.3:7311"};
  PeerSet::Config c;
  c.static_peers = {"127.0.0.2:7311", "127.0.0.3:7311"};
  c.self_port = 7311;
  c.self_host = "127.0.0.3";
  PeerSet set(c, dns.resolver(), Local({"127.0.0.1"}));
  set.Refresh();
  auto v = set.Live();
  ASSERT_EQ(v.self, 1);
  EXPECT_EQ(v.members[1], "127.0.0.3:7311");
}

}  // namespace
}  // namespace spoke::agent
