// spoke-sim: replays the generated traces through the real prefetcher and eviction
// policies over a simulated WAN and prints one row per trace x prefetch mode x policy.
//   spoke-sim [--scale S] [--trace NAME] [--markdown] [--epochs] [--fetch-then-admit]
//             [--rtt-ms N] [--gbps N]
// --fetch-then-admit: prefetches cross the WAN before the cache is asked (the old order).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/sim/sim.h"
#include "bench/sim/traces.h"

using namespace spoke::sim;

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: spoke-sim [--scale S] [--trace NAME] [--markdown] [--epochs] "
               "[--fetch-then-admit] [--rtt-ms N] [--gbps N]\n");
}

std::string Experts(const SimResult& r) {
  std::string out;
  for (const auto& e : r.prefetch.experts) {
    if (e.predicted_blocks == 0) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.2f", out.empty() ? "" : ", ", e.name.c_str(),
                  e.precision);
    out += buf;
  }
  return out.empty() ? "-" : out;
}

struct SimFlags {
  double scale = 1;
  std::string only;
  bool markdown = false;
  bool epochs = false;
  bool admission_before_fetch = true;
  WanConfig wan;
};

// False on an unknown flag, one without its value, or a scale that is not positive.
bool ParseFlags(int argc, char** argv, SimFlags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--scale" && i + 1 < argc) {
      f.scale = std::atof(argv[++i]);
    } else if (a == "--trace" && i + 1 < argc) {
      f.only = argv[++i];
    } else if (a == "--epochs") {
      f.epochs = true;
    } else if (a == "--fetch-then-admit") {
      f.admission_before_fetch = false;
    } else if (a == "--markdown") {
      f.markdown = true;
    } else if (a == "--rtt-ms" && i + 1 < argc) {
      f.wan.rtt_seconds = std::atof(argv[++i]) / 1e3;
    } else if (a == "--gbps" && i + 1 < argc) {
      f.wan.bandwidth_bytes_per_s = std::atof(argv[++i]) * 1e9 / 8;
    } else {
      return false;
    }
  }
  return f.scale > 0;
}

void PrintHeader(const WanConfig& wan, bool markdown) {
  std::printf("WAN: RTT %.0f ms, %.1f Gbit/s, %u requests in flight; block 1 MiB\n\n",
              wan.rtt_seconds * 1e3, wan.bandwidth_bytes_per_s * 8 / 1e9, wan.max_requests);
  const char* header =
      "| trace | prefetch | policy | demand-miss rate | hit rate, epochs 2+ | late blocks | "
      "stall s/worker | run s | WAN GiB | wasted MiB | churn, last epoch | expert precision |";
  if (markdown) {
    std::printf("%s\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", header);
  } else {
    std::printf("%s\n", header);
  }
}

void PrintRow(const Trace& t, Mode m, Policy p, const SimResult& r) {
  uint64_t reads = 0, hits = 0;
  for (size_t e = 1; e < r.epochs.size(); ++e) {
    reads += r.epochs[e].block_reads;
    hits += r.epochs[e].hit_blocks;
  }
  std::printf("| %s | %s | %s | %.4f | %.3f | %llu | %.2f | %.1f | %.2f | %.0f | %.2f | %s |\n",
              t.name.c_str(), std::string(ModeName(m)).c_str(), std::string(PolicyName(p)).c_str(),
              r.DemandMissRate(), reads ? double(hits) / reads : 0.0,
              static_cast<unsigned long long>(r.late_blocks), r.stall_seconds / r.workers,
              r.elapsed_seconds, double(r.wan_bytes) / (1ull << 30),
              double(r.prefetch.prefetched_bytes_wasted) / (1 << 20), r.epochs.back().churn,
              Experts(r).c_str());
}

void PrintEpochRows(const SimResult& r) {
  for (size_t e = 0; e < r.epochs.size(); ++e) {
    const auto& x = r.epochs[e];
    std::printf(
        "|   epoch %zu | reads %llu | hit %.3f | late %llu | miss %llu | stall "
        "%.2f s | end %.1f s | churn %.2f | WAN %.0f MiB |\n",
        e + 1, static_cast<unsigned long long>(x.block_reads), x.HitRate(),
        static_cast<unsigned long long>(x.late_blocks),
        static_cast<unsigned long long>(x.demand_miss_blocks), x.stall_seconds / r.workers,
        x.end_seconds, x.churn, static_cast<double>(x.wan_bytes) / (1 << 20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  SimFlags flags;
  if (!ParseFlags(argc, argv, flags)) {
    Usage();
    return 2;
  }
  PrintHeader(flags.wan, flags.markdown);
  for (const Trace& t : StandardTraces(flags.scale)) {
    if (!flags.only.empty() && t.name != flags.only) continue;
    for (Mode m : {Mode::kOff, Mode::kReadAhead, Mode::kExperts, Mode::kExpertsHints}) {
      for (Policy p : {Policy::kLru, Policy::kNoThrash}) {
        SimConfig c;
        c.wan = flags.wan;
        c.mode = m;
        c.policy = p;
        c.admission_before_fetch = flags.admission_before_fetch;
        const SimResult r = RunSim(t, c);
        PrintRow(t, m, p, r);
        if (flags.epochs) PrintEpochRows(r);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
