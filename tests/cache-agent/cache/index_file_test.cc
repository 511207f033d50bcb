#include "cache-agent/cache/index_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cache-agent/cache/cache_test_util.h"
#include "tests/support/files.h"

namespace spoke::agent {
namespace {

using testing::TempDir;

constexpr uint32_t kBlockSize = 1 << 20;
constexpr uint64_t kSlots = 64;

IndexContents Sample() {
  IndexContents c;
  c.block_size = kBlockSize;
  c.slot_count = kSlots;
  c.next_seq = 100;
  c.punched = true;
  c.records = {
      {BlockKey{1, 2, 3, 0}, 5, 10, kBlockSize, kDemand, false},
      {BlockKey{1, 2, 3, 1}, 63, 11, 110000, 3, true},
      {BlockKey{9, 8, 7, 6}, 0, 99, 1, 2, false},
  };
  return c;
}

void Overwrite(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  fclose(f);
}

std::string Reason(const std::string& dir, bool punched = true) {
  auto r = ReadIndexFile(dir, kBlockSize, kSlots, punched);
  return r ? "accepted" : r.error().message();
}

TEST(IndexFileTest, RoundTripKeepsEveryFieldAndTheOrder) {
  TempDir dir;
  const IndexContents in = Sample();
  ASSERT_TRUE(WriteIndexFile(dir.path(), in));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("index.tmp")));
  auto out = ReadIndexFile(dir.path(), kBlockSize, kSlots, true);
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->next_seq, 100u);
  EXPECT_TRUE(out->punched);
  ASSERT_EQ(out->records.size(), in.records.size());
  for (size_t i = 0; i < in.records.size(); ++i) {
    const IndexRecord& a = in.records[i];
    const IndexRecord& b = out->records[i];
    EXPECT_EQ(a.key, b.key) << i;
    EXPECT_EQ(a.slot, b.slot) << i;
    EXPECT_EQ(a.seq, b.seq) << i;
    EXPECT_EQ(a.length, b.length) << i;
    EXPECT_EQ(a.origin, b.origin) << i;
    EXPECT_EQ(a.read, b.read) << i;
  }
  // An empty index round-trips too.
  IndexContents empty = Sample();
  empty.records.clear();
  ASSERT_TRUE(WriteIndexFile(dir.path(), empty));
  auto e = ReadIndexFile(dir.path(), kBlockSize, kSlots, true);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->records.empty());
}

TEST(IndexFileTest, MissingFileIsNotFoundAndRemoveDeletesIt) {
  TempDir dir;
  auto r = ReadIndexFile(dir.path(), kBlockSize, kSlots, true);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  ASSERT_TRUE(WriteIndexFile(dir.path(), Sample()));
  RemoveIndexFile(dir.path());
  EXPECT_FALSE(std::filesystem::exists(dir.sub("index")));
}

TEST(IndexFileTest, TornOrFlippedFileIsRejected) {
  TempDir dir;
  ASSERT_TRUE(WriteIndexFile(dir.path(), Sample()));
  const std::string path = dir.sub("index");
  bool read = false;
  const std::string good = spoke::testing::ReadWholeFile(path, &read);
  ASSERT_TRUE(read) << path;
  ASSERT_EQ(good.size(), 48u + 3 * 56u + 8u);
  // Every truncation point is caught (torn write of the tmp file that got renamed anyway).
  for (size_t len : {size_t{0}, size_t{20}, size_t{55}, size_t{56}, size_t{100}, good.size() - 1}) {
    Overwrite(path, good.substr(0, len));
    auto r = ReadIndexFile(dir.path(), kBlockSize, kSlots, true);
    ASSERT_FALSE(r) << len;
    EXPECT_EQ(r.error().code(), Code::kChecksum) << len;
  }
  Overwrite(path, good.substr(0, 40));
  EXPECT_EQ(Reason(dir.path()), "truncated");
  std::string flipped = good;
  flipped[60] ^= 1;  // inside the first entry
  Overwrite(path, flipped);
  EXPECT_EQ(Reason(dir.path()), "checksum");
  Overwrite(path, good);
  EXPECT_EQ(Reason(dir.path()), "accepted");
}

TEST(IndexFileTest, GeometryOrPunchingChangeIsRejected) {
  TempDir dir;
  ASSERT_TRUE(WriteIndexFile(dir.path(), Sample()));
  EXPECT_EQ(ReadIndexFile(dir.path(), kBlockSize / 2, kSlots, true).error().message(),
            "geometry changed");
  EXPECT_EQ(ReadIndexFile(dir.path(), kBlockSize, kSlots + 1, true).error().message(),
            "geometry changed");
  EXPECT_EQ(Reason(dir.path(), /*punched=*/false), "hole punching changed");
}

TEST(IndexFileTest, InconsistentEntriesAreRejected) {
  TempDir dir;
  auto check = [&](auto mutate) {
    IndexContents c = Sample();
    mutate(c);
    EXPECT_TRUE(WriteIndexFile(dir.path(), c));  // well-formed file, checksum fine
    return Reason(dir.path());
  };
  EXPECT_EQ(check([](IndexContents& c) { c.records[1].slot = 5; }), "inconsistent entry");
  EXPECT_EQ(check([](IndexContents& c) { c.records[2].slot = kSlots; }), "inconsistent entry");
  EXPECT_EQ(check([](IndexContents& c) { c.records[2].length = 0; }), "inconsistent entry");
  EXPECT_EQ(check([](IndexContents& c) { c.records[2].length = kBlockSize + 1; }),
            "inconsistent entry");
  EXPECT_EQ(check([](IndexContents& c) { c.records[2].key = c.records[0].key; }),
            "inconsistent entry");
  EXPECT_EQ(check([](IndexContents& c) { c.records[2].seq = c.next_seq; }), "inconsistent entry");
  EXPECT_EQ(check([](IndexContents&) {}), "accepted");
}

}  // namespace
}  // namespace spoke::agent
