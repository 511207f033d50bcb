// The real binaries end to end: nfs-ganesha (TestHub) behind a 30 ms-each-way WAN proxy,
// spoke-cache-agent as a process, spokectl to mount/warm up/evict, reads through the real
// FUSE mount compared byte for byte with the export, hub bytes read from /metrics. Then the
// agent restarts (SIGTERM, and kill -9): the mount comes back by itself and stays warm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/process.h"

namespace spoke {
namespace {

namespace fs = std::filesystem;
using spoke::testing::ReadWholeFile;

void DropPageCache() {
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

class AgentIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    hub_ = spoke::testing::TestHub::Start();
    ASSERT_NE(hub_, nullptr);
    wan_ = spoke::testing::WanProxy::Start(*hub_, 30);
    ASSERT_NE(wan_, nullptr);
    work_ = std::make_unique<spoke::testing::TempDir>("spoke-agent-it");
    mnt_ = work_->path() + "/mnt";
    socket_ = work_->path() + "/agent.sock";
    metrics_port_ = spoke::testing::FreePort();
    std::ofstream(work_->path() + "/agent.yaml")
        << "socket: " << socket_ << "\n"
        << "cacheDir: " << work_->path() << "/cache\n"
        << "cacheSizeBytes: 3Gi\n"  // 1 MiB slots: every small file takes one
        << "stateDir: " << work_->path() << "/state\n"
        << "mountRoots: [" << work_->path() << "]\n"
        << "metricsAddress: 127.0.0.1:" << metrics_port_ << "\n"
        << "logLevel: info\n"
        << "hub: {connections: 4, inflightPerConnection: 64, requestTimeoutSeconds: 5}\n"
        // No fd keeper (the default starts a shared one at /run/spoke): SIGTERM ends the mounts.
        << "fuseKeeperSocket: \"\"\n";
    MakeTree();
  }

  void TearDown() override {
    if (agent_pid_ > 0) {
      Spokectl("unmount " + mnt_);
      StopAgent(SIGTERM);
    }
    if (!mnt_.empty()) ::umount2(mnt_.c_str(), MNT_DETACH);  // whatever is left
    work_.reset();
    wan_.reset();
    hub_.reset();
  }

  // 2000 small files in 20 directories and three large ones, random bytes.
  void MakeTree() {
    std::mt19937_64 rng(42);
    auto blob = [&](size_t n) {
      std::string s(n, '\0');
      for (auto& c : s) c = static_cast<char>(rng());
      return s;
    };
    const std::string root = hub_->export_dir();
    for (int d = 0; d < 20; ++d) {
      std::string dir = "train/d" + std::to_string(d);
      fs::create_directories(root + "/" + dir);
      for (int f = 0; f < 100; ++f) {
        std::string rel = dir + "/s" + std::to_string(f) + ".bin";
        std::ofstream(root + "/" + rel, std::ios::binary) << blob(1 + rng() % 20000);
        small_.push_back(rel);
      }
    }
    fs::create_directories(root + "/shards");
    for (auto [name, size] : {std::pair<const char*, size_t>{"shards/a.tar", 48u << 20},
                              {"shards/b.tar", (9u << 20) + 123},
                              {"shards/c.tar", 1}}) {
      std::ofstream(root + "/" + name, std::ios::binary) << blob(size);
      large_.push_back(name);
    }
  }

  std::pair<int, std::string> Spokectl(const std::string& args) {
    return spoke::testing::Spokectl(socket_, args);
  }

  void StartAgent() {
    agent_pid_ = spoke::testing::StartAgent(work_->path() + "/agent.yaml", socket_,
                                            work_->path() + "/agent.log");
    if (agent_pid_ < 0) FAIL() << "spoke-cache-agent did not come up; log:\n" << AgentLog();
  }

  void StopAgent(int sig) {
    ASSERT_GT(agent_pid_, 0);
    int status = spoke::testing::StopProcess(agent_pid_, sig);
    if (sig == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << AgentLog();
    }
  }

  std::string AgentLog() { return ReadWholeFile(work_->path() + "/agent.log"); }

  // Sum of every series of `name` in /metrics; -1 when the metric is absent.
  double Metric(const std::string& name) {
    httplib::Client http("127.0.0.1", metrics_port_);
    auto res = http.Get("/metrics");
    return res && res->status == 200 ? spoke::testing::MetricSum(res->body, name) : -1;
  }

  double HubBytes() {
    double v = Metric("spoke_hub_read_bytes_total");
    EXPECT_GE(v, 0) << "/metrics has no spoke_hub_read_bytes_total";
    return v;
  }

  // What the agent saw, for failure messages.
  std::string Diagnostics() {
    return "\nspokectl stats:\n" + Spokectl("stats").second + "\nagent log (tail):\n" +
           spoke::testing::ReadFileTail(work_->path() + "/agent.log", 6000);
  }

