#include "common/resident_watch.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/thread_name.h"

namespace spoke {

namespace {

// statm: size resident shared text lib data dt, in pages; shared is the file-backed and
// shared-memory part of resident. pread at 0 makes the kernel write it afresh.
std::optional<uint64_t> AnonResidentBytesOf(int fd) {
  char buf[256];
  const ssize_t n = fd >= 0 ? ::pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3) return std::nullopt;
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return (resident - std::min(shared, resident)) * page;
}

int OpenStatm() { return ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC); }

}  // namespace

std::optional<uint64_t> AnonResidentBytes() {
  const int fd = OpenStatm();
  auto bytes = AnonResidentBytesOf(fd);
  if (fd >= 0) ::close(fd);
  return bytes;
}

ResidentWatch::ResidentWatch(MemoryBudget& budget, std::chrono::milliseconds period)
    : budget_(budget),
      period_(period),
      statm_fd_(OpenStatm()),
      start_(AnonResidentBytesOf(statm_fd_).value_or(0)) {
  thread_ = std::thread([this] { Run(); });
}

ResidentWatch::~ResidentWatch() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  if (statm_fd_ >= 0) ::close(statm_fd_);
}

void ResidentWatch::Run() {
  NameThisThread("spoke-resident");
  for (;;) {
    if (auto now = AnonResidentBytesOf(statm_fd_)) {
      const uint64_t over = OverStart(*now);
      const uint64_t used = budget_.SetResident(over);
      // Well over what is accounted: likely pages freed into glibc's heaps (freed reply
      // buffers, a hint flood's lines) that it keeps; giving them back makes room for prefetch
      // again. A trim walks the heaps under their locks: the watch trims at once when the agent
      // has grown since the last trim, and otherwise at most once a second.
      const auto t = std::chrono::steady_clock::now();
      if (over > used + budget_.total() / 8 && (over >= left_by_last_trim_ + kTrimWorthRepeating ||
                                                t - last_trim_ >= std::chrono::seconds(1))) {
        last_trim_ = t;
        malloc_trim(0);
        const uint64_t after = AnonResidentBytesOf(statm_fd_).value_or(*now);
        left_by_last_trim_ = OverStart(after);
      }
    }
    const auto next = std::chrono::steady_clock::now() + period_;
    MutexLock lock(mu_);
    if (stop_cv_.wait_until(lock, next, [this] {
          mu_.AssertHeld();
          return stop_;
        })) {
      return;
    }
  }
}

}  // namespace spoke
