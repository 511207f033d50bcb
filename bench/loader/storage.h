// Where the loader reads samples from: a directory (a Spoke FUSE mount, or a local one).
// An interface so tests can gate or count reads.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace spoke::bench {

class ReadFile {
 public:
  virtual ~ReadFile() = default;
  // Reads up to buf.size() bytes at offset; 0 = end of file. Returns kIo and friends.
  virtual Result<size_t> PRead(std::span<std::byte> buf, uint64_t offset) = 0;
  // Tells the kernel the range will not be needed again (so a rerun is not served from the
  // page cache). Best effort.
  virtual void DropCache(uint64_t offset, uint64_t length) {}
};

class Storage {
 public:
  virtual ~Storage() = default;
  // rel_path is relative to the dataset root. Returns kNotFound, kPermissionDenied, kIo.
  virtual Result<std::unique_ptr<ReadFile>> Open(std::string_view rel_path) = 0;
};

// open(2)/pread(2) under a root directory.
class PosixStorage final : public Storage {
 public:
  explicit PosixStorage(std::string root) : root_(std::move(root)) {}
  Result<std::unique_ptr<ReadFile>> Open(std::string_view rel_path) override;

 private:
  std::string root_;
};

// Reads the whole file into buf (grown as needed), looping over short reads; returns the byte
// count. chunk = bytes per pread (0 = the whole remaining size in one call).
Result<uint64_t> ReadWhole(ReadFile& file, uint64_t expected_size, uint64_t chunk,
                           std::vector<std::byte>& buf);

}  // namespace spoke::bench
