// VolumeId::Decode on arbitrary ids (DeleteVolume and the node take them from the CO): never
// crashes, and what it accepts encodes to an id that decodes to the same volume.
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  auto id = VolumeId::Decode(fuzz::AsText(data, size));
  if (!id) return 0;
  fuzz::CheckUrlSafeFields(id->hub);
  SPOKE_FUZZ_CHECK(CheckUrlSafe(id->path, "path").has_value());
  SPOKE_FUZZ_CHECK(!(id->mode == VolumeMode::kScratch && id->path.empty()));
  auto again = VolumeId::Decode(id->Encode());
  SPOKE_FUZZ_CHECK(again.has_value());
  SPOKE_FUZZ_CHECK(*again == *id);
  return 0;
}
