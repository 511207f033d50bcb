#include "common/resident_watch.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/thread_name.h"

namespace spoke {

std::optional<uint64_t> AnonResidentBytes() {
  // statm: size resident shared text lib data dt, in pages; shared is the file-backed and
  // shared-memory part of resident.
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0, shared = 0;
  if (!(in >> size >> resident >> shared)) return std::nullopt;
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return (resident - std::min(shared, resident)) * page;
}

ResidentWatch::ResidentWatch(MemoryBudget& budget, std::chrono::milliseconds period)
    : budget_(budget), period_(period), start_(AnonResidentBytes().value_or(0)) {
  thread_ = std::thread([this] { Run(); });
}

ResidentWatch::~ResidentWatch() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void ResidentWatch::Run() {
  NameThisThread("spoke-resident");
  for (;;) {
    if (auto now = AnonResidentBytes()) {
      const uint64_t over = *now > start_ ? *now - start_ : 0;
      budget_.SetResident(over);
      // Well over what is accounted: likely pages freed into glibc's heaps (a hint flood's
      // lines) that it keeps; giving them back makes room for prefetch again. At most once a
      // second: a trim walks the heaps under their locks.
      const auto t = std::chrono::steady_clock::now();
      if (over > budget_.used() + budget_.total() / 8 &&
          t - last_trim_ >= std::chrono::seconds(1)) {
        last_trim_ = t;
        malloc_trim(0);
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
