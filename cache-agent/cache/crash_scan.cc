#include "cache-agent/cache/crash_scan.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>
#include <unordered_map>

namespace spoke::agent {
namespace {

unsigned ScanThreads(uint64_t slot_count) {
  return static_cast<unsigned>(std::min<uint64_t>(8, 1 + slot_count / 64));
}

}  // namespace

HeaderScan ScanSlotHeaders(BlockStore& store, uint32_t block_size, BufferPool& buffers,
                           const IoErrorHandler& on_io_error) {
  const uint64_t slot_count = store.slot_count();
  const unsigned threads = ScanThreads(slot_count);
  std::vector<std::vector<FoundHeader>> found(threads);
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      AlignedBuffer buf = buffers.Take();
      if (!buf) return;
      for (uint64_t slot = t; slot < slot_count; slot += threads) {
        iovec seg{buf.get(), kHeaderBytes};
        Status io = store.Read(slot, 0, {&seg, 1});
        if (!io) {
          if (on_io_error(io)) break;
          continue;
        }
        auto h = DecodeHeader(buf.get(), block_size);
        if (h) {
          found[t].push_back({slot, *h});
        } else if (std::any_of(buf.get(), buf.get() + 8, [](char c) { return c != 0; })) {
          ++bad;  // torn or foreign; a never-written slot reads as zeros
        }
      }
      buffers.Give(std::move(buf));
    });
  }
  for (auto& w : workers) w.join();
  HeaderScan scan;
  scan.invalid = bad.load();
  for (auto& list : found) scan.found.insert(scan.found.end(), list.begin(), list.end());
  return scan;
}

ResolvedScan ResolveGenerations(const std::vector<FoundHeader>& found) {
  ResolvedScan r;
  std::unordered_map<BlockKey, const FoundHeader*, BlockKeyHash> best;
  for (const FoundHeader& f : found) {
    r.max_seq = std::max(r.max_seq, f.header.seq);
    auto [it, inserted] = best.emplace(f.header.key, &f);
    if (!inserted && it->second->header.seq < f.header.seq) it->second = &f;  // newest wins
  }
  r.blocks.reserve(best.size());
  for (const auto& [key, f] : best) r.blocks.push_back(*f);
  // Oldest writes are the coldest blocks.
  std::sort(r.blocks.begin(), r.blocks.end(),
            [](const FoundHeader& a, const FoundHeader& b) { return a.header.seq < b.header.seq; });
  for (const FoundHeader& f : found) {
    auto it = best.find(f.header.key);
    if (it->second != &f) r.stale_slots.push_back(f.slot);
  }
  return r;
}

bool PunchBeyondExtents(BlockStore& store, const std::vector<uint32_t>& keep,
                        const IoErrorHandler& on_io_error) {
  const uint64_t slot_count = store.slot_count();
  const uint32_t slot_size = store.slot_size();
  const unsigned threads = ScanThreads(slot_count);
  std::atomic<bool> refused{false};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t slot = t; slot < slot_count && !refused; slot += threads) {
        if (keep[slot] >= slot_size) continue;
        Status p = store.Punch(slot, keep[slot], slot_size - keep[slot]);
        if (!p && p.error().ToErrno() == EOPNOTSUPP) {
          refused = true;
        } else if (!p && on_io_error(p)) {
          break;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  return refused.load();
}

}  // namespace spoke::agent
