// spoke-cache-bench: Put/Get throughput of the block cache for 1 MiB blocks, warm (every Get
// hits), at 1 and 8 threads; then how many 110 KB blocks (a typical training sample) the same
// quota holds, and reopen times (index, and after a crash: header scan over every slot).
// Not a test: it prints figures.
//   spoke-cache-bench [--dir /var/tmp] [--blocks 256] [--rounds 4] [--capacity-mib 2*blocks]
//                     [--small-fill 1.5 (x the quota in 110 KB blocks; 0 skips)]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/cache/block_cache.h"
#include "cache-agent/cache/block_store.h"
#include "cache-agent/cache/eviction_policy.h"
#include "common/log.h"

using namespace spoke;
using namespace spoke::agent;

namespace {

constexpr uint32_t kBlock = 1 << 20;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Runs fn(thread, i) for i in [0, n) split over `threads`; returns MB/s for n blocks.
template <typename Fn>
double Run(unsigned threads, uint64_t n, Fn fn) {
  std::atomic<bool> failed{false};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (uint64_t i = t; i < n; i += threads) {
        if (!fn(t, i)) failed = true;
      }
    });
  }
  for (auto& th : ts) th.join();
  double s = Seconds(start);
  if (failed) {
    std::fprintf(stderr, "an operation failed\n");
    std::exit(1);
  }
  return static_cast<double>(n) * kBlock / s / 1e6;
}

struct BenchArgs {
  std::string base = "/var/tmp";
  uint64_t blocks = 256;
  int rounds = 4;
  uint64_t capacity_mib = 0;
  double small_fill = 1.5;
};

BenchArgs ParseArgs(int argc, char** argv) {
  BenchArgs args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") args.base = argv[i + 1];
    if (a == "--blocks") args.blocks = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--rounds") args.rounds = std::atoi(argv[i + 1]);
    if (a == "--capacity-mib") args.capacity_mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--small-fill") args.small_fill = std::strtod(argv[i + 1], nullptr);
  }
  return args;
}

// Source data: aligned (the zero-copy path a FUSE reader with aligned buffers takes).
AlignedBuffer RandomBlock() {
  AlignedBuffer src = AllocateAligned(kBlock);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < kBlock; i += 8) {
    uint64_t v = rng();
    std::memcpy(src.get() + i, &v, 8);
  }
  return src;
}

// 1 MiB Puts, then warm Gets into aligned and unaligned buffers, at 1 and 8 threads.
void BenchLargeBlocks(BlockCache& cache, const AlignedBuffer& src, uint64_t blocks, int rounds) {
  std::vector<AlignedBuffer> outs;
  for (int t = 0; t < 8; ++t) outs.push_back(AllocateAligned(kBlock + kIoAlign));
  for (unsigned threads : {1u, 8u}) {
    const uint64_t version = threads;  // a fresh key set per run
    auto key = [&](uint64_t i) { return BlockKey{1, 1, version, i}; };
    double put = Run(threads, blocks, [&](unsigned, uint64_t i) {
      return cache.Put(key(i), src.get(), kBlock, AdmissionHint{}).has_value();
    });
    double get_aligned = Run(threads, blocks * rounds, [&](unsigned t, uint64_t i) {
      return cache.Get(key(i % blocks), outs[t].get(), kBlock).has_value();
    });
    double get_unaligned = Run(threads, blocks * rounds, [&](unsigned t, uint64_t i) {
      return cache.Get(key(i % blocks), outs[t].get() + 16, kBlock).has_value();
    });
    std::printf("%-8u %-28s %10.0f\n", threads, "put", put);
    std::printf("%-8u %-28s %10.0f\n", threads, "get (aligned, zero-copy)", get_aligned);
    std::printf("%-8u %-28s %10.0f\n", threads, "get (unaligned, bounce)", get_unaligned);
  }
}

