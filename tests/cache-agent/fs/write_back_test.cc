// WriteBack against a hub whose WRITE replies the test hands out: writes are answered before
// the hub has them, the budget holds writers back, overlapping writes keep their order,
// network failures are sent again, and a refusal reaches the file's next call; in unstable
// mode, COMMITs make the answered writes durable and a hub restart has them sent again.
#include "cache-agent/fs/write_back.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <thread>

#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using std::chrono::milliseconds;

// WRITEs wait in a queue until the test replies to them (applied to the fake's files then).
class HeldRemote : public testing::FakeRemoteFs {
 public:
  struct Call {
    std::string path;
    uint64_t offset;
    std::shared_ptr<const std::vector<char>> data;
    WriteDone done;
  };
  void WriteAsAsync(const Credentials&, const std::string& path, uint64_t offset,
                    std::shared_ptr<const std::vector<char>> data, WriteDone done) override {
    MutexLock lock(mu);
    calls.push_back(Call{path, offset, std::move(data), std::move(done)});
    cv.notify_all();
  }
  size_t Waiting() {
    MutexLock lock(mu);
    return calls.size();
  }
  bool WaitFor(size_t n) {
    MutexLock lock(mu);
    return cv.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                         [&]() REQUIRES(mu) { return calls.size() >= n; });
  }
  // Replies to the oldest waiting WRITE: made (nullopt) or failed with `e`.
  void ReplyOldest(std::optional<Error> e = std::nullopt) {
    Call c;
    {
      MutexLock lock(mu);
      ASSERT_FALSE(calls.empty());
      c = std::move(calls.front());
      calls.pop_front();
    }
    if (e) return c.done(std::unexpected(*e));
    c.done(Write(c.path, c.offset, c.data->data(), c.data->size()));
  }
  void ReplyAll() {
    while (Waiting() > 0) ReplyOldest();
  }

  Mutex mu;
  CondVar cv;
  std::deque<Call> calls GUARDED_BY(mu);
};

WriteBack::Config SmallConfig() {
  WriteBack::Config c;
  c.budget_bytes = 2 << 20;
  c.retry_bound = milliseconds(5000);
  c.wait_bound = milliseconds(10000);
  c.first_backoff = milliseconds(1);
  return c;
}

const Credentials kWriter{1000, 1000, {}};

TEST(WriteBackTest, WritesAreAnsweredBeforeTheHubHasThemAndDrainWaitsForIt) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string a(1 << 20, 'a'), b(1 << 20, 'b');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, a.data(), a.size()));
  ASSERT_TRUE(wb.Write(1, kWriter, "f", a.size(), b.data(), b.size()));
  EXPECT_EQ(hub.Waiting(), 2u);  // both in flight at once
  EXPECT_TRUE(wb.Holds(1));
  EXPECT_EQ(hub.Data("f"), "");
  auto drained = std::async(std::launch::async, [&] { return wb.Drain(1); });
  EXPECT_EQ(drained.wait_for(milliseconds(100)), std::future_status::timeout);
  hub.ReplyAll();
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(hub.Data("f"), a + b);
  EXPECT_FALSE(wb.Holds(1));
  EXPECT_EQ(wb.held_bytes(), 0u);
}

TEST(WriteBackTest, AWriterWaitsForRoomInTheBudget) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string mib(1 << 20, 'x');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, mib.data(), mib.size()));
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 1 << 20, mib.data(), mib.size()));
  auto third = std::async(std::launch::async, [&] {
    return wb.Write(1, kWriter, "f", 2 << 20, mib.data(), mib.size());
  });
  EXPECT_EQ(third.wait_for(milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(hub.Waiting(), 2u);
  hub.ReplyOldest();
  EXPECT_TRUE(third.get());
  hub.ReplyAll();
  EXPECT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Data("f"), mib + mib + mib);
}

