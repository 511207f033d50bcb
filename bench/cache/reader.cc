// bench/cache reader: reads every file named in a list (one path a line) with N threads, each
// file start to end in BUF-byte read() calls, and prints the bytes, seconds and MB/s.
//   spoke-bench-reader THREADS BUF_BYTES LIST_FILE
// Built by run.sh at run time (g++ -O2 -pthread); not part of the CMake build.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s THREADS BUF_BYTES LIST_FILE\n", argv[0]);
    return 2;
  }
  int threads = std::atoi(argv[1]);
  size_t buf_size = std::strtoull(argv[2], nullptr, 10);
  std::vector<std::string> files;
  std::ifstream list(argv[3]);
  for (std::string line; std::getline(list, line);) {
    if (!line.empty()) files.push_back(line);
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  std::atomic<int> errors{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<char> buf(buf_size);
      for (size_t i; (i = next++) < files.size();) {
        int fd = ::open(files[i].c_str(), O_RDONLY);
        if (fd < 0) {
          std::fprintf(stderr, "open %s: %s\n", files[i].c_str(), std::strerror(errno));
          errors++;
          continue;
        }
        ssize_t n;
        uint64_t got = 0;
        while ((n = ::read(fd, buf.data(), buf.size())) > 0) got += n;
        if (n < 0) {
          std::fprintf(stderr, "read %s: %s\n", files[i].c_str(), std::strerror(errno));
          errors++;
        }
        ::close(fd);
        total += got;
      }
    });
  }
  for (auto& t : pool) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("files=%zu bytes=%llu seconds=%.3f mbps=%.1f errors=%d\n", files.size(),
              static_cast<unsigned long long>(total.load()), secs, total / secs / 1e6,
              errors.load());
  return errors ? 1 : 0;
}
