#include "common/resident_watch.h"

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
    if (auto now = AnonResidentBytes()) budget_.SetResident(*now > start_ ? *now - start_ : 0);
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
