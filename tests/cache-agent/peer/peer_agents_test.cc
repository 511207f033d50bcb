// Cache sharing with the real binaries: three spoke-cache-agent processes, each in a network
// namespace of its own (a "node": own address, cache and state dirs, FUSE mount), joined by a
// bridge in a fourth namespace that holds the hub, nfs-ganesha behind the WAN delay proxy. Readers
// on the three mounts read one dataset and check every file's sha256 against the export. Hub bytes
// are the agents' spoke_hub_read_bytes_total (/metrics).
//
//   - with peers, the cluster reads the dataset from the hub about once (<= 1.05x);
//   - without peers, each agent reads it itself (about 3x);
//   - an agent killed while the others read: their readers see no error;
//   - an agent corrupting the blocks it serves: receivers reject them (checksum) and read
//     the hub, readers see no error.
//
// Each agent has its own peer certificate (spoke-cache-agent mint-peer-cert), naming its node's
// address (peerTlsIdentity: address).
//
// Needs root and /dev/fuse (skipped otherwise). SPOKE_PEER_IT_NO_PEERS=1 runs the two-epoch
// test without peers, for comparison (figures only).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"
#include "tests/support/test_certs.h"

namespace spoke {
namespace {

namespace fs = std::filesystem;
using spoke::testing::Capture;
using namespace std::chrono_literals;

// "digest  path" lines of sha256sum -> path -> digest (paths relative to `root`).
std::map<std::string, std::string> Digests(const std::string& out, const std::string& root) {
  std::map<std::string, std::string> d;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.find("  ");
    if (sp != 64) continue;
    std::string path = line.substr(sp + 2);
    if (path.starts_with(root + "/")) path = path.substr(root.size() + 1);
    d[path] = line.substr(0, 64);
  }
  return d;
}

// The sum of every series of `name` in a Prometheus text exposition; 0 when there is none.
uint64_t MetricSum(const std::string& text, const std::string& name) {
  return static_cast<uint64_t>(std::max(0.0, spoke::testing::MetricSum(text, name)));
}

struct AgentProc {
  std::string dir, socket, mnt;
  uint16_t metrics_port = 0, peer_port = 0;
  pid_t pid = -1;
};

class PeerAgentsTest : public ::testing::Test {
 protected:
  static constexpr int kAgents = 3;

  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    std::string why;
    net_ = spoke::testing::NetTopology::Create(kAgents, &why);
    if (net_ == nullptr) GTEST_SKIP() << "no network namespaces: " << why;
    hub_ = spoke::testing::TestHub::Start(net_->hub_ns());
    ASSERT_NE(hub_, nullptr);
    // 60 ms round trip, on the bridge: the nodes reach the hub only through it.
    wan_ = spoke::testing::WanProxy::Start(*hub_, 30, net_->hub_ns(), net_->hub_ip());
    ASSERT_NE(wan_, nullptr);
    work_ = std::make_unique<spoke::testing::TempDir>("spoke-peers-it");
    token_file_ = work_->path() + "/peer-token";
    std::ofstream(token_file_) << "it-cluster-token-" << ::getpid() << "-0123456789\n";
    // Mutual TLS between the agents: a cluster CA, and a certificate per agent naming its
    // node's address, minted as the chart's init container does.
    ca_ = std::make_unique<spoke::testing::TestCa>(work_->path());
    MakeDataset();
    for (int i = 0; i < kAgents; ++i) {
      AgentProc a;
      a.dir = work_->path() + "/agent" + std::to_string(i);
      a.socket = a.dir + "/agent.sock";
      a.mnt = a.dir + "/mnt";
      a.metrics_port = spoke::testing::FreePort();
      a.peer_port = spoke::testing::FreePort();
      fs::create_directories(a.mnt);
      agents_.push_back(a);
      MintCert(i);
    }
  }

