// VolumeContext::FromMap on arbitrary attribute maps (inline volume attributes come from any
// pod author): never crashes, accepted contexts are URL-safe and survive ToMap/FromMap.
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  auto ctx = VolumeContext::FromMap(fuzz::AsMap(fuzz::AsText(data, size)));
  if (!ctx) return 0;
  fuzz::CheckUrlSafeFields(ctx->hub);
  SPOKE_FUZZ_CHECK(CheckUrlSafe(ctx->path, "path").has_value());
  SPOKE_FUZZ_CHECK(ctx->identity.allow_root || (ctx->identity.uid != 0 && ctx->identity.gid != 0));
  auto back = VolumeContext::FromMap(ctx->ToMap());
  SPOKE_FUZZ_CHECK(back.has_value());
  SPOKE_FUZZ_CHECK(back->hub == ctx->hub && back->path == ctx->path && back->mode == ctx->mode);
  SPOKE_FUZZ_CHECK(back->cache == ctx->cache && back->identity == ctx->identity);
  return 0;
}
