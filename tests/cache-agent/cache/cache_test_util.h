// Helpers for the block cache tests: temp dirs on several filesystems, a fault-injecting
// BlockStore, block contents, and raw access to slots in the data files.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache-agent/cache/block_header.h"
#include "cache-agent/cache/block_store.h"
#include "cache-agent/cache/uring_block_store.h"
#include "tests/support/temp_dir.h"

namespace spoke::agent::testing {

// A fresh directory under `base` (a disk or a tmpfs), removed (recursively) at scope exit.
class TempDir : public spoke::testing::TempDir {
 public:
  explicit TempDir(const std::string& base = "/tmp")
      : spoke::testing::TempDir("spoke-cache-test", base) {}
};

// Bases to run the cache on: real disk (O_DIRECT) and tmpfs (buffered fallback) when present.
inline std::vector<std::string> TestBases() {
  std::vector<std::string> bases = {"/tmp", "/var/tmp"};
  if (std::filesystem::is_directory("/dev/shm")) bases.push_back("/dev/shm");
  return bases;
}

// Wraps a store; fails reads / writes with an errno while the knob is non-zero; may claim the
// filesystem cannot punch holes (what ramfs or an old NFS server gets).
class FaultyBlockStore final : public BlockStore {
 public:
  explicit FaultyBlockStore(std::unique_ptr<BlockStore> inner)
      : BlockStore(inner->slot_count(), inner->slot_size()), inner_(std::move(inner)) {}

  std::atomic<int> fail_reads{0};
  std::atomic<int> fail_writes{0};
  std::atomic<int> fail_punches{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> punches{0};
  bool refuse_hole_punching = false;  // set before the cache asks (at its Open)

  bool fresh() const override { return inner_->fresh(); }
  bool CanPunchHoles() const override { return !refuse_hole_punching && inner_->CanPunchHoles(); }
  std::optional<uint64_t> allocated_bytes() const override { return inner_->allocated_bytes(); }

 protected:
  Status ReadImpl(uint64_t off, std::span<const iovec> segs) override {
    ++reads;
    if (int e = fail_reads.load()) return std::unexpected(Error::FromErrno(e, "injected"));
    return inner_->Read(off / slot_size(), static_cast<uint32_t>(off % slot_size()), segs);
  }
  Status WriteImpl(uint64_t off, std::span<const iovec> segs) override {
    if (int e = fail_writes.load()) return std::unexpected(Error::FromErrno(e, "injected"));
    return inner_->Write(off / slot_size(), static_cast<uint32_t>(off % slot_size()), segs);
  }
  Status PunchImpl(uint64_t off, uint64_t len) override {
    ++punches;
    if (int e = fail_punches.load()) return std::unexpected(Error::FromErrno(e, "injected"));
    return inner_->Punch(off / slot_size(), static_cast<uint32_t>(off % slot_size()),
                         static_cast<uint32_t>(len));
  }
  Status SyncImpl() override { return inner_->Sync(); }

 private:
  std::unique_ptr<BlockStore> inner_;
};

// Deterministic block contents for a key (differs per key and per byte).
inline std::vector<char> Pattern(const BlockKey& k, size_t length) {
  std::vector<char> v(length);
  uint64_t x = k.volume * 31 + k.file_id * 17 + k.version * 7 + k.index * 1000003 + 1;
  for (size_t i = 0; i < length; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<char>(x);
  }
  return v;
}

// Raw slot access to <dir>/data.0 (single-file geometry), bypassing the cache.
inline std::vector<char> ReadRaw(const std::string& dir, uint64_t offset, size_t len) {
  std::vector<char> buf(len);
  int fd = open((dir + "/data.0").c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(pread(fd, buf.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  close(fd);
  return buf;
}
inline void WriteRaw(const std::string& dir, uint64_t offset, const std::vector<char>& bytes) {
  int fd = open((dir + "/data.0").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
  fsync(fd);
  close(fd);
}

// The slot holding `key` according to its on-disk header, found by reading every header.
inline std::optional<uint64_t> FindSlot(const std::string& dir, uint32_t block_size, uint64_t slots,
                                        const BlockKey& key) {
  const uint64_t slot_size = kHeaderBytes + block_size;
  for (uint64_t s = 0; s < slots; ++s) {
    auto raw = ReadRaw(dir, s * slot_size, kHeaderBytes);
    auto h = DecodeHeader(raw.data(), block_size);
    if (h && h->key == key) return s;
  }
  return std::nullopt;
}

// Copies the data files of a live cache to `to`: what a crash leaves (no index, no clean).
inline void CopyDataFiles(const std::string& from, const std::string& to) {
  for (const auto& e : std::filesystem::directory_iterator(from)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("data.", 0) == 0) std::filesystem::copy_file(e.path(), to + "/" + name);
  }
}

}  // namespace spoke::agent::testing