TEST(WriteBackTest, VolumesShareTheAgentsMemoryBudgetAndWaitForItsRoom) {
  HeldRemote hub;
  hub.PutFile("f", "");
  hub.PutFile("g", "");
  // Background share 2 MiB of 4: two volumes of 2 MiB each hold at most 2 MiB together.
  MemoryBudget memory(MemoryBudget::Config{.total_bytes = 4u << 20, .demand_reserve_share = 0.5});
  auto config = SmallConfig();
  config.memory = &memory;
  WriteBack a(hub, config), b(hub, config);
  std::string mib(1 << 20, 'x');
  ASSERT_TRUE(a.Write(1, kWriter, "f", 0, mib.data(), mib.size()));
  ASSERT_TRUE(a.Write(1, kWriter, "f", 1 << 20, mib.data(), mib.size()));
  EXPECT_EQ(memory.used(MemoryBudget::Use::kWriteBack), 2u << 20);
  auto other = std::async(std::launch::async,
                          [&] { return b.Write(2, kWriter, "g", 0, mib.data(), mib.size()); });
  EXPECT_EQ(other.wait_for(milliseconds(150)), std::future_status::timeout)
      << "its own volume is empty, the agent's budget is not";
  hub.ReplyOldest();
  EXPECT_TRUE(other.get());
  hub.ReplyAll();
  EXPECT_TRUE(a.Drain(1));
  EXPECT_TRUE(b.Drain(2));
  EXPECT_EQ(memory.used(MemoryBudget::Use::kWriteBack), 0u);
  EXPECT_EQ(hub.Data("g"), mib);
}

TEST(WriteBackTest, AWriteThatNeverGetsMemoryFailsNamingTheBudget) {
  HeldRemote hub;
  hub.PutFile("f", "");
  MemoryBudget memory(MemoryBudget::Config{.total_bytes = 2u << 20, .demand_reserve_share = 0.5});
  ASSERT_TRUE(memory.TryAcquire(MemoryBudget::Use::kPrefetch, 1u << 20));  // the share is full
  auto config = SmallConfig();
  config.memory = &memory;
  config.wait_bound = milliseconds(200);
  WriteBack wb(hub, config);
  std::string data(4096, 'x');
  auto w = wb.Write(1, kWriter, "f", 0, data.data(), data.size());
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), Code::kTimeout);
  EXPECT_NE(w.error().message().find("memoryBudgetBytes"), std::string::npos)
      << w.error().message();
  EXPECT_EQ(hub.Waiting(), 0u);
  EXPECT_EQ(memory.used(MemoryBudget::Use::kWriteBack), 0u);
  memory.Release(MemoryBudget::Use::kPrefetch, 1u << 20);
  EXPECT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyAll();
  EXPECT_TRUE(wb.Drain(1));
}

TEST(WriteBackTest, AFullBudgetThatNeverDrainsFailsTheWriteWithinItsBound) {
  HeldRemote hub;
  hub.PutFile("f", "");
  auto config = SmallConfig();
  config.wait_bound = milliseconds(200);
  WriteBack wb(hub, config);
  std::string buf(2 << 20, 'x');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, buf.data(), buf.size()));
  auto r = wb.Write(1, kWriter, "f", buf.size(), buf.data(), 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout);
  EXPECT_NE(r.error().message().find("write-back of f"), std::string::npos) << r.error().message();
  auto d = wb.Drain(1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), Code::kTimeout);
  hub.ReplyAll();  // before the WriteBack ends: its destructor waits for replies
}

TEST(WriteBackTest, AnOverlappingWriteWaitsForTheEarlierOne) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string first(100, '1'), second(50, '2');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, first.data(), first.size()));
  auto later = std::async(std::launch::async, [&] {
    return wb.Write(1, kWriter, "f", 25, second.data(), second.size());
  });
  EXPECT_EQ(later.wait_for(milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(hub.Waiting(), 1u);
  // Another file's write and a disjoint range of this one are not held back.
  ASSERT_TRUE(wb.Write(2, kWriter, "g", 0, first.data(), first.size()));
  hub.ReplyOldest();
  EXPECT_TRUE(later.get());
  hub.PutFile("g", "");
  hub.ReplyAll();
  EXPECT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Data("f"), std::string(25, '1') + second + std::string(25, '1'));
}