  // spoke-cache-agent mint-peer-cert into agent i's tls/ (tls.crt, tls.key, ca.crt).
  void MintCert(int i) {
    const std::string dir = agents_[i].dir + "/tls";
    fs::create_directories(dir);
    auto [rc, out] =
        Capture(spoke::testing::AgentBinary() + " mint-peer-cert --ca-cert " + ca_->ca_file() +
                " --ca-key " + ca_->ca_key_file() + " --out-dir " + dir + " --dns node-" +
                std::to_string(i) + " --ip " + net_->node_ip(i) + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
  }

  void TearDown() override {
    for (auto& a : agents_) {
      if (a.pid > 0) {
        Spokectl(a, "unmount " + a.mnt);
        spoke::testing::StopProcess(a.pid, SIGTERM);
      }
      ::umount2(a.mnt.c_str(), MNT_DETACH);
    }
    work_.reset();
    wan_.reset();
    hub_.reset();
    net_.reset();
  }

  // 24 files of 0.5..3.5 MiB of random bytes (about 48 MiB), not block-aligned.
  void MakeDataset() {
    std::mt19937_64 rng(17);
    const std::string root = hub_->export_dir();
    for (int d = 0; d < 3; ++d) {
      fs::create_directories(root + "/data/d" + std::to_string(d));
      for (int f = 0; f < 8; ++f) {
        std::string rel = "data/d" + std::to_string(d) + "/f" + std::to_string(f) + ".bin";
        std::string s((512 << 10) + rng() % (3 << 20), '\0');
        for (auto& c : s) c = static_cast<char>(rng());
        std::ofstream(root + "/" + rel, std::ios::binary) << s;
        files_.push_back(rel);
        dataset_bytes_ += s.size();
      }
    }
    std::string cmd = "cd " + root + " && sha256sum";
    for (const auto& f : files_) cmd += " " + f;
    auto [rc, out] = Capture(cmd);
    ASSERT_EQ(rc, 0) << out;
    want_ = Digests(out, "");
    ASSERT_EQ(want_.size(), files_.size());
  }

  // Cache geometry and peer policy of every agent of a test.
  struct Options {
    std::string cache_size = "512Mi";
    std::string block_size = "1Mi";
    std::string read_ahead = "64Mi";
    bool keep_local_copy = true;
  };
  Options options_;

  void WriteConfig(const AgentProc& a, bool peers) {
    std::ofstream c(a.dir + "/agent.yaml");
    c << "socket: " << a.socket << "\n"
      << "cacheDir: " << a.dir << "/cache\n"
      << "cacheSizeBytes: " << options_.cache_size << "\n"
      << "blockSizeBytes: " << options_.block_size << "\n"
      << "readAheadMaxBytes: " << options_.read_ahead << "\n"
      << "stateDir: " << a.dir << "/state\n"
      << "mountRoots: [" << a.dir << "]\n"
      << "metricsAddress: 127.0.0.1:" << a.metrics_port << "\n"
      << "logLevel: debug\n"
      << "fuseKeeperSocket: \"\"\n"
      << "hub: {connections: 2, inflightPerConnection: 16, requestTimeoutSeconds: 10}\n";
    if (peers) {
      c << "peerListenAddress: " << net_->node_ip(Index(a)) << ":" << a.peer_port << "\n"
        << "peerTokenFile: " << token_file_ << "\n"
        << "peerTlsCertFile: " << a.dir << "/tls/tls.crt\n"
        << "peerTlsKeyFile: " << a.dir << "/tls/tls.key\n"
        << "peerTlsCaFile: " << a.dir << "/tls/ca.crt\n"
        << "peerTlsIdentity: address\n"
        // Generous for a loaded test machine; the asker reads the hub after it either way.
        << "peerTimeoutMs: 5000\n"
        << "peerKeepLocalCopy: " << (options_.keep_local_copy ? "true" : "false") << "\n"
        << "peers: [";
      for (int i = 0; i < kAgents; ++i) {
        c << (i ? ", " : "") << "\"" << net_->node_ip(i) << ":" << agents_[i].peer_port << "\"";
      }
      c << "]\n";
    }
  }

  void StartAgent(AgentProc& a, bool peers, bool corrupt = false) {
    WriteConfig(a, peers);
    spoke::testing::SpawnOptions options;
    options.netns = net_->node_ns(Index(a));
    if (corrupt) options.env.push_back("SPOKE_TEST_FAULT_PEER_CORRUPT_SERVED_BLOCKS=1");
    a.pid =
        spoke::testing::StartAgent(a.dir + "/agent.yaml", a.socket, a.dir + "/agent.log", options);
    ASSERT_GT(a.pid, 0) << "spoke-cache-agent did not come up" << Log(a);
  }

  std::pair<int, std::string> Mount(const AgentProc& a) {
    HubAddress wan = wan_->address();
    std::string url = "'nfs://" + wan.server + wan.share +
                      "?nfsport=" + std::to_string(wan.nfs_port) +
                      "&mountport=" + std::to_string(wan.mount_port) + "'";
    return Spokectl(a, "mount " + url + " " + a.mnt + " --mode dataset");
  }

  // Starts every agent, then mounts the dataset on all of them at once: a block asked of a
  // peer that has not mounted the volume yet is refused (and read from the hub), as in a
  // cluster whose nodes mount at different times; mounting together keeps that window short.
  void StartAll(bool peers, int corrupt_index = -1) {
    for (int i = 0; i < kAgents; ++i) {
      StartAgent(agents_[i], peers, i == corrupt_index);
      if (HasFatalFailure()) return;
    }
    MountAll();
  }

  void MountAll() {
    std::vector<std::pair<int, std::string>> results(kAgents);
    std::vector<std::thread> t;
    for (int i = 0; i < kAgents; ++i) t.emplace_back([&, i] { results[i] = Mount(agents_[i]); });
    for (auto& th : t) th.join();
    for (int i = 0; i < kAgents; ++i) {
      ASSERT_EQ(results[i].first, 0) << results[i].second << Log(agents_[i]);
    }
  }

  int Index(const AgentProc& a) const { return static_cast<int>(&a - agents_.data()); }

  std::pair<int, std::string> Spokectl(const AgentProc& a, const std::string& args) {
    return spoke::testing::Spokectl(a.socket, args);
  }

  std::string Metrics(const AgentProc& a) {
    // The agent's metrics listen on its node's loopback.
    return Capture(spoke::testing::NetTopology::Enter(net_->node_ns(Index(a))) +
                   "curl -sf --max-time 5 http://127.0.0.1:" + std::to_string(a.metrics_port) +
                   "/metrics")
        .second;
  }

  uint64_t Sum(const std::string& name, bool skip_dead = true) {
    uint64_t s = 0;
    for (auto& a : agents_) {
      if (skip_dead && a.pid <= 0) continue;
      s += MetricSum(Metrics(a), name);
    }
    return s;
  }

  // Whether the agent still runs, and its log.
  std::string State(AgentProc& a) {
    int status = 0;
    if (a.pid > 0 && ::waitpid(a.pid, &status, WNOHANG) == a.pid) {
      a.pid = -1;
      return "\nagent exited: status " + std::to_string(status) + Log(a);
    }
    return Log(a);
  }

  std::string Log(const AgentProc& a) {
    return "\n" + a.dir + "/agent.log (tail):\n" +
           spoke::testing::ReadFileTail(a.dir + "/agent.log", 6000);
  }

  // Reads every file of the dataset through agent `i`'s mount (an order of its own) and
  // checks each sha256. Returns the number of files missing or wrong; `detail` says which.
  int ReadAndVerify(int i, std::string* detail) {
    std::vector<std::string> order = files_;
    std::shuffle(order.begin(), order.end(), std::mt19937(i + 1));
    std::string cmd = "sha256sum";
    for (const auto& f : order) cmd += " " + agents_[i].mnt + "/" + f;
    auto [rc, out] = Capture(cmd);
    auto got = Digests(out, agents_[i].mnt);
    int bad = 0;
    for (const auto& [f, d] : want_) {
      auto it = got.find(f);
      if (it == got.end() || it->second != d) {
        bad++;
        if (detail->size() < 2000) *detail += f + (it == got.end() ? " unread; " : " wrong; ");
      }
    }
    if (rc != 0 && detail->size() < 4000) *detail += "sha256sum: " + out.substr(0, 1000);
    return bad;
  }

  // Readers on the agents in `which`, in parallel; the failures per reader.
  std::vector<int> ReadEverywhere(const std::vector<int>& which,
                                  std::vector<std::string>* details) {
    std::vector<int> bad(kAgents, 0);
    details->assign(kAgents, "");
    std::vector<std::thread> t;
    for (int i : which) t.emplace_back([&, i] { bad[i] = ReadAndVerify(i, &(*details)[i]); });
    for (auto& th : t) th.join();
    return bad;
  }

  std::unique_ptr<spoke::testing::NetTopology> net_;  // destroyed last: the processes run in it
  std::unique_ptr<spoke::testing::TestHub> hub_;
  std::unique_ptr<spoke::testing::WanProxy> wan_;
  std::unique_ptr<spoke::testing::TempDir> work_;
  std::string token_file_;
  std::unique_ptr<spoke::testing::TestCa> ca_;
  std::vector<AgentProc> agents_;
  std::vector<std::string> files_;
  std::map<std::string, std::string> want_;
  uint64_t dataset_bytes_ = 0;
};

TEST_F(PeerAgentsTest, WithPeersTheClusterReadsTheDatasetFromTheHubOnce) {
  StartAll(true);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  auto bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i) EXPECT_EQ(bad[i], 0) << "reader " << i << ": " << details[i];
  uint64_t hub = Sum("spoke_hub_read_bytes_total");
  double ratio = static_cast<double>(hub) / static_cast<double>(dataset_bytes_);
  std::printf(
      "[peers] dataset %llu bytes, hub bytes (3 agents) %llu = %.3fx, peer hit bytes %llu, "
      "fallbacks %llu, checksum rejects %llu\n",
      (unsigned long long)dataset_bytes_, (unsigned long long)hub, ratio,
      (unsigned long long)Sum("spoke_peer_hit_bytes_total"),
      (unsigned long long)Sum("spoke_peer_fallbacks_total"),
      (unsigned long long)Sum("spoke_peer_checksum_rejects_total"));
  for (auto& a : agents_) {
    std::istringstream m(Metrics(a));
    for (std::string line; std::getline(m, line);) {
      if (line.starts_with("spoke_peer_fallbacks_total") ||
          line.starts_with("spoke_cache_put_failures_total") ||
          line.starts_with("spoke_hub_read_bytes_total")) {
        std::printf("  %s: %s\n", a.dir.substr(a.dir.rfind('/') + 1).c_str(), line.c_str());
      }
    }
  }
  // Why asks ended at the hub (debug log), a few per agent.
  for (auto& a : agents_) {
    std::istringstream l(spoke::testing::ReadWholeFile(a.dir + "/agent.log"));
    int shown = 0;
    for (std::string line; std::getline(l, line) && shown < 5;) {
      if (line.find("peer ask failed") != std::string::npos) {
        std::printf("  %s\n", line.c_str());
        shown++;
      }
    }
  }
  EXPECT_GE(hub, dataset_bytes_);  // every byte came from the hub at least once
  EXPECT_LE(ratio, 1.05) << Log(agents_[0]);
  for (auto& a : agents_) {
    std::string m = Metrics(a);
    EXPECT_GT(MetricSum(m, "spoke_peer_hits_total"), 0u) << a.dir;
    EXPECT_GT(MetricSum(m, "spoke_peer_served_blocks_total"), 0u) << a.dir;
  }
  EXPECT_EQ(Sum("spoke_peer_checksum_rejects_total"), 0u);
  // Each agent's certificate names its node's address, which its peers dialed and checked.
  EXPECT_EQ(Sum("spoke_peer_identity_failures_total"), 0u);
}

