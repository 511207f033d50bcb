// ReadMountState on an arbitrary stateDir/mounts.json: never crashes; what it accepts is
// written back and read again unchanged.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cache-agent/agent/mount_state.h"
#include "fuzz/fuzz_util.h"

namespace {

const std::string& StateFile() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/spoke-fuzz-mounts-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (dir == nullptr) std::abort();
    return std::string(dir) + "/mounts.json";
  }();
  // The private directory goes when the fuzzer exits (the state writer leaves no temp files).
  static const bool cleanup = [] {
    return std::atexit([] {
             std::filesystem::remove_all(std::filesystem::path(StateFile()).parent_path());
           }) == 0;
  }();
  (void)cleanup;
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  {
    std::ofstream out(StateFile(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto records = agent::ReadMountState(StateFile());
  if (!records) return 0;
  SPOKE_FUZZ_CHECK(agent::WriteMountState(StateFile(), *records).has_value());
  auto again = agent::ReadMountState(StateFile());
  SPOKE_FUZZ_CHECK(again.has_value() && *again == *records);
  return 0;
}
