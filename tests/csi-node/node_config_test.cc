#include "csi-node/node_config.h"

#include <gtest/gtest.h>

#include <map>

namespace spoke::node {
namespace {

auto Env(std::map<std::string, std::string> m) {
  return [m = std::move(m)](const char* k) -> const char* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

TEST(NodeConfig, DefaultsWithoutAFile) {
  NodeConfig c;
  ASSERT_TRUE(LoadNodeConfigString("", &c, Env({})));
  EXPECT_FALSE(c.kubelet_dir_enforced);
  EXPECT_EQ(c.state_dir, "/var/lib/kubelet/plugins/spoke.csi.dev");
  EXPECT_EQ(c.agent_timeout.count(), 30000);
  EXPECT_FALSE(c.Validate());  // no node id
  c.node_id = "n1";
  EXPECT_TRUE(c.Validate());
}

TEST(NodeConfig, FileSettingsAndEnvFallback) {
  NodeConfig c;
  ASSERT_TRUE(
      LoadNodeConfigString("kubeletDir: /opt/kubelet/\ntopology: {region: eu-west-1, zone: \"\"}\n"
                           "agentTimeoutSeconds: 5\nfuseKeeperOrphanTimeoutSeconds: 0\n"
                           "fuseKeeperHandOverSeconds: 25\n",
                           &c, Env({{"SPOKE_REGION", "ignored"}, {"SPOKE_ZONE", "eu-west-1b"}})));
  EXPECT_TRUE(c.kubelet_dir_enforced);
  EXPECT_EQ(c.kubelet_dir, "/opt/kubelet/");
  EXPECT_EQ(c.state_dir, "/opt/kubelet/plugins/spoke.csi.dev");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_EQ(c.zone, "eu-west-1b");
  EXPECT_EQ(c.agent_timeout.count(), 5000);
  EXPECT_EQ(c.fuse_keeper_orphan_timeout.count(), 0);  // 0 = keep the connections forever
  EXPECT_EQ(c.fuse_keeper_handover.count(), 25);
  NodeConfig d;
  ASSERT_TRUE(LoadNodeConfigString("", &d, Env({})));
  EXPECT_EQ(d.fuse_keeper_orphan_timeout.count(), 300);
  EXPECT_EQ(d.fuse_keeper_handover.count(), 40);
}

TEST(NodeConfig, ErrorsNameTheKey) {
  NodeConfig c;
  auto s = LoadNodeConfigString("kubeletDir: relative\n", &c, Env({}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("kubeletDir"), std::string::npos);
  s = LoadNodeConfigString("topology: {regoin: x}\n", &c, Env({}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("topology.regoin"), std::string::npos) << s.error().message();
  s = LoadNodeConfigString("agentTimeoutSeconds: 0\n", &c, Env({}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("agentTimeoutSeconds"), std::string::npos);
  s = LoadNodeConfigString("fuseKeeperOrphanTimeoutSeconds: -5\n", &c, Env({}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("fuseKeeperOrphanTimeoutSeconds"), std::string::npos)
      << s.error().message();
  s = LoadNodeConfigString("fuseKeeperHandOverSeconds: 900\n", &c, Env({}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("fuseKeeperHandOverSeconds"), std::string::npos)
      << s.error().message();
}

TEST(NodeConfig, InlineVolumeAllowList) {
  NodeConfig none;
  ASSERT_TRUE(LoadNodeConfigString("", &none, Env({})));
  EXPECT_TRUE(none.inline_volumes.servers.empty());  // no allow-list: every inline volume refused
  NodeConfig c;
  ASSERT_TRUE(LoadNodeConfigString(
      "inlineVolumes: {servers: [hub], sharePrefixes: [/srv/data], modes: [dataset, scratch]}\n",
      &c, Env({})));
  EXPECT_EQ(c.inline_volumes.servers, std::vector<std::string>{"hub"});
  EXPECT_EQ(c.inline_volumes.share_prefixes, std::vector<std::string>{"/srv/data"});
  EXPECT_TRUE(c.inline_volumes.Check({{"server", "hub"}, {"share", "/srv/data/imagenet"}}));
  EXPECT_FALSE(c.inline_volumes.Check({{"server", "hub"}, {"share", "/srv/database"}}));
  for (const char* bad :
       {"inlineVolumes: {sharePrefixes: [srv]}", "inlineVolumes: {sharePrefixes: [/srv/]}",
        "inlineVolumes: {modes: [all]}", "inlineVolumes: {servers: hub}",
        "inlineVolumes: {allow: []}"}) {
    NodeConfig b;
    auto s = LoadNodeConfigString(bad, &b, Env({}));
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.error().message().find("inlineVolumes."), std::string::npos) << s.error().message();
  }
}

}  // namespace
}  // namespace spoke::node
