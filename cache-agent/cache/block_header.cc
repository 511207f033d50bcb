#include "cache-agent/cache/block_header.h"

#include <xxhash.h>

#include <bit>
#include <cstring>

namespace spoke::agent {

static_assert(std::endian::native == std::endian::little, "on-disk format is little-endian");

uint64_t DataChecksum(const char* data, size_t length) { return XXH3_64bits(data, length); }

void EncodeHeader(BlockHeader h, char* out) {
  h.magic = kBlockMagic;
  h.format_version = kBlockFormatVersion;
  std::memset(h.reserved, 0, sizeof(h.reserved));
  h.header_checksum = XXH3_64bits(&h, offsetof(BlockHeader, header_checksum));
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, &h, sizeof(h));
}

Result<BlockHeader> DecodeHeader(const char* in, uint32_t block_size) {
  BlockHeader h;
  std::memcpy(&h, in, sizeof(h));
  if (h.magic != kBlockMagic) return Fail(Code::kChecksum, "block header: bad magic");
  if (h.header_checksum != XXH3_64bits(&h, offsetof(BlockHeader, header_checksum))) {
    return Fail(Code::kChecksum, "block header: checksum mismatch");
  }
  if (h.format_version != kBlockFormatVersion) {
    return Fail(Code::kChecksum, "block header: unknown format version");
  }
  if (h.block_size != block_size || h.length == 0 || h.length > block_size) {
    return Fail(Code::kChecksum, "block header: length or block size does not fit");
  }
  return h;
}

}  // namespace spoke::agent