TEST(WriteBackTest, AWriteTheNetworkLostIsSentAgain) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string data(4096, 'r');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyOldest(Error(Code::kUnavailable, "hub restarting"));
  ASSERT_TRUE(hub.WaitFor(1)) << "not sent again";
  hub.ReplyOldest(Error(Code::kTimeout, "no answer"));
  ASSERT_TRUE(hub.WaitFor(1)) << "not sent again";
  hub.ReplyOldest();
  EXPECT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Data("f"), data);
}

TEST(WriteBackTest, RetriesEndAtTheirBoundWithTheNetworksError) {
  HeldRemote hub;
  hub.PutFile("f", "");
  auto config = SmallConfig();
  config.retry_bound = milliseconds(100);
  WriteBack wb(hub, config);
  std::string data(10, 'r');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (wb.Holds(1) && std::chrono::steady_clock::now() < end) {
    if (hub.Waiting() > 0) hub.ReplyOldest(Error(Code::kUnavailable, "hub down"));
    std::this_thread::sleep_for(milliseconds(5));
  }
  auto d = wb.Drain(1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), Code::kUnavailable);
  EXPECT_TRUE(wb.Drain(1)) << "an error is reported once";
}

TEST(WriteBackTest, ARefusalFailsTheFilesNextWriteAndOnlyThat) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string data(10, 'n');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyOldest(Error::FromErrno(ENOSPC, "hub full"));
  EXPECT_EQ(hub.Waiting(), 0u) << "a refusal is not sent again";
  auto next = wb.Write(1, kWriter, "f", 10, data.data(), data.size());
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error().code(), Code::kNoSpace);
  EXPECT_EQ(next.error().ToErrno(), ENOSPC);
  EXPECT_EQ(hub.Waiting(), 0u) << "the failed write was not taken";
  EXPECT_TRUE(wb.Drain(1));
  // Another file is not affected.
  ASSERT_TRUE(wb.Write(2, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyAll();
  EXPECT_TRUE(wb.Drain(2));
}

TEST(WriteBackTest, ARefusalReachesDrainAndWaitIdleLeavesIt) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string data(10, 'q');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyOldest(Error::FromErrno(EDQUOT, "quota"));
  EXPECT_TRUE(wb.WaitIdle(1));
  EXPECT_TRUE(wb.WaitAllIdle());
  auto d = wb.Drain(1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().ToErrno(), EDQUOT);
}

// A hub shutting down or starting answers "no such file" for files it has (its exports go
// and come back): the held write is asked again, and lands once the hub knows the file.
TEST(WriteBackTest, AFileTheHubSaysIsNotThereIsAskedAgainWithinTheBound) {
  HeldRemote hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, SmallConfig());
  std::string data(4096, 'g');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  hub.ReplyOldest(Error::FromErrno(ENOENT, "LOOKUP: No such file or directory"));
  ASSERT_TRUE(hub.WaitFor(1)) << "not sent again";
  hub.ReplyOldest(Error::FromErrno(ESTALE, "WRITE: Stale file handle"));
  ASSERT_TRUE(hub.WaitFor(1)) << "not sent again";
  hub.ReplyOldest();
  EXPECT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Data("f"), data);
}

