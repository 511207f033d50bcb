#include "bench/loader/storage.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace spoke::bench {
namespace {

class PosixFile final : public ReadFile {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override { ::close(fd_); }

  Result<size_t> PRead(std::span<std::byte> buf, uint64_t offset) override {
    while (true) {
      const ssize_t n = ::pread(fd_, buf.data(), buf.size(), static_cast<off_t>(offset));
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) return std::unexpected(Error::FromErrno(errno, "pread " + path_));
    }
  }

  void DropCache(uint64_t offset, uint64_t length) override {
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_DONTNEED);
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<ReadFile>> PosixStorage::Open(std::string_view rel_path) {
  std::string path = root_ + "/" + std::string(rel_path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + path));
  return std::make_unique<PosixFile>(fd, std::move(path));
}

Result<uint64_t> ReadWhole(ReadFile& file, uint64_t expected_size, uint64_t chunk,
                           std::vector<std::byte>& buf) {
  // One extra byte past the expected size so a file that grew is noticed.
  if (buf.size() < expected_size + 1) buf.resize(expected_size + 1);
  uint64_t done = 0;
  while (true) {
    if (done == buf.size()) buf.resize(buf.size() * 2);
    uint64_t want = buf.size() - done;
    if (chunk > 0 && want > chunk) want = chunk;
    SPOKE_TRY(auto n, file.PRead(std::span<std::byte>(buf.data() + done, want), done));
    if (n == 0) return done;
    done += n;
  }
}

}  // namespace spoke::bench
