// ParseNfsUrl (`spokectl mount nfs://...`): never crashes; an accepted URL gives an address
// whose own URL parses back to it.
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  auto hub = ParseNfsUrl(fuzz::AsText(data, size));
  if (!hub) return 0;
  fuzz::CheckUrlSafeFields(*hub);
  auto back = ParseNfsUrl(hub->NfsUrl());
  SPOKE_FUZZ_CHECK(back.has_value());
  SPOKE_FUZZ_CHECK(*back == *hub);
  return 0;
}
