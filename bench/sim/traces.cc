#include "bench/sim/traces.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>

namespace spoke::sim {
namespace {

struct Shape {
  std::string name;
  std::string description;
  uint32_t files = 0;
  uint64_t file_size = 0;
  uint32_t classes = 10;
  uint32_t workers = 8;
  uint32_t batch = 32;
  uint32_t epochs = 3;
  double compute_per_sample = 0.004;  // seconds per sample per worker (decode + GPU share)
  double compute_per_mib = 0;         // extra seconds per MiB read (shards)
  double cache_over_dataset = 2.0;
  // Epoch e uses the fixed order when fixed(e), else a fresh permutation.
  std::function<bool(uint32_t)> fixed = [](uint32_t) { return false; };
  uint64_t seed = 42;
};

Op MakeOp(Op::Kind kind, uint32_t file = 0) {
  Op op;
  op.kind = kind;
  op.file = file;
  return op;
}
Op ComputeOp(double seconds) {
  Op op = MakeOp(Op::Kind::kCompute);
  op.seconds = seconds;
  return op;
}

Trace Build(const Shape& s) {
  Trace t;
  t.name = s.name;
  t.description = s.description;
  t.epochs = s.epochs;
  for (uint32_t i = 0; i < s.files; ++i) {
    const uint32_t c = i % s.classes;
    char name[64];
    std::snprintf(name, sizeof(name), "train/c%02u/s%06u.%s", c, i,
                  s.file_size > (4u << 20) ? "tar" : "jpg");
    t.files.push_back(TraceFile{name, s.file_size});
  }
  t.cache_bytes = static_cast<uint64_t>(
      std::llround(static_cast<double>(t.DatasetBytes()) * s.cache_over_dataset));
  t.workers.resize(s.workers);

  std::mt19937_64 rng(s.seed);
  std::vector<uint32_t> fixed(s.files);
  std::iota(fixed.begin(), fixed.end(), 0);
  std::shuffle(fixed.begin(), fixed.end(), rng);
  uint32_t global_batch = 0;
  for (uint32_t e = 0; e < s.epochs; ++e) {
    std::vector<uint32_t> order = fixed;
    if (!s.fixed(e)) std::shuffle(order.begin(), order.end(), rng);
    std::string hint;
    for (uint32_t f : order) hint += t.files[f].path + "\n";
    Op h = MakeOp(Op::Kind::kHint);
    h.text = std::move(hint);
    t.workers[0].push_back(std::move(h));
    const uint32_t batches = (s.files + s.batch - 1) / s.batch;
    for (uint32_t b = 0; b < batches; ++b, ++global_batch) {
      auto& ops = t.workers[b % s.workers];
      for (uint32_t i = b * s.batch; i < std::min(s.files, (b + 1) * s.batch); ++i) {
        const uint32_t f = order[i];
        ops.push_back(MakeOp(Op::Kind::kOpen, f));
        for (uint64_t off = 0; off < s.file_size; off += 1 << 20) {
          const uint64_t len = std::min<uint64_t>(1 << 20, s.file_size - off);
          Op r = MakeOp(Op::Kind::kRead, f);
          r.offset = off;
          r.length = len;
          r.epoch = e;
          r.batch = global_batch;
          ops.push_back(r);
          if (s.compute_per_mib > 0) {
            ops.push_back(ComputeOp(s.compute_per_mib * static_cast<double>(len) / (1 << 20)));
          }
        }
        ops.push_back(MakeOp(Op::Kind::kClose, f));
        ops.push_back(ComputeOp(s.compute_per_sample));
      }
    }
    for (auto& ops : t.workers) ops.push_back(MakeOp(Op::Kind::kBarrier));
  }
  return t;
}

uint32_t Scaled(uint32_t n, double scale) {
  return std::max<uint32_t>(64, static_cast<uint32_t>(std::lround(n * scale)));
}

}  // namespace

Trace ShuffledSmallFiles(double scale) {
  Shape s;
  s.name = "shuffled-small";
  s.description = "small files (192 KiB), fresh permutation per epoch, 8 workers, fits";
  s.files = Scaled(4000, scale);
  s.file_size = 192 << 10;
  return Build(s);
}

Trace FixedOrder(double scale) {
  Shape s;
  s.name = "fixed-order";
  s.description = "small files (192 KiB), the same permutation every epoch, fits";
  s.files = Scaled(4000, scale);
  s.file_size = 192 << 10;
  s.fixed = [](uint32_t) { return true; };
  return Build(s);
}

Trace ShuffledShards(double scale) {
  Shape s;
  s.name = "shuffled-shards";
  s.description = "24 MiB shards read sequentially, shuffled per epoch, 4 workers, fits";
  s.files = std::max<uint32_t>(8, static_cast<uint32_t>(std::lround(64 * scale)));
  s.file_size = 24ull << 20;
  s.workers = 4;
  s.batch = 1;
  s.compute_per_sample = 0;
  s.compute_per_mib = 0.008;
  return Build(s);
}

Trace TwiceTheCache(double scale) {
  Shape s;
  s.name = "twice-cache";
  s.description = "small files (384 KiB), shuffled per epoch, dataset = 2 x cache";
  s.files = Scaled(3000, scale);
  s.file_size = 384 << 10;
  s.epochs = 4;
  s.cache_over_dataset = 0.5;
  return Build(s);
}

Trace FixedOrderTwiceTheCache(double scale) {
  Shape s;
  s.name = "fixed-twice-cache";
  s.description = "small files (384 KiB), the same order every epoch, dataset = 2 x cache";
  s.files = Scaled(3000, scale);
  s.file_size = 384 << 10;
  s.epochs = 4;
  s.cache_over_dataset = 0.5;
  s.fixed = [](uint32_t) { return true; };
  return Build(s);
}

Trace PatternChange(double scale) {
  Shape s;
  s.name = "pattern-change";
  s.description = "dataset = 2 x cache; fixed order for 2 epochs, then shuffled for 2";
  s.files = Scaled(3000, scale);
  s.file_size = 384 << 10;
  s.epochs = 4;
  s.cache_over_dataset = 0.5;
  s.fixed = [](uint32_t e) { return e < 2; };
  return Build(s);
}

std::vector<Trace> StandardTraces(double scale) {
  std::vector<Trace> out;
  out.push_back(ShuffledSmallFiles(scale));
  out.push_back(FixedOrder(scale));
  out.push_back(ShuffledShards(scale));
  out.push_back(TwiceTheCache(scale));
  out.push_back(FixedOrderTwiceTheCache(scale));
  out.push_back(PatternChange(scale));
  return out;
}

}  // namespace spoke::sim
