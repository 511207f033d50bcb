// WriteBack against a hub whose WRITE replies the test hands out: writes are answered before
// the hub has them, the budget holds writers back, overlapping writes keep their order,
// network failures are sent again, and a refusal reaches the file's next call.
#include "cache-agent/fs/write_back.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <future>
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

}  // namespace
}  // namespace spoke::agent
