#include "bench/loader/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bench/loader/random.h"

namespace spoke::bench {
namespace {

constexpr size_t kStampBytes = 2 * sizeof(uint64_t);  // step, chunk index

// Closes on every path; the error names the call and the path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Status Close(const std::string& path) {
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) return std::unexpected(Error::FromErrno(errno, "close " + path));
    return {};
  }
};

Status SyncDir(const std::string& dir) {
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + dir));
  if (::fsync(d.fd) != 0) return std::unexpected(Error::FromErrno(errno, "fsync " + dir));
  return d.Close(dir);
}

// Fills buf from offset unless the file ends first (a FUSE read may return less than asked).
Result<size_t> ReadChunk(int fd, std::vector<char>& buf, uint64_t offset, const std::string& p) {
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n =
        ::pread(fd, buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(Error::FromErrno(errno, "read " + p));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

}  // namespace

Status CheckpointConfig::Validate() const {
  if (!enabled()) return {};
  if (every_batches == 0) {
    return Fail(Code::kInvalidArgument, "--checkpoint-every must be >= 1 with --checkpoint-dir");
  }
  if (bytes < kStampBytes) {
    return Fail(Code::kInvalidArgument, "--checkpoint-mib must be >= 1 with --checkpoint-dir");
  }
  if (chunk < kStampBytes) return Fail(Code::kInvalidArgument, "checkpoint chunk too small");
  return {};
}

Checkpointer::Checkpointer(CheckpointConfig config, Clock& clock)
    : config_(std::move(config)), clock_(clock), pattern_(config_.chunk) {
  Rng rng(MixSeed(config_.seed, 0xc4e7));
  for (size_t i = 0; i + sizeof(uint64_t) <= pattern_.size(); i += sizeof(uint64_t)) {
    const uint64_t v = rng();
    std::memcpy(pattern_.data() + i, &v, sizeof v);
  }
}

void Checkpointer::Stamp(uint64_t step, uint64_t i, std::vector<char>& buf) const {
  const uint64_t offset = i * config_.chunk;
  buf.assign(pattern_.begin(), pattern_.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(
                                                      config_.chunk, config_.bytes - offset)));
  const uint64_t stamp[2] = {step, i};
  std::memcpy(buf.data(), stamp, std::min(kStampBytes, buf.size()));
}

Status Checkpointer::WriteAll(int fd, uint64_t step, const std::string& where) {
  std::vector<char> buf;
  for (uint64_t i = 0; i * config_.chunk < config_.bytes; ++i) {
    Stamp(step, i, buf);
    for (size_t done = 0; done < buf.size();) {
      const ssize_t n = ::write(fd, buf.data() + done, buf.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return std::unexpected(Error::FromErrno(errno, "write " + where));
      done += static_cast<size_t>(n);
    }
  }
  return {};
}

Result<double> Checkpointer::Save(uint64_t step) {
  const Nanos t0 = clock_.Now();
  const std::string tmp = config_.dir + "/checkpoint.pt.tmp";
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + tmp));
  SPOKE_RETURN_IF_ERROR(WriteAll(f.fd, step, tmp));
  if (::fsync(f.fd) != 0) return std::unexpected(Error::FromErrno(errno, "fsync " + tmp));
  SPOKE_RETURN_IF_ERROR(f.Close(tmp));
  if (::rename(tmp.c_str(), path().c_str()) != 0) {
    return std::unexpected(Error::FromErrno(errno, "rename " + tmp + " to " + path()));
  }
  SPOKE_RETURN_IF_ERROR(SyncDir(config_.dir));
  return ToSeconds(clock_.Now() - t0);
}

Result<CheckpointLoad> Checkpointer::Load() {
  const Nanos t0 = clock_.Now();
  const std::string p = path();
  Fd f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + p));
  CheckpointLoad load;
  std::vector<char> got(config_.chunk);
  std::vector<char> want;
  uint64_t offset = 0;
  for (uint64_t i = 0;; ++i) {
    SPOKE_TRY(const size_t n, ReadChunk(f.fd, got, offset, p));
    if (n == 0) break;
    if (i == 0 && n >= sizeof(uint64_t)) {
      std::memcpy(&load.step, got.data(), sizeof(uint64_t));
    }
    if (offset + n > config_.bytes) {
      return Fail(Code::kChecksum, p + ": longer than " + std::to_string(config_.bytes) + " bytes");
    }
    Stamp(load.step, i, want);
    if (n < want.size()) break;  // ends early: the size check below says so
    if (std::memcmp(got.data(), want.data(), want.size()) != 0) {
      return Fail(Code::kChecksum, p + ": chunk " + std::to_string(i) + " at offset " +
                                       std::to_string(offset) + " is not step " +
                                       std::to_string(load.step) + "'s");
    }
    offset += n;
  }
  if (offset != config_.bytes) {
    return Fail(Code::kChecksum, p + ": " + std::to_string(offset) + " good bytes, step " +
                                     std::to_string(load.step) + " wrote " +
                                     std::to_string(config_.bytes));
  }
  load.seconds = ToSeconds(clock_.Now() - t0);
  return load;
}

}  // namespace spoke::bench
