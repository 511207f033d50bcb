// On-disk header at the start of every cache slot (the first kHeaderBytes of the slot; the
// block's data follows at offset kHeaderBytes, so data is kIoAlign-aligned on disk and can be
// read straight into an aligned caller buffer).
//
// Fields are little-endian, fixed offsets (static_asserts below). A header is valid when its
// magic, format version and header checksum match and its length fits the block size; the
// data checksum (XXH3-64 of `length` data bytes) is checked by the reader on every Get.
#pragma once

#if !__has_include("spoke_layer/cache.h")
#error "wrong-way include: cache-agent/cache/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdint>

#include "cache-agent/cache/block_key.h"
#include "common/status.h"

namespace spoke::agent {

inline constexpr uint64_t kBlockMagic = 0x4b4c42454b4f5053ull;  // "SPOKEBLK"
inline constexpr uint32_t kBlockFormatVersion = 1;
inline constexpr size_t kHeaderBytes = 4096;

struct BlockHeader {
  uint64_t magic = kBlockMagic;
  uint32_t format_version = kBlockFormatVersion;
  uint32_t block_size = 0;  // cache block size when written (a different geometry is invalid)
  BlockKey key;
  uint64_t seq = 0;  // generation: grows with every Put, across restarts; newest wins on scan
  uint32_t length = 0;
  ExpertId origin = kDemand;
  uint8_t reserved[3] = {};
  uint64_t data_checksum = 0;
  uint64_t header_checksum = 0;  // XXH3-64 of every byte above
};
static_assert(sizeof(BlockHeader) == 80);
static_assert(offsetof(BlockHeader, key) == 16);
static_assert(offsetof(BlockHeader, length) == 56);
static_assert(offsetof(BlockHeader, header_checksum) == 72);

uint64_t DataChecksum(const char* data, size_t length);

// Writes `h` (computing its header checksum) into the first kHeaderBytes of `out`, zero-padded.
void EncodeHeader(BlockHeader h, char* out);

// Parses a header. kChecksum: bad magic, version, header checksum, or a length that does not
// fit `block_size` (a torn write, a stale format, a slot never written).
Result<BlockHeader> DecodeHeader(const char* in, uint32_t block_size);

}  // namespace spoke::agent