// A file that stays gone past the bound fails the writer's next call with ENOENT.
TEST(WriteBackTest, AFileGoneForTheWholeBoundFailsTheNextCall) {
  HeldRemote hub;
  hub.PutFile("f", "");
  auto config = SmallConfig();
  config.gone_bound = milliseconds(100);
  WriteBack wb(hub, config);
  std::string data(10, 'x');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int asked = 0;
  while (wb.Holds(1) && std::chrono::steady_clock::now() < end) {
    if (hub.Waiting() > 0) {
      hub.ReplyOldest(Error::FromErrno(ENOENT, "removed"));
      asked++;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_GT(asked, 1) << "asked once only";
  auto d = wb.Drain(1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().ToErrno(), ENOENT);
}

// An NFS hub's unstable writes: a WRITE changes what is read (the fake's files) at once and
// what survives a restart only at the next COMMIT; a restart loses the rest and changes the
// write verifier. Replies come at once, on the caller's thread.
class UnstableHub : public testing::FakeRemoteFs {
 public:
  void WriteUnstableAsAsync(const Credentials&, const std::string& path, uint64_t offset,
                            std::shared_ptr<const std::vector<char>> data,
                            UnstableWriteDone done) override {
    uint64_t verifier;
    std::string before = Data(path);
    {
      MutexLock lock(mu);
      writes++;
      verifier = boot;
      stable.try_emplace(path, before);  // what a restart goes back to before any COMMIT
    }
    auto n = Write(path, offset, data->data(), data->size());
    if (!n) return done(std::unexpected(n.error()));
    done(UnstableWrite{.count = *n, .stable = false, .verifier = verifier});
  }
  void CommitAsAsync(const Credentials&, const std::string& path, CommitDone done) override {
    uint64_t verifier;
    bool refuse;
    {
      MutexLock lock(mu);
      commits++;
      verifier = boot;
      refuse = refuse_commits;
      if (hold_commits) {
        held_commits.push_back(std::move(done));
        return;
      }
    }
    // Replies run without the hub's lock: they may start the next COMMIT.
    if (refuse) return done(std::unexpected(Error::FromErrno(ENOSPC, "hub full")));
    std::string data = Data(path);
    {
      MutexLock lock(mu);
      stable[path] = data;
    }
    done(verifier);
  }
  // COMMITs wait until the test takes them (TakeHeldCommits).
  void HoldCommits() {
    MutexLock lock(mu);
    hold_commits = true;
  }
  // What a restart goes back to, for a test that answers a held COMMIT itself.
  void SetStable(const std::string& path, const std::string& data) {
    MutexLock lock(mu);
    stable[path] = data;
  }
  // The hub restarts: what no COMMIT covered is gone.
  void Restart() {
    std::vector<std::pair<std::string, std::string>> files;
    {
      MutexLock lock(mu);
      boot++;
      files.assign(stable.begin(), stable.end());
    }
    for (auto& [path, data] : files) PutFile(path, data);
  }
  std::string Stable(const std::string& path) {
    MutexLock lock(mu);
    return stable[path];
  }
  int Writes() {
    MutexLock lock(mu);
    return writes;
  }
  int Commits() {
    MutexLock lock(mu);
    return commits;
  }

  Mutex mu;
  uint64_t boot GUARDED_BY(mu) = 7;
  std::map<std::string, std::string> stable GUARDED_BY(mu);
  int writes GUARDED_BY(mu) = 0;
  int commits GUARDED_BY(mu) = 0;
  bool refuse_commits GUARDED_BY(mu) = false;
  bool hold_commits GUARDED_BY(mu) = false;
  std::vector<CommitDone> held_commits GUARDED_BY(mu);
};

WriteBack::Config UnstableConfig() {
  auto c = SmallConfig();
  c.unstable = true;
  c.commit_bytes = 64u << 20;  // no COMMIT unless someone waits
  return c;
}

// A COMMIT for every MiB answered, in a budget that holds a few.
WriteBack::Config CommitEveryMibConfig() {
  auto c = UnstableConfig();
  c.budget_bytes = 8u << 20;
  c.commit_bytes = 1u << 20;
  return c;
}

TEST(WriteBackUnstableTest, AnsweredWritesAreHeldUntilTheCommitThatDrainSends) {
  UnstableHub hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, UnstableConfig());
  std::string a(1 << 20, 'a'), b(1000, 'b');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, a.data(), a.size()));
  ASSERT_TRUE(wb.Write(1, kWriter, "f", a.size(), b.data(), b.size()));
  EXPECT_TRUE(hub.Data("f") == a + b) << "answered: the hub applied them";
  EXPECT_TRUE(wb.Holds(1)) << "not durable yet";
  EXPECT_EQ(hub.Commits(), 0);
  EXPECT_EQ(hub.Stable("f"), "");
  ASSERT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Commits(), 1) << "one COMMIT for both";
  EXPECT_TRUE(hub.Stable("f") == a + b);
  EXPECT_FALSE(wb.Holds(1));
  EXPECT_EQ(wb.held_bytes(), 0u);
}