TEST_F(PeerAgentsTest, AnAgentHoldingAnotherAgentsCertificateIsNotAskedAndReadersSeeNoError) {
  // Agent 2 presents agent 1's certificate (and key): it names 10.77.0.12, not agent 2's node.
  for (const char* f : {"tls.crt", "tls.key"}) {
    fs::copy_file(agents_[1].dir + "/tls/" + f, agents_[2].dir + "/tls/" + f,
                  fs::copy_options::overwrite_existing);
  }
  StartAll(true);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  auto bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i) EXPECT_EQ(bad[i], 0) << "reader " << i << ": " << details[i];
  // Askers dialing agent 2's address refuse its certificate in the handshake: it serves
  // nothing, and what it owns is read from the hub instead.
  EXPECT_EQ(MetricSum(Metrics(agents_[2]), "spoke_peer_served_blocks_total"), 0u);
  for (int i : {0, 1}) {
    std::string m = Metrics(agents_[i]);
    std::printf("[borrowed certificate] agent %d: fallbacks %llu, hits %llu\n", i,
                (unsigned long long)MetricSum(m, "spoke_peer_fallbacks_total"),
                (unsigned long long)MetricSum(m, "spoke_peer_hits_total"));
    EXPECT_GT(MetricSum(m, "spoke_peer_fallbacks_total"), 0u) << agents_[i].dir;
    EXPECT_GT(MetricSum(m, "spoke_peer_served_blocks_total"), 0u) << agents_[i].dir;
  }
}

