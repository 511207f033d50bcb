// ParseVolumeParams (StorageClass parameters) and ExpandSubDir: never crash; accepted
// parameters give a URL-safe hub and, for scratch, a sub-directory that is never the root.
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  StringMap params = fuzz::AsMap(fuzz::AsText(data, size));
  auto p = ParseVolumeParams(params);
  if (!p) return 0;
  fuzz::CheckUrlSafeFields(p->hub);
  SPOKE_FUZZ_CHECK(p->identity.allow_root || p->identity.uid != 0);
  if (p->mode == VolumeMode::kScratch) {
    auto dir = ExpandSubDir(p->sub_dir, params, "pv-fuzz");
    if (dir) {
      SPOKE_FUZZ_CHECK(!dir->empty());
      SPOKE_FUZZ_CHECK(CheckUrlSafe(*dir, "subDir").has_value());
      SPOKE_FUZZ_CHECK(NormalizeRelativePath(*dir, "subDir").value_or("") == *dir);
    }
  }
  return 0;
}
