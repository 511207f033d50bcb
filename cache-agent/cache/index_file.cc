#include "cache-agent/cache/index_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "cache-agent/cache/cache_dir.h"

namespace spoke::agent {
namespace {

constexpr uint64_t kIndexMagic = 0x3158444e494b5053ull;  // "SPKINDX1"
// 2: flags (holes punched) in the header. A version-1 index (preallocated files, whole-slot
// quota) is rejected: the rescan punches what the old files hold.
constexpr uint32_t kIndexVersion = 2;
constexpr uint32_t kIndexPunched = 1;  // free slots and block tails were punched at Close
constexpr const char* kIndexFile = "/index";
constexpr const char* kIndexTmpFile = "/index.tmp";

struct IndexHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t block_size;
  uint64_t slot_count;
  uint64_t next_seq;
  uint64_t entry_count;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(IndexHeader) == 48);
struct IndexEntry {
  uint64_t volume, file_id, version, index;
  uint64_t slot;
  uint64_t seq;
  uint32_t length;
  uint8_t origin;
  uint8_t read;
  uint8_t pad[2];
};
static_assert(sizeof(IndexEntry) == 56);

bool ReadWholeFile(const std::string& path, std::string& out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

}  // namespace

Status WriteIndexFile(const std::string& dir, const IndexContents& c) {
  std::string bytes;
  IndexHeader h{kIndexMagic,
                kIndexVersion,
                c.block_size,
                c.slot_count,
                c.next_seq,
                c.records.size(),
                c.punched ? kIndexPunched : 0u,
                0};
  bytes.reserve(sizeof(h) + c.records.size() * sizeof(IndexEntry) + 8);
  bytes.append(reinterpret_cast<const char*>(&h), sizeof(h));
  for (const IndexRecord& r : c.records) {
    IndexEntry ie{r.key.volume, r.key.file_id, r.key.version,
                  r.key.index,  r.slot,        r.seq,
                  r.length,     r.origin,      static_cast<uint8_t>(r.read ? 1 : 0),
                  {0, 0}};
    bytes.append(reinterpret_cast<const char*>(&ie), sizeof(ie));
  }
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  const std::string tmp = dir + kIndexTmpFile;
  const std::string path = dir + kIndexFile;
  if (Status s = WriteFileDurably(tmp, bytes); !s) return s;
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return std::unexpected(Error::FromErrno(errno, "rename " + tmp));
  }
  return Ok();
}

Result<IndexContents> ReadIndexFile(const std::string& dir, uint32_t block_size,
                                    uint64_t slot_count, bool punched) {
  std::string bytes;
  auto reject = [](const char* why) { return Fail(Code::kChecksum, why); };
  if (!ReadWholeFile(dir + kIndexFile, bytes)) {
    return Fail(Code::kNotFound, "missing or unreadable");
  }
  if (bytes.size() < sizeof(IndexHeader) + 8) return reject("truncated");
  uint64_t stored_sum;
  std::memcpy(&stored_sum, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != stored_sum) return reject("checksum");
  IndexHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kIndexMagic || h.version != kIndexVersion) return reject("format");
  if (h.block_size != block_size || h.slot_count != slot_count) {
    return reject("geometry changed");
  }
  if (((h.flags & kIndexPunched) != 0) != punched) return reject("hole punching changed");
  if (bytes.size() != sizeof(IndexHeader) + h.entry_count * sizeof(IndexEntry) + 8) {
    return reject("size");
  }
  IndexContents c;
  c.block_size = h.block_size;
  c.slot_count = h.slot_count;
  c.next_seq = h.next_seq;
  c.punched = punched;
  c.records.reserve(h.entry_count);
  std::vector<bool> used(slot_count, false);
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  for (uint64_t i = 0; i < h.entry_count; ++i) {
    IndexEntry ie;
    std::memcpy(&ie, bytes.data() + sizeof(IndexHeader) + i * sizeof(IndexEntry), sizeof(ie));
    BlockKey key{ie.volume, ie.file_id, ie.version, ie.index};
    if (ie.slot >= slot_count || used[ie.slot] || ie.length == 0 || ie.length > block_size ||
        !seen.insert(key).second || ie.seq >= h.next_seq) {
      return reject("inconsistent entry");
    }
    used[ie.slot] = true;
    c.records.push_back(IndexRecord{key, ie.slot, ie.seq, ie.length, ie.origin, ie.read != 0});
  }
  return c;
}

void RemoveIndexFile(const std::string& dir) { unlink((dir + kIndexFile).c_str()); }

}  // namespace spoke::agent