TEST_F(PeerAgentsTest, WithoutPeersEachAgentReadsTheDatasetFromTheHub) {
  StartAll(false);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  auto bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i) EXPECT_EQ(bad[i], 0) << "reader " << i << ": " << details[i];
  uint64_t hub = Sum("spoke_hub_read_bytes_total");
  double ratio = static_cast<double>(hub) / static_cast<double>(dataset_bytes_);
  std::printf("[no peers] dataset %llu bytes, hub bytes (3 agents) %llu = %.3fx\n",
              (unsigned long long)dataset_bytes_, (unsigned long long)hub, ratio);
  EXPECT_GE(hub, 3 * dataset_bytes_);
  EXPECT_EQ(Sum("spoke_peer_hits_total"), 0u);
}

TEST_F(PeerAgentsTest, ADatasetTwiceOneCacheFitsTheClusterAndEpochTwoSkipsTheHub) {
  // 256 KiB blocks and 24 MiB caches: the ~48 MiB dataset is twice one agent's cache but
  // fits the three. Without local copies each block is cached once, by its owner.
  options_.cache_size = "24Mi";
  options_.block_size = "256Ki";
  options_.read_ahead = "4Mi";
  options_.keep_local_copy = false;
  const bool peers = std::getenv("SPOKE_PEER_IT_NO_PEERS") == nullptr;
  StartAll(peers);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  auto bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i)
    EXPECT_EQ(bad[i], 0) << "epoch 1 reader " << i << ": " << details[i];
  const uint64_t epoch1 = Sum("spoke_hub_read_bytes_total");
  std::printf(
      "[2x one cache] epoch 1: blocks from peers %llu, served %llu, fallbacks %llu "
      "(busy %llu), cached bytes %llu\n",
      (unsigned long long)Sum("spoke_peer_hits_total"),
      (unsigned long long)Sum("spoke_peer_served_blocks_total"),
      (unsigned long long)Sum("spoke_peer_fallbacks_total"),
      (unsigned long long)Sum("spoke_peer_busy_refusals_total"),
      (unsigned long long)Sum("spoke_cache_bytes"));
  // Fresh FUSE mounts: the second epoch cannot be served from the kernel's page cache.
  for (auto& a : agents_) ASSERT_EQ(Spokectl(a, "unmount " + a.mnt).first, 0) << Log(a);
  MountAll();
  if (HasFatalFailure()) return;
  bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i) {
    EXPECT_EQ(bad[i], 0) << "epoch 2 reader " << i << ": " << details[i] << State(agents_[i]);
  }
  // An unmount drops the volume's series: these count from the new mounts on.
  const uint64_t epoch2 = Sum("spoke_hub_read_bytes_total");
  std::printf(
      "[2x one cache] dataset %llu bytes, hub bytes epoch 1 %llu (%.3fx), epoch 2 %llu "
      "(%.3fx)\n",
      (unsigned long long)dataset_bytes_, (unsigned long long)epoch1,
      static_cast<double>(epoch1) / static_cast<double>(dataset_bytes_), (unsigned long long)epoch2,
      static_cast<double>(epoch2) / static_cast<double>(dataset_bytes_));
  if (!peers) return;  // the comparison run: figures only
  EXPECT_LE(static_cast<double>(epoch1), 1.05 * static_cast<double>(dataset_bytes_));
  EXPECT_LE(static_cast<double>(epoch2), 0.05 * static_cast<double>(dataset_bytes_));
}

