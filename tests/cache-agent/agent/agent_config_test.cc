#include "cache-agent/agent/agent_config.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace spoke::agent {
namespace {

Result<AgentConfig> Parse(const std::string& yaml) { return ParseAgentConfig(yaml, "agent.yaml"); }

// The error for `yaml`, which must fail.
std::string ErrorOf(const std::string& yaml) {
  auto c = Parse(yaml);
  EXPECT_FALSE(c.has_value()) << yaml;
  return c ? "" : c.error().message();
}

TEST(AgentConfigTest, DefaultsWhenEmpty) {
  auto c = Parse("");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->socket, "/run/spoke/agent.sock");
  EXPECT_EQ(c->cache_dir, "/var/cache/spoke");
  EXPECT_EQ(c->cache_size_bytes, 10ull << 30);
  EXPECT_EQ(c->block_size_bytes, 1u << 20);
  EXPECT_EQ(c->metrics_address, "127.0.0.1:9810");
  EXPECT_EQ(c->MetricsHost(), "127.0.0.1");
  EXPECT_EQ(c->MetricsPort(), 9810);
  EXPECT_EQ(c->state_dir, "/var/lib/spoke");
  EXPECT_EQ(c->log_level, log::Level::kInfo);
  EXPECT_EQ(c->hub.connections, 4);
  EXPECT_EQ(c->hub.inflight_per_connection, 128);
  EXPECT_EQ(c->hub.request_timeout_seconds, 10);
  EXPECT_EQ(c->hub.retries, 3);
  EXPECT_EQ(c->read_ahead_max_bytes, 64ull << 20);
  EXPECT_FALSE(c->kernel_read_ahead_bytes.has_value());  // sized from the memory budget
  EXPECT_EQ(c->eviction_policy, "lru");
  // Outside Kubernetes the agent starts a keeper there: spokectl mounts outlive a crash.
  EXPECT_EQ(c->fuse_keeper_socket, "/run/spoke/fuse-keeper.sock");
  EXPECT_TRUE(c->fuse_keeper_start);
  EXPECT_EQ(c->handover_timeout_seconds, 5);
  EXPECT_EQ(c->memory_budget_bytes, 0u);  // derived at start
}

TEST(AgentConfigTest, EveryKeyTheChartWrites) {
  auto c = Parse(R"(
socket: /csi/agent.sock
cacheDir: /nvme/spoke
cacheSizeBytes: 200Gi
blockSizeBytes: 512Ki
metricsAddress: 0.0.0.0:9900
stateDir: /var/lib/spoke-agent
logLevel: debug
hub:
  connections: 8
  inflightPerConnection: 32
  requestTimeoutSeconds: 20
  retries: 5
readAheadMaxBytes: 128Mi
kernelReadAheadBytes: 4Mi
evictionPolicy: lru
fuseKeeperSocket: /run/spoke/fuse-keeper.sock
fuseKeeperStart: false
handoverTimeoutSeconds: 8
keeperWaitSeconds: 12
writeBackBytesPerVolume: 32Mi
memoryBudgetBytes: 1536Mi
)");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->socket, "/csi/agent.sock");
  EXPECT_EQ(c->cache_dir, "/nvme/spoke");
  EXPECT_EQ(c->cache_size_bytes, 200ull << 30);
  EXPECT_EQ(c->block_size_bytes, 512u << 10);
  EXPECT_EQ(c->MetricsHost(), "0.0.0.0");
  EXPECT_EQ(c->MetricsPort(), 9900);
  EXPECT_EQ(c->state_dir, "/var/lib/spoke-agent");
  EXPECT_EQ(c->log_level, log::Level::kDebug);
  EXPECT_EQ(c->hub.connections, 8);
  EXPECT_EQ(c->hub.inflight_per_connection, 32);
  EXPECT_EQ(c->hub.request_timeout_seconds, 20);
  EXPECT_EQ(c->hub.retries, 5);
  EXPECT_EQ(c->read_ahead_max_bytes, 128ull << 20);
  EXPECT_EQ(c->kernel_read_ahead_bytes, std::optional<uint64_t>(4ull << 20));
  EXPECT_EQ(c->fuse_keeper_socket, "/run/spoke/fuse-keeper.sock");
  EXPECT_FALSE(c->fuse_keeper_start);
  EXPECT_EQ(c->handover_timeout_seconds, 8);
  EXPECT_EQ(c->keeper_wait_seconds, 12);
  EXPECT_EQ(c->write_back_bytes_per_volume, std::optional<uint64_t>(32ull << 20));
  EXPECT_EQ(c->memory_budget_bytes, 1536ull << 20);
}