TEST(WriteBackUnstableTest, AHubRestartBeforeTheCommitHasTheWritesSentAgain) {
  UnstableHub hub;
  hub.PutFile("f", "");
  WriteBack wb(hub, UnstableConfig());
  std::string a(4096, 'a'), b(4096, 'b');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, a.data(), a.size()));
  ASSERT_TRUE(wb.Write(1, kWriter, "f", a.size(), b.data(), b.size()));
  hub.Restart();
  EXPECT_EQ(hub.Data("f"), "") << "the restart lost the uncommitted writes";
  ASSERT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Writes(), 4) << "both sent again";
  EXPECT_EQ(hub.Commits(), 2);
  EXPECT_TRUE(hub.Stable("f") == a + b);
  EXPECT_EQ(wb.held_bytes(), 0u);
}

TEST(WriteBackUnstableTest, AFileCommitsOnceItsAnsweredBytesReachTheThreshold) {
  UnstableHub hub;
  hub.PutFile("f", "");
  auto config = UnstableConfig();
  config.commit_bytes = 1 << 20;
  WriteBack wb(hub, config);
  std::string half(512 << 10, 'h');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, half.data(), half.size()));
  EXPECT_EQ(hub.Commits(), 0);
  ASSERT_TRUE(wb.Write(1, kWriter, "f", half.size(), half.data(), half.size()));
  EXPECT_EQ(hub.Commits(), 1) << "nobody waits, the threshold commits";
  EXPECT_TRUE(hub.Stable("f") == half + half);
  EXPECT_FALSE(wb.Holds(1));
}

TEST(WriteBackUnstableTest, AWriterWaitingForRoomHasTheAnsweredBytesCommitted) {
  UnstableHub hub;
  hub.PutFile("f", "");
  hub.PutFile("g", "");
  WriteBack wb(hub, UnstableConfig());  // budget 2 MiB
  std::string mib(1 << 20, 'x');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, mib.data(), mib.size()));
  ASSERT_TRUE(wb.Write(2, kWriter, "g", 0, mib.data(), mib.size()));
  EXPECT_EQ(wb.held_bytes(), 2u << 20);
  // Full of answered, uncommitted bytes of two files: the third write commits them.
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 1 << 20, mib.data(), mib.size()));
  EXPECT_TRUE(hub.Stable("g") == mib);
  ASSERT_TRUE(wb.WaitAllIdle());
  EXPECT_TRUE(hub.Stable("f") == mib + mib);
}

TEST(WriteBackUnstableTest, AnOverlappingWriteWaitsForTheEarlierOnesCommit) {
  UnstableHub hub;
  hub.PutFile("f", "");
  hub.HoldCommits();
  WriteBack wb(hub, UnstableConfig());
  std::string first(100, '1'), second(50, '2');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, first.data(), first.size()));
  // Sent again after a restart, the first would land over the second: it waits.
  auto later = std::async(std::launch::async, [&] {
    return wb.Write(1, kWriter, "f", 25, second.data(), second.size());
  });
  EXPECT_EQ(later.wait_for(milliseconds(200)), std::future_status::timeout);
  std::vector<UnstableHub::CommitDone> commits;
  {
    MutexLock lock(hub.mu);
    hub.hold_commits = false;
    commits.swap(hub.held_commits);
  }
  ASSERT_EQ(commits.size(), 1u) << "the waiting writer started a COMMIT";
  commits[0](uint64_t{7});
  EXPECT_TRUE(later.get());
  ASSERT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Stable("f"), std::string(25, '1') + second + std::string(25, '1'));
}

