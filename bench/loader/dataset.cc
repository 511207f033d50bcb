#include "bench/loader/dataset.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/loader/random.h"

namespace spoke::bench {
namespace {

// Writes all of data at the fd's current offset. Returns kIo.
Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(Error::FromErrno(errno, "write " + path));
    }
    done += static_cast<size_t>(n);
  }
  return Ok();
}

uint64_t DrawSize(const SizeDist& d, Rng& rng) {
  if (d.stddev == 0) return d.mean;
  const double v = static_cast<double>(d.mean) + rng.Normal() * static_cast<double>(d.stddev);
  const double clamped = std::clamp(v, static_cast<double>(d.min), static_cast<double>(d.max));
  return static_cast<uint64_t>(std::llround(clamped));
}

std::string SamplePath(Workload w, uint64_t i, uint64_t per_class) {
  char buf[96];
  switch (w) {
    case Workload::kUnet3d:
      std::snprintf(buf, sizeof(buf), "train/case_%05" PRIu64 ".npz", i);
      break;
    case Workload::kShards:
      std::snprintf(buf, sizeof(buf), "train/shard-%05" PRIu64 ".rec", i);
      break;
    default:
      std::snprintf(buf, sizeof(buf), "train/class-%03" PRIu64 "/sample-%06" PRIu64 ".jpg",
                    i / per_class, i);
  }
  return buf;
}

// Opens path for writing, creating parent directories. Returns kIo.
Result<int> CreateFile(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return Fail(Code::kIo, "mkdir " + path.parent_path().string() + ": " + ec.message());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + path.string()));
  return fd;
}

}  // namespace

uint64_t Manifest::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& e : entries) total += e.size;
  return total;
}

uint64_t Manifest::TotalSamples() const {
  uint64_t total = 0;
  for (const auto& e : entries) total += e.records;
  return total;
}

uint64_t Checksum(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

void EncodeRecordHeader(const RecordHeader& h, std::byte* out) {
  const uint32_t magic = kRecordMagic;
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &h.length, 4);
  std::memcpy(out + 8, &h.checksum, 8);
}

Result<RecordHeader> DecodeRecordHeader(const std::byte* in) {
  uint32_t magic = 0;
  std::memcpy(&magic, in, 4);
  if (magic != kRecordMagic) return Fail(Code::kChecksum, "bad record magic");
  RecordHeader h;
  std::memcpy(&h.length, in + 4, 4);
  std::memcpy(&h.checksum, in + 8, 8);
  return h;
}