  // Reads every file through the mount (16 readers) and compares with the export.
  void ReadAndCompare(const std::vector<std::string>& files) {
    DropPageCache();
    auto start = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    std::atomic<int> mismatches{0};
    std::mutex mu;
    std::vector<std::string> bad;
    std::vector<std::thread> readers;
    for (int t = 0; t < 16; ++t) {
      readers.emplace_back([&] {
        for (size_t i; (i = next++) < files.size();) {
          bool ok_mnt = false, ok_hub = false;
          std::string got = ReadWholeFile(mnt_ + "/" + files[i], &ok_mnt);
          std::string want = ReadWholeFile(hub_->export_dir() + "/" + files[i], &ok_hub);
          if (!ok_mnt || !ok_hub || got != want) {
            mismatches++;
            std::lock_guard<std::mutex> l(mu);
            if (bad.size() < 5) bad.push_back(files[i] + (ok_mnt ? " differs" : " unreadable"));
          }
        }
      });
    }
    for (auto& t : readers) t.join();
    std::cout << "[ pass     ] " << files.size() << " files in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s, hub bytes so far " << Metric("spoke_hub_read_bytes_total") << std::endl;
    EXPECT_EQ(mismatches.load(), 0) << "e.g. " << (bad.empty() ? "" : bad[0]);
  }

  std::vector<std::string> AllFiles() {
    std::vector<std::string> all = small_;
    all.insert(all.end(), large_.begin(), large_.end());
    return all;
  }

  // Waits until the agent serves the mount again (restore after a restart).
  void WaitForRestoredMount() {
    for (int i = 0; i < 300; ++i) {
      auto [rc, out] = Spokectl("status");
      if (rc == 0 && out.find(mnt_) != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "the mount was not restored; log:\n" << AgentLog();
  }

  std::unique_ptr<spoke::testing::TestHub> hub_;
  std::unique_ptr<spoke::testing::WanProxy> wan_;
  std::unique_ptr<spoke::testing::TempDir> work_;
  std::string mnt_, socket_;
  int metrics_port_ = 0;
  pid_t agent_pid_ = -1;
  std::vector<std::string> small_, large_;
};

TEST_F(AgentIntegrationTest, ReadsThroughTheCacheAndSurvivesRestarts) {
  StartAgent();
  HubAddress wan = wan_->address();
  std::string url = "'nfs://127.0.0.1" + wan.share + "?nfsport=" + std::to_string(wan.nfs_port) +
                    "&mountport=" + std::to_string(wan.mount_port) + "'";
  auto [rc, out] = Spokectl("mount " + url + " " + mnt_);
  if (rc != 0 && out.find("no FUSE mounter") != std::string::npos) {
    GTEST_SKIP() << "this build has no FUSE mounter yet";
  }
  ASSERT_EQ(rc, 0) << out << AgentLog();
  EXPECT_NE(Metric("spoke_mounts"), -1);
  EXPECT_EQ(Metric("spoke_mounts"), 1);

  // Pass 1: cold, over the WAN.
  ReadAndCompare(AllFiles());
  double after_cold = HubBytes();
  EXPECT_GT(after_cold, 48 << 20);

  // Pass 2: everything from the cache.
  ReadAndCompare(AllFiles());
  EXPECT_EQ(HubBytes(), after_cold) << "the second pass read from the hub" << Diagnostics();

  // Clean restart: the mount comes back by itself, the cache is still warm.
  StopAgent(SIGTERM);
  StartAgent();
  WaitForRestoredMount();
  ReadAndCompare(AllFiles());
  EXPECT_EQ(HubBytes(), 0) << "warm after a clean restart";

  // Crash: kill -9 leaves a dead FUSE mount and an index that was not persisted.
  StopAgent(SIGKILL);
  struct stat st;
  bool dead = ::stat(mnt_.c_str(), &st) != 0;
  std::cout << "[ kill -9  ] mount after the crash: "
            << (dead ? std::string(std::strerror(errno)) : "still answers stat") << std::endl;
  StartAgent();
  WaitForRestoredMount();
  ASSERT_EQ(::stat(mnt_.c_str(), &st), 0) << strerror(errno);
  ReadAndCompare(AllFiles());
  EXPECT_EQ(HubBytes(), 0) << "warm after a crash (index rebuilt by scanning)";
  // The dead agent's FUSE mount was found and detached before mounting again.
  EXPECT_GE(Metric("spoke_stale_mounts_cleaned_total"), 1) << Diagnostics();

  // spokectl stats / evict / warmup.
  std::tie(rc, out) = Spokectl("stats " + mnt_);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("read from hub"), std::string::npos) << out;
  std::tie(rc, out) = Spokectl("evict " + mnt_ + " shards");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("evicted"), std::string::npos);
  EXPECT_EQ(out.find("evicted 0 blocks"), std::string::npos) << out;
  double before = HubBytes();
  std::tie(rc, out) = Spokectl("warmup " + mnt_ + " shards");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("done 100%"), std::string::npos) << out;
  EXPECT_GE(HubBytes() - before, 48 << 20) << "warm-up fetched the evicted shards";
  // Its progress reached /metrics: what it cached, nothing left to go, one that ended well.
  EXPECT_GE(Metric("spoke_warmup_bytes_total"), 48 << 20);
  EXPECT_EQ(Metric("spoke_warmup_remaining_bytes"), 0);
  EXPECT_EQ(Metric("spoke_warmup_running"), 0);
  EXPECT_EQ(Metric("spoke_warmups_total"), 1);
  before = HubBytes();
  ReadAndCompare(large_);
  EXPECT_EQ(HubBytes(), before) << "warm-up left the shards in the cache";
  // By volume id with JSON lines, as the warm-up controller's worker pods call it: the last
  // line is done, with the shards' bytes, all of them already cached.
  std::tie(rc, out) = Spokectl("stats " + mnt_);
  std::smatch id;
  ASSERT_TRUE(std::regex_search(out, id, std::regex(R"(volume\s+(\S+))"))) << out;
  // A copy: the match points into `out`, which the next calls replace.
  const std::string volume_id = id[1].str();
  std::tie(rc, out) = Spokectl("warmup --volume '" + volume_id + "' shards --json");
  ASSERT_EQ(rc, 0) << out;
  std::string last = out.substr(out.rfind('{'));
  EXPECT_NE(last.find("\"done\":true"), std::string::npos) << last;
  EXPECT_NE(last.find("\"bytesFromHub\":0,"), std::string::npos) << last;
  std::smatch done;
  ASSERT_TRUE(std::regex_search(last, done, std::regex(R"("bytesDone":(\d+))"))) << last;
  EXPECT_GE(std::stoull(done[1].str()), 48ull << 20) << last;
  // With a rate limit and a verify pass, as a SpokeWarmup with rateLimit and verify runs it:
  // every cached block reads back good, none is fetched again.
  std::tie(rc, out) =
      Spokectl("warmup --volume '" + volume_id + "' shards --json --rate 500Mi --verify");
  ASSERT_EQ(rc, 0) << out;
  last = out.substr(out.rfind('{'));
  EXPECT_NE(last.find("\"done\":true"), std::string::npos) << last;
  EXPECT_NE(last.find("\"blocksRepaired\":0,"), std::string::npos) << last;
  std::smatch verified;
  ASSERT_TRUE(std::regex_search(last, verified, std::regex(R"("blocksVerified":(\d+))"))) << last;
  EXPECT_GE(std::stoull(verified[1].str()), 48u) << last;  // 48 MiB of 1 MiB blocks at least
  std::tie(rc, out) = Spokectl("warmup --volume '" + volume_id + "' shards --rate 0");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--rate: '0' is zero"), std::string::npos) << out;