// Small files: 110 KB blocks through the same quota (evicting the 1 MiB ones first). False
// when a Put failed.
bool BenchSmallBlocks(BlockCache& cache, const AlignedBuffer& src, uint64_t capacity_bytes,
                      double small_fill) {
  constexpr size_t kSmall = 110000;
  const auto n =
      static_cast<uint64_t>(small_fill * static_cast<double>(capacity_bytes) / (112 << 10));
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    if (!cache.Put(BlockKey{2, i, 1, 0}, src.get(), kSmall, AdmissionHint{})) {
      std::fprintf(stderr, "small put failed\n");
      return false;
    }
  }
  double secs = Seconds(start);
  auto st = cache.Stats();
  std::printf("%-8u %-28s %10.0f  (%.0f puts/s)\n", 1u, "put 110 KB (evicting)",
              static_cast<double>(n) * kSmall / secs / 1e6, static_cast<double>(n) / secs);
  std::printf(
      "110 KB blocks held: %llu (quota %llu MiB / 1 MiB slot = %llu), disk charged "
      "%llu MiB of %llu MiB\n",
      static_cast<unsigned long long>(st.blocks),
      static_cast<unsigned long long>(capacity_bytes >> 20),
      static_cast<unsigned long long>(capacity_bytes / kBlock),
      static_cast<unsigned long long>(st.disk_bytes >> 20),
      static_cast<unsigned long long>(st.disk_quota_bytes >> 20));
  return true;
}

void PrintCounters(BlockCache& cache) {
  auto s = cache.Stats();
  std::printf("hits=%llu misses=%llu checksum_failures=%llu disk_errors=%llu\n",
              static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
              static_cast<unsigned long long>(s.checksum_failures),
              static_cast<unsigned long long>(s.disk_errors));
}

// Restart: from the saved index, then as after a crash (no clean marker: header scan). False
// when a reopen failed.
bool BenchReopen(const BlockCache::Config& cfg) {
  for (bool crash : {false, true}) {
    if (crash) std::filesystem::remove(cfg.dir + "/clean");
    auto start = std::chrono::steady_clock::now();
    auto again = OpenBlockCache(cfg, MakeLruPolicy(), nullptr);
    double secs = Seconds(start);
    if (!again) {
      std::fprintf(stderr, "reopen: %s\n", again.error().ToString().c_str());
      return false;
    }
    std::printf("reopen %-22s %8.1f ms, %llu blocks, quota %llu MiB\n",
                crash ? "after crash (scan)" : "after Close (index)", secs * 1e3,
                static_cast<unsigned long long>((*again)->Stats().blocks),
                static_cast<unsigned long long>(cfg.capacity_bytes >> 20));
    (void)(*again)->Close();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const BenchArgs args = ParseArgs(argc, argv);
  log::SetLevel(log::Level::kWarn);
  std::string tmpl = args.base + "/spoke-cache-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;

  BlockCache::Config cfg;
  cfg.dir = dir;
  cfg.block_size = kBlock;
  // Default: both the 1- and 8-thread sets stay cached.
  cfg.capacity_bytes = args.capacity_mib > 0 ? args.capacity_mib << 20 : 2 * args.blocks * kBlock;
  auto opened = OpenBlockCache(cfg, MakeLruPolicy(), nullptr);
  if (!opened) {
    std::fprintf(stderr, "open: %s\n", opened.error().ToString().c_str());
    return 1;
  }
  BlockCache& cache = **opened;
  const AlignedBuffer src = RandomBlock();

  std::printf("spoke-cache-bench: dir=%s blocks=%llu x 1 MiB, warm gets x%d rounds\n", dir.c_str(),
              static_cast<unsigned long long>(args.blocks), args.rounds);
  std::printf("%-8s %-28s %10s\n", "threads", "operation", "MB/s");
  BenchLargeBlocks(cache, src, args.blocks, args.rounds);
  if (args.small_fill > 0 && !BenchSmallBlocks(cache, src, cfg.capacity_bytes, args.small_fill)) {
    return 1;
  }
  PrintCounters(cache);
  (void)cache.Close();
  opened->reset();
  if (!BenchReopen(cfg)) return 1;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