// A node that mounts the volume after the others have read it (a job's pods start minutes
// apart): the blocks it now owns are in the cache of their previous owners, which fetched them
// while it was not serving the volume. It asks them for their cached copy (cached_only), so
// its own read of the whole dataset costs the hub next to nothing instead of the third it owns.
TEST_F(PeerAgentsTest, ANodeThatMountsLateGetsItsBlocksFromTheirPreviousOwners) {
  for (int i = 0; i < kAgents; ++i) {
    StartAgent(agents_[i], true);
    if (HasFatalFailure()) return;
  }
  for (int i : {1, 2}) {
    auto [rc, out] = Mount(agents_[i]);
    ASSERT_EQ(rc, 0) << out << Log(agents_[i]);
  }
  std::vector<std::string> details;
  auto bad = ReadEverywhere({1, 2}, &details);
  for (int i : {1, 2}) ASSERT_EQ(bad[i], 0) << "reader " << i << ": " << details[i];
  const uint64_t before = MetricSum(Metrics(agents_[0]), "spoke_hub_read_bytes_total");
  auto [rc, out] = Mount(agents_[0]);
  ASSERT_EQ(rc, 0) << out << Log(agents_[0]);
  bad = ReadEverywhere({0}, &details);
  EXPECT_EQ(bad[0], 0) << details[0];
  const std::string m = Metrics(agents_[0]);
  const uint64_t late = MetricSum(m, "spoke_hub_read_bytes_total") - before;
  const double cached =
      spoke::testing::MetricSum(m, "spoke_peer_previous_owner_asks_total", "result=\"cached\"");
  const double ratio = static_cast<double>(late) / static_cast<double>(dataset_bytes_);
  std::printf(
      "[late mount] the late node read %llu bytes from the hub = %.3fx the dataset (it owns about "
      "1/3); previous-owner asks %llu, of them cached there %llu; peer hit bytes %llu\n",
      (unsigned long long)late, ratio,
      (unsigned long long)MetricSum(m, "spoke_peer_previous_owner_asks_total"),
      (unsigned long long)cached, (unsigned long long)MetricSum(m, "spoke_peer_hit_bytes_total"));
  EXPECT_LE(ratio, 0.05) << Log(agents_[0]);
  EXPECT_GT(cached, 0.0);
}