  std::tie(rc, out) = Spokectl("unmount " + mnt_);
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Spokectl("status");
  EXPECT_EQ(out, "no volumes mounted\n");
}

// The same user path over an NFSv4.1 hub (as Amazon EFS: the NFS port only, no MOUNT
// protocol): `spokectl mount` of a version=4.1 URL through the 60 ms WAN, every byte compared,
// the second pass from the cache, and after kill -9 the mount restored and still warm.
TEST_F(AgentIntegrationTest, ReadsOverNfs41ThroughTheCacheAndSurvivesACrash) {
  StartAgent();
  HubAddress wan = wan_->address();
  std::string url =
      "'nfs://127.0.0.1" + wan.share + "?version=4.1&nfsport=" + std::to_string(wan.nfs_port) + "'";
  auto [rc, out] = Spokectl("mount " + url + " " + mnt_);
  ASSERT_EQ(rc, 0) << out << AgentLog();
  std::tie(rc, out) = Spokectl("status");
  ASSERT_EQ(rc, 0) << out;

  ReadAndCompare(AllFiles());
  double after_cold = HubBytes();
  EXPECT_GT(after_cold, 48 << 20);
  ReadAndCompare(AllFiles());
  EXPECT_EQ(HubBytes(), after_cold) << "the second pass read from the hub" << Diagnostics();

  StopAgent(SIGKILL);
  StartAgent();
  WaitForRestoredMount();
  ReadAndCompare(AllFiles());
  EXPECT_EQ(HubBytes(), 0) << "warm after a crash" << Diagnostics();
  EXPECT_NE(AgentLog().find("nfs=4.1"), std::string::npos) << "the restored volume is NFSv4.1";
}

}  // namespace
}  // namespace spoke