// COMMITs held by the hub until the test replies to them, in order.
std::vector<UnstableHub::CommitDone> TakeHeldCommits(UnstableHub& hub, bool keep_holding) {
  std::vector<UnstableHub::CommitDone> commits;
  MutexLock lock(hub.mu);
  hub.hold_commits = keep_holding;
  commits.swap(hub.held_commits);
  return commits;
}

TEST(WriteBackUnstableTest, BytesAnsweredWhileACommitIsOutHaveTheirOwnCommit) {
  UnstableHub hub;
  hub.PutFile("f", "");
  hub.HoldCommits();
  auto config = CommitEveryMibConfig();
  config.commits_in_flight = 2;
  WriteBack wb(hub, config);
  std::string mib(1 << 20, 'm');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, mib.data(), mib.size()));
  EXPECT_EQ(hub.Commits(), 1) << "the threshold sends the first COMMIT";
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 1 << 20, mib.data(), mib.size()));
  EXPECT_EQ(hub.Commits(), 2) << "a second one goes out while the first is";
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 2 << 20, mib.data(), mib.size()));
  EXPECT_EQ(hub.Commits(), 2) << "at most commits_in_flight out";
  EXPECT_EQ(wb.held_bytes(), 3u << 20);
  auto out = TakeHeldCommits(hub, false);
  ASSERT_EQ(out.size(), 2u);
  out[0](uint64_t{7});
  EXPECT_EQ(hub.Commits(), 3) << "the first's reply sends the third megabyte's";
  EXPECT_EQ(wb.held_bytes(), 1u << 20) << "the first and the third are stable";
  out[1](uint64_t{7});
  EXPECT_EQ(wb.held_bytes(), 0u);
  EXPECT_FALSE(wb.Holds(1));
  EXPECT_EQ(hub.Writes(), 3);
}

TEST(WriteBackUnstableTest, OfTwoCommitsOutOnlyTheOneAfterARestartSendsItsWritesAgain) {
  UnstableHub hub;
  hub.PutFile("f", "");
  hub.HoldCommits();
  auto config = CommitEveryMibConfig();
  WriteBack wb(hub, config);
  std::string a(1 << 20, 'a'), b(1 << 20, 'b');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, a.data(), a.size()));
  ASSERT_TRUE(wb.Write(1, kWriter, "f", a.size(), b.data(), b.size()));
  auto out = TakeHeldCommits(hub, false);
  ASSERT_EQ(out.size(), 2u);
  // The hub made `a` stable and answered, then restarted before `b`'s COMMIT: `b` is lost.
  hub.SetStable("f", a);
  out[0](uint64_t{7});
  hub.Restart();
  EXPECT_TRUE(hub.Data("f") == a);
  out[1](uint64_t{8});
  ASSERT_TRUE(wb.Drain(1));
  EXPECT_EQ(hub.Writes(), 3) << "only b sent again";
  EXPECT_TRUE(hub.Stable("f") == a + b);
  EXPECT_EQ(wb.held_bytes(), 0u);
}

TEST(WriteBackUnstableTest, ARefusedCommitFailsTheDrainWithItsError) {
  UnstableHub hub;
  hub.PutFile("f", "");
  {
    MutexLock lock(hub.mu);
    hub.refuse_commits = true;
  }
  WriteBack wb(hub, UnstableConfig());
  std::string data(10, 'n');
  ASSERT_TRUE(wb.Write(1, kWriter, "f", 0, data.data(), data.size()));
  auto d = wb.Drain(1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().ToErrno(), ENOSPC);
  EXPECT_EQ(wb.held_bytes(), 0u);
  EXPECT_TRUE(wb.Drain(1)) << "an error is reported once";
}

}  // namespace
}  // namespace spoke::agent