TEST_F(PeerAgentsTest, APeerKilledMidReadCostsTheOtherReadersNoError) {
  StartAll(true);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  std::vector<int> bad;
  std::thread readers([&] { bad = ReadEverywhere({0, 1}, &details); });
  // Kill agent 2 once it has served peers: blocks it owns are being asked of it.
  AgentProc& victim = agents_[2];
  bool served = false;
  for (int i = 0; i < 600 && !served; ++i) {
    served = MetricSum(Metrics(victim), "spoke_peer_served_blocks_total") > 0;
    if (!served) std::this_thread::sleep_for(50ms);
  }
  ::kill(victim.pid, SIGKILL);
  ::waitpid(victim.pid, nullptr, 0);
  victim.pid = -1;
  readers.join();
  EXPECT_TRUE(served) << "agent 2 never served a block before it was killed";
  EXPECT_EQ(bad[0], 0) << details[0];
  EXPECT_EQ(bad[1], 0) << details[1];
  std::printf(
      "[peer killed] survivors' fallbacks to the hub: %llu, hub bytes %llu (%.3fx)\n",
      (unsigned long long)Sum("spoke_peer_fallbacks_total"),
      (unsigned long long)Sum("spoke_hub_read_bytes_total"),
      static_cast<double>(Sum("spoke_hub_read_bytes_total")) / static_cast<double>(dataset_bytes_));
}

TEST_F(PeerAgentsTest, CorruptedBlocksFromAPeerAreRejectedAndReadFromTheHub) {
#ifndef SPOKE_TEST_FAULTS
  GTEST_SKIP() << "the agent is built without the test faults (SPOKE_TEST_FAULTS=OFF)";
#endif
  StartAll(true, /*corrupt_index=*/2);
  if (HasFatalFailure()) return;
  std::vector<std::string> details;
  auto bad = ReadEverywhere({0, 1, 2}, &details);
  for (int i = 0; i < kAgents; ++i) EXPECT_EQ(bad[i], 0) << "reader " << i << ": " << details[i];
  uint64_t rejects = MetricSum(Metrics(agents_[0]), "spoke_peer_checksum_rejects_total") +
                     MetricSum(Metrics(agents_[1]), "spoke_peer_checksum_rejects_total");
  uint64_t served_by_bad = MetricSum(Metrics(agents_[2]), "spoke_peer_served_blocks_total");
  std::printf("[corrupting peer] blocks it served %llu, rejected by checksum %llu\n",
              (unsigned long long)served_by_bad, (unsigned long long)rejects);
  // Every block agent 2 served was corrupted; none reached a reader (the sha256 checks
  // above), and the ones its askers waited for were counted as rejected.
  EXPECT_GT(rejects, 0u);
  EXPECT_LE(rejects, served_by_bad);
  EXPECT_EQ(MetricSum(Metrics(agents_[2]), "spoke_peer_checksum_rejects_total"), 0u);
}

}  // namespace
}  // namespace spoke
