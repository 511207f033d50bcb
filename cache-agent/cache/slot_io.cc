#include "cache-agent/cache/slot_io.h"

#include <cstring>

namespace spoke::agent {

Status WriteBlock(BlockStore& store, BufferPool& buffers, uint64_t slot, BlockHeader h,
                  const char* data) {
  const size_t length = h.length;
  h.data_checksum = DataChecksum(data, length);
  const size_t padded = AlignUp(length, kIoAlign);
  AlignedBuffer buf = buffers.Take();
  if (!buf) return Fail(Code::kIo, "out of memory for a bounce buffer");
  EncodeHeader(h, buf.get());
  iovec segs[2];
  size_t nsegs;
  if (reinterpret_cast<uintptr_t>(data) % kIoAlign == 0 && length == padded) {
    segs[0] = {buf.get(), kHeaderBytes};
    segs[1] = {const_cast<char*>(data), length};
    nsegs = 2;
  } else {
    std::memcpy(buf.get() + kHeaderBytes, data, length);
    std::memset(buf.get() + kHeaderBytes + length, 0, padded - length);
    segs[0] = {buf.get(), kHeaderBytes + padded};
    nsegs = 1;
  }
  Status io = store.Write(slot, 0, {segs, nsegs});
  buffers.Give(std::move(buf));
  return io;
}

BlockRead ReadBlock(BlockStore& store, BufferPool& buffers, uint64_t slot, uint32_t block_size,
                    const BlockKey& key, uint64_t seq, uint32_t length, char* out,
                    size_t capacity) {
  BlockRead r;
  const size_t padded = AlignUp(length, kIoAlign);
  AlignedBuffer buf = buffers.Take();
  // Zero copy when the caller's buffer takes O_DIRECT: header into ours, data into theirs.
  const bool direct = reinterpret_cast<uintptr_t>(out) % kIoAlign == 0 && capacity >= padded;
  iovec segs[2];
  size_t nsegs;
  if (direct) {
    segs[0] = {buf.get(), kHeaderBytes};
    segs[1] = {out, padded};
    nsegs = 2;
  } else {
    segs[0] = {buf.get(), kHeaderBytes + padded};
    nsegs = 1;
  }
  r.io = buf ? store.Read(slot, 0, {segs, nsegs})
             : Status(Fail(Code::kIo, "out of memory for a bounce buffer"));
  if (r.io) {
    const char* data = direct ? out : buf.get() + kHeaderBytes;
    auto h = DecodeHeader(buf.get(), block_size);
    if (!h) {
      r.bad = h.error().message();
    } else if (h->key != key) {
      r.bad = "block header: key mismatch";
    } else if (h->seq != seq || h->length != length) {
      r.bad = "block header: generation or length mismatch";
    } else if (DataChecksum(data, length) != h->data_checksum) {
      r.bad = "block data: checksum mismatch";
    }
    if (r.bad.empty() && !direct) std::memcpy(out, data, length);
  }
  buffers.Give(std::move(buf));
  return r;
}

}  // namespace spoke::agent