Result<Manifest> Generate(const GenOptions& options) {
  if (options.dir.empty()) return Fail(Code::kInvalidArgument, "--dir is required");
  const Preset preset = PresetFor(options.workload);
  const uint64_t samples = options.samples ? options.samples : preset.default_samples;
  const uint64_t shard_bytes = options.shard_bytes ? options.shard_bytes : preset.shard_bytes;
  if (preset.sharded && shard_bytes < preset.sample_size.max + kRecordHeaderBytes) {
    return Fail(Code::kInvalidArgument, "--shard-mib: smaller than one record");
  }

  Manifest manifest;
  manifest.workload = options.workload;
  manifest.seed = options.seed;
  const std::filesystem::path root(options.dir);
  Rng size_rng(MixSeed(options.seed, ~0ULL));
  // ImageNet-like layout: at most 1000 class directories, at least 100 samples each.
  const uint64_t per_class = std::max<uint64_t>(100, (samples + 999) / 1000);
  std::vector<std::byte> buf;

  if (!preset.sharded) {
    for (uint64_t i = 0; i < samples; ++i) {
      const uint64_t size = DrawSize(preset.sample_size, size_rng);
      buf.resize(size);
      Rng content(MixSeed(options.seed, i));
      content.Fill(buf);
      ManifestEntry e{SamplePath(options.workload, i, per_class), size, Checksum(buf), 1};
      SPOKE_TRY(auto fd, CreateFile(root / e.path));
      auto st = WriteAll(fd, buf, e.path);
      ::close(fd);
      SPOKE_RETURN_IF_ERROR(st);
      manifest.entries.push_back(std::move(e));
    }
  } else {
    uint64_t next_sample = 0;
    for (uint64_t shard = 0; next_sample < samples; ++shard) {
      ManifestEntry e{SamplePath(options.workload, shard, per_class), 0, 0, 0};
      SPOKE_TRY(auto fd, CreateFile(root / e.path));
      XXH3_state_t* state = XXH3_createState();
      XXH3_64bits_reset(state);
      Status st = Ok();
      while (next_sample < samples) {
        const uint64_t size = DrawSize(preset.sample_size, size_rng);
        if (e.records > 0 && e.size + kRecordHeaderBytes + size > shard_bytes) break;
        buf.resize(kRecordHeaderBytes + size);
        std::span<std::byte> payload(buf.data() + kRecordHeaderBytes, size);
        Rng content(MixSeed(options.seed, next_sample));
        content.Fill(payload);
        EncodeRecordHeader({static_cast<uint32_t>(size), Checksum(payload)}, buf.data());
        XXH3_64bits_update(state, buf.data(), buf.size());
        st = WriteAll(fd, buf, e.path);
        if (!st) break;
        e.size += buf.size();
        ++e.records;
        ++next_sample;
      }
      e.checksum = XXH3_64bits_digest(state);
      XXH3_freeState(state);
      ::close(fd);
      SPOKE_RETURN_IF_ERROR(st);
      manifest.entries.push_back(std::move(e));
    }
  }
  SPOKE_RETURN_IF_ERROR(WriteManifest(options.dir, manifest));
  return manifest;
}

Status WriteManifest(const std::string& dir, const Manifest& manifest) {
  const std::string path = (std::filesystem::path(dir) / kManifestName).string();
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Fail(Code::kIo, "open " + path);
  out << "# spoke-loader manifest v1 workload=" << WorkloadName(manifest.workload)
      << " seed=" << manifest.seed << " hash=xxh3-64\n";
  char hex[17];
  for (const auto& e : manifest.entries) {
    std::snprintf(hex, sizeof(hex), "%016" PRIx64, e.checksum);
    out << e.path << ' ' << e.size << ' ' << hex << ' ' << e.records << '\n';
  }
  out.flush();
  if (!out) return Fail(Code::kIo, "write " + path);
  return Ok();
}

Result<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestName).string();
  std::ifstream in(path);
  if (!in) return Fail(Code::kNotFound, "no manifest at " + path + " (run `spoke-loader gen`)");
  Manifest m;
  std::string line;
  size_t lineno = 0;
  bool have_header = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.starts_with("# spoke-loader manifest v1 ")) {
        std::istringstream fields(line.substr(27));
        std::string kv;
        while (fields >> kv) {
          const auto eq = kv.find('=');
          if (eq == std::string::npos) continue;
          const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
          if (key == "workload") {
            auto w = ParseWorkload(value);
            if (!w) return Fail(Code::kInvalidArgument, path + ": unknown workload " + value);
            m.workload = *w;
          } else if (key == "seed") {
            m.seed = std::strtoull(value.c_str(), nullptr, 10);
          }
        }
        have_header = true;
      }
      continue;
    }
    std::istringstream fields(line);
    ManifestEntry e;
    std::string hex;
    if (!(fields >> e.path >> e.size >> hex >> e.records) || e.records == 0) {
      return Fail(Code::kInvalidArgument, path + ":" + std::to_string(lineno) + ": malformed");
    }
    e.checksum = std::strtoull(hex.c_str(), nullptr, 16);
    m.entries.push_back(std::move(e));
  }
  if (!have_header) return Fail(Code::kInvalidArgument, path + ": missing header line");
  if (m.entries.empty()) return Fail(Code::kInvalidArgument, path + ": no samples");
  return m;
}

}  // namespace spoke::bench