TEST(AgentConfigTest, SizesAsPlainBytes) {
  auto c = Parse("cacheSizeBytes: 1073741824\nblockSizeBytes: 65536\n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->cache_size_bytes, 1ull << 30);
  EXPECT_EQ(c->block_size_bytes, 65536u);
}

TEST(AgentConfigTest, EmptyMetricsAddressDisablesMetrics) {
  auto c = Parse("metricsAddress: \"\"\n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->metrics_address, "");
}

TEST(AgentConfigTest, ErrorsNameTheField) {
  struct Case {
    std::string yaml;
    std::string field;
  };
  const Case cases[] = {
      {"socket: run/agent.sock", "socket: must be an absolute path"},
      {"cacheDir: cache", "cacheDir: must be an absolute path"},
      {"stateDir: ''", "stateDir: must be an absolute path"},
      {"cacheSizeBytes: lots", "cacheSizeBytes:"},
      {"cacheSizeBytes: 1Mi", "cacheSizeBytes: must hold at least 64 blocks"},
      {"blockSizeBytes: 3Mi", "blockSizeBytes:"},
      {"blockSizeBytes: 100000", "blockSizeBytes: must be a power of two"},
      {"metricsAddress: localhost", "metricsAddress: expected host:port"},
      {"metricsAddress: 127.0.0.1:99999", "metricsAddress: port"},
      {"logLevel: chatty", "logLevel: must be one of"},
      {"hub: {connections: 0}", "hub.connections:"},
      {"hub: {inflightPerConnection: 5000}", "hub.inflightPerConnection:"},
      {"hub: {requestTimeoutSeconds: 0}", "hub.requestTimeoutSeconds:"},
      {"hub: {retries: -1}", "hub.retries:"},
      // The bounds are the components' own: the hub pool takes at most 10 retries and the
      // cache at least 64 KiB blocks, so such a file never reaches start-up.
      {"hub: {retries: 11}", "hub.retries: must be in 0..10"},
      {"blockSizeBytes: 4Ki", "blockSizeBytes: must be between 65536"},
      {"mountRoots: [var/lib/kubelet]", "mountRoots: each must be an absolute"},
      {"mountRoots: [/]", "mountRoots: each must be an absolute"},
      {"mountRoots: [/a/../b]", "mountRoots: each must be an absolute"},
      {"mountRoots: []", "mountRoots: must name at least one"},
      {"mountRoots: /var/lib/kubelet", "mountRoots: expected a list"},
      {"[a, b]: 1", "<key>: a setting's name must be a plain word"},
      {"hub: {conections: 4}", "hub.conections: unknown setting"},
      {"hub: 4", "hub: expected a map"},
      {"readAheadMaxBytes: 1Ki", "readAheadMaxBytes: must be at least one block"},
      {"readAheadMaxBytes: 0", "readAheadMaxBytes: must be at least one block"},
      {"cacheSizeBytes: 100Mi\nreadAheadMaxBytes: 64Mi", "readAheadMaxBytes: must be at most half"},
      {"evictionPolicy: fifo", "evictionPolicy: must be one of lru | nothrash"},
      {"kernelReadAheadBytes: 1000", "kernelReadAheadBytes: must be a multiple of 4096"},
      {"kernelReadAheadBytes: 2Gi", "kernelReadAheadBytes:"},
      {"cacheSize: 10Gi", "cacheSize: unknown setting"},
      {"fuseKeeperSocket: keeper.sock", "fuseKeeperSocket: must be an absolute path"},
      {"fuseKeeperSocket: /" + std::string(120, 'k'), "fuseKeeperSocket: must be at most 107"},
      {"fuseKeeperStart: maybe", "fuseKeeperStart:"},
      {"handoverTimeoutSeconds: 1000", "handoverTimeoutSeconds:"},
      {"keeperWaitSeconds: -1", "keeperWaitSeconds:"},
      {"writeBackBytesPerVolume: 4Ki", "writeBackBytesPerVolume:"},
      {"memoryBudgetBytes: lots", "memoryBudgetBytes:"},
      {"memoryBudgetBytes: 8Mi",
       "memoryBudgetBytes: must be 0 (derive from the memory limit) or "
       "at least 16 blocks"},
      {"memoryBudgetBytes: [1]", "memoryBudgetBytes:"},
      {"peerListenAddress: 7311", "peerListenAddress: expected host:port"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t", "peerListenAddress: is set"},
      {"peerListenAddress: 0.0.0.0:7311\npeers: [a:1]", "peerTokenFile: must be an absolute"},
      {"peerListenAddress: 0.0.0.0:7311\npeers: [a:1]\npeerTokenFile: t",
       "peerTokenFile: must be an absolute"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t\npeers: [node-a]",
       "peers: expected host:port"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t\npeerService: spoke-peers",
       "peerService: expected host:port"},
      {"peers: [10.0.0.1:7311]", "peers: needs peerListenAddress"},
      {"peerService: spoke-peers.spoke.svc:7311", "peerService: needs peerListenAddress"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t\npeers: [a:1]",
       "peerTlsCertFile: must be an absolute path"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t\npeers: [a:1]\npeerTlsCertFile: /c\n"
       "peerTlsKeyFile: /k",
       "peerTlsCaFile: must be an absolute path"},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t\npeers: [a:1]\npeerPlaintext: true\n"
       "peerTlsCaFile: /ca",
       "peerPlaintext: is true, but peerTls* files are set too"},
      {"peerPlaintext: sometimes", "peerPlaintext:"},
      {"peerTimeoutMs: 0", "peerTimeoutMs:"},
      {"peerKeepLocalCopy: often", "peerKeepLocalCopy:"},
  };
  for (const auto& c : cases) {
    std::string err = ErrorOf(c.yaml);
    EXPECT_NE(err.find("agent.yaml: " + c.field), std::string::npos)
        << "yaml: " << c.yaml << "\nerror: " << err;
  }
}

// Every refusal says which key, which value and what would be accepted instead.
TEST(AgentConfigTest, RefusalsNameKeyValueAndWhatIsAccepted) {
  struct Case {
    std::string yaml;
    std::vector<std::string> parts;  // each must be in the error
  };
  const Case cases[] = {
      {"cacheSizeBytes: lots", {"cacheSizeBytes:", "'lots'", "GiB", "MB"}},
      {"cacheSizeBytes: 10XB", {"cacheSizeBytes:", "'XB'", "'10XB'", "KiB"}},
      {"cacheSizeBytes: 1MiB",
       {"cacheSizeBytes:", "64 blocks", "67108864 bytes (64 MiB)", "got 1048576"}},
      {"cacheSizeBytes: 0", {"cacheSizeBytes:", "at least 1 byte", "got '0'"}},
      {"blockSizeBytes: 4Ki",
       {"blockSizeBytes:", "65536 bytes (64 KiB)", "1048576 bytes (1 MiB)", "'4Ki'"}},
      {"blockSizeBytes: 100000", {"blockSizeBytes:", "128KiB", "100000"}},
      {"readAheadMaxBytes: 1Ki",
       {"readAheadMaxBytes:", "one block", "1048576", "got 1024 bytes (1 KiB)"}},
      {"cacheSizeBytes: 100Mi\nreadAheadMaxBytes: 64Mi",
       {"readAheadMaxBytes:", "52428800 bytes (50 MiB)", "got 67108864", "leave it unset"}},
      {"kernelReadAheadBytes: 1000",
       {"kernelReadAheadBytes:", "multiple of 4096", "got 1000 bytes"}},
      {"memoryBudgetBytes: 8Mi",
       {"memoryBudgetBytes:", "16777216 bytes (16 MiB)", "8388608 bytes (8 MiB)"}},
      {"hub: {connections: 0}", {"hub.connections:", "1..64", "0"}},
      {"hub: {connections: many}", {"hub.connections:", "1..64", "'many'"}},
      {"socket: /" + std::string(120, 's'), {"socket:", "107", std::string(120, 's')}},
      {"cacheSize: 10Gi", {"cacheSize: unknown setting", "did you mean cacheSizeBytes?"}},
      {"readAheadMaxByte: 1Mi", {"readAheadMaxByte:", "did you mean readAheadMaxBytes?"}},
      {"kernelReadAhead: 1Mi", {"did you mean kernelReadAheadBytes?"}},
      {"hub: {conections: 4}", {"hub.conections:", "did you mean connections?", "retries"}},
      {"peerListenAddress: 0.0.0.0:7311\npeerTokenFile: /t",
       {"peerListenAddress:", "0.0.0.0:7311", "peers (a list of host:port)", "peerService"}},
      {"peers: [10.0.0.1:7311]", {"peers:", "needs peerListenAddress", "host:port"}},
  };
  for (const auto& c : cases) {
    std::string err = ErrorOf(c.yaml);
    for (const std::string& part : c.parts) {
      EXPECT_NE(err.find(part), std::string::npos)
          << "yaml: " << c.yaml << "\nmissing: " << part << "\nerror: " << err;
    }
  }
}

// Sizes in the units people write (common/config.h ParseSize), in every size key.
TEST(AgentConfigTest, SizesInEveryUnit) {
  auto c = Parse(
      "cacheSizeBytes: 98 MB\nblockSizeBytes: 512KiB\nreadAheadMaxBytes: 1.5MiB\n"
      "kernelReadAheadBytes: 4096k\nmemoryBudgetBytes: 1.5gib\n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->cache_size_bytes, 98'000'000u);
  EXPECT_EQ(c->block_size_bytes, 512u << 10);
  EXPECT_EQ(c->read_ahead_max_bytes, 3u << 19);
  EXPECT_EQ(c->kernel_read_ahead_bytes, std::optional<uint64_t>(4'096'000));
  EXPECT_EQ(c->memory_budget_bytes, 3ull << 29);
}

// Any cache the agent accepts starts with no other key set: the defaults bounded by the
// cache size follow it. A value set that breaks the bound is still refused.
TEST(AgentConfigTest, SmallCachesStartWithDefaults) {
  struct Case {
    std::string size;
    uint64_t bytes;
  };
  for (const Case& k :
       {Case{"64MiB", 64ull << 20}, Case{"64Mi", 64ull << 20}, Case{"98MB", 98'000'000},
        Case{"98M", 98'000'000}, Case{"1GiB", 1ull << 30}, Case{"10Gi", 10ull << 30}}) {
    auto c = Parse("cacheSizeBytes: " + k.size + "\n");
    ASSERT_TRUE(c) << k.size << ": " << c.error().message();
    EXPECT_EQ(c->cache_size_bytes, k.bytes) << k.size;
    EXPECT_LE(c->read_ahead_max_bytes, k.bytes / 2) << k.size;
    EXPECT_GE(c->read_ahead_max_bytes, c->block_size_bytes) << k.size;
    EXPECT_EQ(c->read_ahead_max_bytes % c->block_size_bytes, 0u) << k.size;
    EXPECT_EQ(c->read_ahead_max_bytes, std::min<uint64_t>(64ull << 20, k.bytes / 2 >> 20 << 20))
        << k.size;
    const uint64_t prefetch = DefaultPrefetchBytesMax(k.bytes, c->read_ahead_max_bytes);
    EXPECT_LE(prefetch, std::max(k.bytes / 4, c->read_ahead_max_bytes)) << k.size;
    EXPECT_GE(prefetch, c->read_ahead_max_bytes) << k.size;
  }
  // 98M = 98,000,000 bytes: half is 49,000,000, so the window is 46 MiB (whole blocks).
  EXPECT_EQ(Parse("cacheSizeBytes: 98M\n")->read_ahead_max_bytes, 46ull << 20);
  EXPECT_EQ(Parse("cacheSizeBytes: 64MiB\n")->read_ahead_max_bytes, 32ull << 20);
  EXPECT_EQ(Parse("cacheSizeBytes: 1GiB\n")->read_ahead_max_bytes, 64ull << 20);
  // Small blocks: 64 blocks of 64 KiB is the smallest cache; the window is half of it.
  auto tiny = Parse("cacheSizeBytes: 4MiB\nblockSizeBytes: 64KiB\n");
  ASSERT_TRUE(tiny) << tiny.error().message();
  EXPECT_EQ(tiny->read_ahead_max_bytes, 2ull << 20);
  // The prefetch in flight: 256 MiB from a 1 GiB cache up, a quarter of a smaller one.
  EXPECT_EQ(DefaultPrefetchBytesMax(10ull << 30, 64ull << 20), 256ull << 20);
  EXPECT_EQ(DefaultPrefetchBytesMax(1ull << 30, 64ull << 20), 256ull << 20);
  EXPECT_EQ(DefaultPrefetchBytesMax(64ull << 20, 32ull << 20), 32ull << 20);
  // Explicit values keep being checked against the same bound.
  EXPECT_NE(ErrorOf("cacheSizeBytes: 98M\nreadAheadMaxBytes: 64MiB\n")
                .find("readAheadMaxBytes: must be at most half of cacheSizeBytes"),
            std::string::npos);
  auto explicit_ok = Parse("cacheSizeBytes: 98M\nreadAheadMaxBytes: 48MB\n");
  ASSERT_TRUE(explicit_ok) << explicit_ok.error().message();
  EXPECT_EQ(explicit_ok->read_ahead_max_bytes, 48'000'000u);
}

TEST(AgentConfigTest, FuseKeeperSocketDefaultAndOff) {
  auto d = Parse("cacheSizeBytes: 1GiB\n");
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->fuse_keeper_socket, std::string(kDefaultFuseKeeperSocket));
  EXPECT_TRUE(d->fuse_keeper_start);
  // An explicit empty value turns the keeper off; an empty key (YAML null) is the default.
  for (const char* off : {"fuseKeeperSocket: \"\"\n", "fuseKeeperSocket: ''\n"}) {
    auto c = Parse(off);
    ASSERT_TRUE(c) << off << c.error().message();
    EXPECT_EQ(c->fuse_keeper_socket, "") << off;
  }
  auto null_value = Parse("fuseKeeperSocket:\n");
  ASSERT_TRUE(null_value) << null_value.error().message();
  EXPECT_EQ(null_value->fuse_keeper_socket, "/run/spoke/fuse-keeper.sock");
  auto own = Parse("fuseKeeperSocket: /tmp/k.sock\nfuseKeeperStart: false\n");
  ASSERT_TRUE(own) << own.error().message();
  EXPECT_EQ(own->fuse_keeper_socket, "/tmp/k.sock");
  EXPECT_FALSE(own->fuse_keeper_start);
}

TEST(AgentConfigTest, SyntaxErrorNamesTheFile) {
  EXPECT_NE(ErrorOf("socket: [unclosed").find("agent.yaml"), std::string::npos);
}

TEST(AgentConfigTest, MissingFileIsNotFound) {
  auto c = LoadAgentConfig("/nonexistent/agent.yaml");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kNotFound);
}

TEST(ParseHostPortTest, Forms) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("[::1]:9810", "f", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9810);
  EXPECT_FALSE(ParseHostPort("::1:9810", "f", &host, &port));
  EXPECT_FALSE(ParseHostPort(":9810", "f", &host, &port));
  EXPECT_FALSE(ParseHostPort("h:0", "f", &host, &port));
}

