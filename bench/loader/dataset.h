// The synthetic dataset: generation and its MANIFEST.
//
// MANIFEST (text, at the dataset root):
//   # spoke-loader manifest v1 workload=<name> seed=<n> hash=xxh3-64
//   <relative path> <size bytes> <xxh3-64 hex of the whole file> <records>
// records is 1 for one-sample-per-file workloads, and the number of records for a shard.
//
// Shard files are a sequence of records: a 16-byte header (magic "SPKR", u32 payload length,
// u64 xxh3-64 of the payload, little-endian) followed by the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/loader/workload.h"
#include "common/status.h"

namespace spoke::bench {

inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr uint32_t kRecordMagic = 0x524b5053;  // "SPKR" little-endian
inline constexpr size_t kRecordHeaderBytes = 16;

struct ManifestEntry {
  std::string path;  // relative to the dataset root
  uint64_t size = 0;
  uint64_t checksum = 0;  // xxh3-64 of the whole file
  uint32_t records = 1;
};

struct Manifest {
  Workload workload = Workload::kReport;
  uint64_t seed = 0;
  std::vector<ManifestEntry> entries;

  bool sharded() const { return workload == Workload::kShards; }
  uint64_t TotalBytes() const;
  uint64_t TotalSamples() const;  // sum of records
};

struct GenOptions {
  std::string dir;
  Workload workload = Workload::kReport;
  uint64_t samples = 0;  // 0 = the preset's default
  uint64_t seed = 1;
  uint64_t shard_bytes = 0;  // 0 = the preset's default (shards only)
};

// Writes the dataset and its MANIFEST under options.dir (created if missing).
// Returns kInvalidArgument (bad options) or kIo (a write failed).
Result<Manifest> Generate(const GenOptions& options);

// Reads <dir>/MANIFEST. Returns kNotFound, kIo, or kInvalidArgument (malformed line).
Result<Manifest> ReadManifest(const std::string& dir);
Status WriteManifest(const std::string& dir, const Manifest& manifest);

uint64_t Checksum(std::span<const std::byte> data);

struct RecordHeader {
  uint32_t length = 0;
  uint64_t checksum = 0;
};
void EncodeRecordHeader(const RecordHeader& h, std::byte* out);
// Returns kChecksum when the magic is wrong (not a record boundary: a corrupt shard).
Result<RecordHeader> DecodeRecordHeader(const std::byte* in);

}  // namespace spoke::bench
