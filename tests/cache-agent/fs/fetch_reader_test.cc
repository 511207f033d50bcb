// FetchReader alone over the fake hub and a scripted source: the source's block when it has
// the whole block, the hub otherwise, and hub bytes only of the block's own file version.
#include "cache-agent/fs/fetch_reader.h"

#include <gtest/gtest.h>

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tests/cache-agent/fs/fakes.h"

namespace spoke::agent {
namespace {

using testing::FakeRemoteFs;

constexpr uint32_t kBlock = 4096;

// Answers at once with `reply`, or declines the block when `reply` is unset.
class ScriptedSource : public BlockSource {
 public:
  std::optional<Result<std::vector<char>>> reply;
  int asked = 0;
  bool Takes(const Block&) const override { return true; }
  bool FetchAsync(const Block& block, Done done) override {
    asked++;
    if (!reply) return false;
    done(*reply);
    return true;
  }
};

struct Read {
  Result<std::vector<char>> bytes = std::unexpected(Error(Code::kInternal, "not read"));
  bool from_hub = false;
};

struct ReaderRig {
  explicit ReaderRig(BlockSource* source)
      : reader(
            remote, source, registry, metrics::Labels{},
            [this](const BlockFetchPtr&, Result<std::vector<char>> r, bool from_hub) {
              done.set_value(Read{std::move(r), from_hub});
            },
            [this](const BlockFetchPtr&, bool busy) {
              failures.push_back(busy);
              return take_back;
            }) {
    remote.PutFile("f", std::string(2 * kBlock, 'x'));
  }
  BlockFetchPtr Fetch(uint64_t index, uint32_t length = kBlock) {
    auto a = remote.Stat("f");
    auto f = std::make_shared<BlockFetch>();
    f->key = BlockKey{7, a->file_id, a->ContentVersion(), index};
    f->path = "f";
    f->offset = index * kBlock;
    f->length = length;
    f->route = kSourceRoute;
    return f;
  }
  Read ReadOnce(const BlockFetchPtr& f) {
    done = {};
    reader.Read(f);
    return done.get_future().get();
  }
  uint64_t changed() {
    return registry.GetCounter("spoke_hub_file_changed_total", "", metrics::Labels{}).Value();
  }
  FakeRemoteFs remote;
  metrics::Registry registry;
  std::promise<Read> done;
  std::vector<bool> failures;  // the source failures the fetcher was told of (busy or not)
  bool take_back = false;      // what the fetcher answers them
  FetchReader reader;
};

TEST(FetchReader, WithoutASourceTheHubIsRead) {
  ReaderRig rig(nullptr);
  Read r = rig.ReadOnce(rig.Fetch(1));
  ASSERT_TRUE(r.bytes) << r.bytes.error().ToString();
  EXPECT_EQ(r.bytes->size(), kBlock);
  EXPECT_TRUE(r.from_hub);
  EXPECT_EQ(rig.remote.reads.load(), 1);
}

TEST(FetchReader, TheSourcesWholeBlockSparesTheHub) {
  ScriptedSource source;
  source.reply = std::vector<char>(kBlock, 'p');
  ReaderRig rig(&source);
  Read r = rig.ReadOnce(rig.Fetch(0));
  ASSERT_TRUE(r.bytes);
  EXPECT_FALSE(r.from_hub);
  EXPECT_EQ((*r.bytes)[0], 'p');
  EXPECT_EQ(rig.remote.reads.load(), 0);
}

TEST(FetchReader, AFailedDeclinedOrShortSourceFallsBackToTheHub) {
  ScriptedSource source;
  ReaderRig rig(&source);
  source.reply = std::unexpected(Error(Code::kUnavailable, "peer down"));
  Read failed = rig.ReadOnce(rig.Fetch(0));
  source.reply = std::vector<char>(kBlock / 2, 'p');
  Read short_block = rig.ReadOnce(rig.Fetch(0));
  source.reply.reset();
  Read declined = rig.ReadOnce(rig.Fetch(0));
  for (const Read* r : {&failed, &short_block, &declined}) {
    ASSERT_TRUE(r->bytes);
    EXPECT_TRUE(r->from_hub);
    EXPECT_EQ((*r->bytes)[0], 'x');
  }
  EXPECT_EQ(source.asked, 3);
  EXPECT_EQ(rig.remote.reads.load(), 3);
  // The fetcher heard of the two failures (neither a busy owner), not of the decline.
  EXPECT_EQ(rig.failures, (std::vector<bool>{false, false}));
}

TEST(FetchReader, ABusyOwnersRefusalGoesBackToTheFetcher) {
  ScriptedSource source;
  ReaderRig rig(&source);
  rig.take_back = true;  // the fetcher queues it again for the hub
  source.reply = std::unexpected(Error::FromErrno(EBUSY, "peer busy"));
  rig.reader.Read(rig.Fetch(0));
  EXPECT_EQ(rig.failures, (std::vector<bool>{true}));
  EXPECT_EQ(rig.remote.reads.load(), 0);  // not read here: the fetcher sends it again
}

TEST(FetchReader, AFetchRoutedToTheHubNeverAsksTheSource) {
  ScriptedSource source;
  source.reply = std::vector<char>(kBlock, 'p');
  ReaderRig rig(&source);
  BlockFetchPtr f = rig.Fetch(0);
  f->route = kHubRoute;
  Read r = rig.ReadOnce(f);
  ASSERT_TRUE(r.bytes);
  EXPECT_TRUE(r.from_hub);
  EXPECT_EQ(source.asked, 0);
}

TEST(FetchReader, AChangedFileIsRefusedUnlessItsBytesWereWrittenHere) {
  ReaderRig rig(nullptr);
  BlockFetchPtr old = rig.Fetch(0);
  rig.remote.PutFile("f", std::string(2 * kBlock, 'y'));  // a new version on the hub
  Read r = rig.ReadOnce(old);
  ASSERT_FALSE(r.bytes);
  EXPECT_EQ(r.bytes.error().ToErrno(), ESTALE);
  EXPECT_EQ(rig.changed(), 1u);
  old->written_here = true;  // the writer's own bytes: no hub version to check
  Read mine = rig.ReadOnce(old);
  ASSERT_TRUE(mine.bytes);
  EXPECT_EQ((*mine.bytes)[0], 'y');
}

TEST(FetchReader, AShortHubReplyOfAnUnchangedFileIsAnError) {
  ReaderRig rig(nullptr);
  rig.remote.ShortenReadsOf("f", 100);
  Read r = rig.ReadOnce(rig.Fetch(0));
  ASSERT_FALSE(r.bytes);
  EXPECT_EQ(r.bytes.error().ToErrno(), EIO);
  EXPECT_EQ(rig.changed(), 0u);
}

}  // namespace
}  // namespace spoke::agent