TEST(AgentConfigTest, EvictionPolicyMustBeAKnownName) {
  auto c = Parse("evictionPolicy: nothrash\n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->eviction_policy, "nothrash");
  auto bad = Parse("evictionPolicy: fifo\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("evictionPolicy"), std::string::npos);
}

}  // namespace
TEST(AgentConfigTest, MountRootsDefaultAndSet) {
  auto d = Parse("");
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->mount_roots, (std::vector<std::string>{"/var/lib/kubelet", "/mnt/spoke"}));
  auto c = Parse("mountRoots: [/var/lib/kubelet, /srv/mnt]");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->mount_roots, (std::vector<std::string>{"/var/lib/kubelet", "/srv/mnt"}));
}

// The chart writes metricsAddress: "${POD_IP}:9810": one address, not every interface.
TEST(AgentConfigTest, PeersOffByDefault) {
  auto c = Parse("");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->peer.enabled());
  EXPECT_EQ(c->peer.timeout_ms, 2000);
  EXPECT_TRUE(c->peer.keep_local_copy);
}

TEST(AgentConfigTest, PeerKeys) {
  auto c = Parse(R"(
peerListenAddress: 0.0.0.0:7311
peers: ["10.0.0.1:7311", "[fd00::2]:7311"]
peerService: spoke-peers.spoke.svc.cluster.local:7311
peerTokenFile: /etc/spoke/peer/token
peerTimeoutMs: 500
peerKeepLocalCopy: false
peerTlsCertFile: /etc/spoke/peer-tls/tls.crt
peerTlsKeyFile: /etc/spoke/peer-tls/tls.key
peerTlsCaFile: /etc/spoke/peer-tls/ca.crt
peerTlsServerName: peers.example
)");
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_TRUE(c->peer.enabled());
  EXPECT_EQ(c->peer.listen_address, "0.0.0.0:7311");
  EXPECT_EQ(c->peer.peers, (std::vector<std::string>{"10.0.0.1:7311", "[fd00::2]:7311"}));
  EXPECT_EQ(c->peer.service, "spoke-peers.spoke.svc.cluster.local:7311");
  EXPECT_EQ(c->peer.token_file, "/etc/spoke/peer/token");
  EXPECT_EQ(c->peer.timeout_ms, 500);
  EXPECT_FALSE(c->peer.keep_local_copy);
  EXPECT_EQ(c->peer.tls_cert_file, "/etc/spoke/peer-tls/tls.crt");
  EXPECT_EQ(c->peer.tls_key_file, "/etc/spoke/peer-tls/tls.key");
  EXPECT_EQ(c->peer.tls_ca_file, "/etc/spoke/peer-tls/ca.crt");
  EXPECT_EQ(c->peer.tls_server_name, "peers.example");
  EXPECT_EQ(c->peer.tls_identity, "name");  // the default: a shared certificate
  EXPECT_FALSE(c->peer.plaintext);
  auto by_address = Parse(
      "peerListenAddress: 0.0.0.0:7311\npeers: [\"10.0.0.1:7311\"]\npeerTokenFile: /t\n"
      "peerTlsCertFile: /c\npeerTlsKeyFile: /k\npeerTlsCaFile: /ca\npeerTlsIdentity: address\n");
  ASSERT_TRUE(by_address) << by_address.error().ToString();
  EXPECT_EQ(by_address->peer.tls_identity, "address");
  auto bad = Parse("peerTlsIdentity: serverName\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("peerTlsIdentity"), std::string::npos);
  auto plain = Parse(
      "peerListenAddress: 0.0.0.0:7311\npeers: [\"10.0.0.1:7311\"]\npeerTokenFile: /t\n"
      "peerPlaintext: true\n");
  ASSERT_TRUE(plain) << plain.error().ToString();
  EXPECT_TRUE(plain->peer.plaintext);
}

TEST(AgentConfigTest, MetricsAddressOnThePodIp) {
  auto env = [](const char* name) -> const char* {
    return std::string_view(name) == "POD_IP" ? "10.1.2.3" : nullptr;
  };
  auto v6 = [](const char* name) -> const char* {
    return std::string_view(name) == "POD_IP" ? "fd00::7" : nullptr;
  };
  auto none = [](const char*) -> const char* { return nullptr; };
  EXPECT_EQ(ExpandMetricsAddress("${POD_IP}:9810", env).value_or(""), "10.1.2.3:9810");
  EXPECT_EQ(ExpandMetricsAddress("${POD_IP}:9810", v6).value_or(""), "[fd00::7]:9810");
  EXPECT_EQ(ExpandMetricsAddress("127.0.0.1:9810", none).value_or(""), "127.0.0.1:9810");
  auto missing = ExpandMetricsAddress("${POD_IP}:9810", none);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("POD_IP"), std::string::npos);
  // The default never listens on all interfaces.
  auto d = Parse("");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->MetricsHost(), "127.0.0.1");
}

}  // namespace spoke::agent
