// spoke-loader: generates a synthetic training dataset and replays a PyTorch-DataLoader-shaped
// read pattern over it. See bench/loader/README.md.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/loader/clock.h"
#include "bench/loader/dataset.h"
#include "bench/loader/loader.h"
#include "bench/loader/stats.h"
#include "bench/loader/storage.h"
#include "bench/loader/workload.h"
#include "common/log.h"

namespace spoke::bench {
namespace {

// Testing aid (--open-delay-ms): sleeps before every open, standing in for an uncached remote
// filesystem when no mount is at hand. Not a WAN model: Spoke's scenarios use the real proxy.
class DelayedStorage final : public Storage {
 public:
  DelayedStorage(Storage& inner, Clock& clock, Nanos delay)
      : inner_(inner), clock_(clock), delay_(delay) {}
  Result<std::unique_ptr<ReadFile>> Open(std::string_view rel_path) override {
    clock_.SleepUntil(clock_.Now() + delay_);
    return inner_.Open(rel_path);
  }

 private:
  Storage& inner_;
  Clock& clock_;
  Nanos delay_;
};

constexpr char kUsage[] = R"(usage:
  spoke-loader gen --dir D --workload report|resnet50|unet3d|shards [--samples N] [--seed S]
                   [--shard-mib M]
  spoke-loader run --dir D [--workload W] [--epochs E] [--batch B] [--workers W]
                   [--prefetch-factor P] [--accelerators A] [--compute-ms C] [--seed S]
                   [--csv out.csv] [--json out.json|-] [--label NAME] [--hints-file PATH]
                   [--verify] [--drop-cache] [--chunk-kib K] [--window N]
                   [--log-level debug|info|warn|error] [--open-delay-ms D]
                   [--max-batches N]
                   [--checkpoint-dir D --checkpoint-every N --checkpoint-mib M]
  spoke-loader checkpoint --dir D --mib M [--step S] [--seed S]
run's workload defaults to the one in the dataset's MANIFEST; its preset gives every loader
flag's default, and flags override it.
)";

// --flag value pairs and bare --switches.
struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> errors;

  std::optional<std::string> Get(const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
  bool Has(const std::string& key) const { return values.contains(key); }

  template <typename T>
  void Number(const std::string& key, T& out) {
    auto v = Get(key);
    if (!v) return;
    char* end = nullptr;
    errno = 0;
    if constexpr (std::is_floating_point_v<T>) {
      out = static_cast<T>(std::strtod(v->c_str(), &end));
    } else {
      out = static_cast<T>(std::strtoull(v->c_str(), &end, 10));
      if (!v->empty() && (*v)[0] == '-') end = v->data();
    }
    if (v->empty() || *end != '\0' || errno != 0) errors.push_back(key + ": not a number: " + *v);
  }
};

Args Parse(int argc, char** argv, int first, const std::vector<std::string>& switches) {
  Args args;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (!a.starts_with("--")) {
      args.errors.push_back("unexpected argument " + a);
      continue;
    }
    a = a.substr(2);
    if (auto eq = a.find('='); eq != std::string::npos) {
      args.values[a.substr(0, eq)] = a.substr(eq + 1);
    } else if (std::find(switches.begin(), switches.end(), a) != switches.end()) {
      args.values[a] = "1";
    } else if (i + 1 < argc) {
      args.values[a] = argv[++i];
    } else {
      args.errors.push_back("--" + a + " needs a value");
    }
  }
  return args;
}

int Usage(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::cerr << "spoke-loader: " << e << "\n";
  std::cerr << kUsage;
  return 2;
}

int CheckUnknown(const Args& args, const std::vector<std::string>& known) {
  std::vector<std::string> errors = args.errors;
  for (const auto& [k, v] : args.values) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      errors.push_back("unknown flag --" + k);
    }
  }
  return errors.empty() ? 0 : Usage(errors);
}

int Gen(int argc, char** argv) {
  Args args = Parse(argc, argv, 2, {});
  if (int rc = CheckUnknown(args, {"dir", "workload", "samples", "seed", "shard-mib"})) return rc;
  GenOptions opt;
  opt.dir = args.Get("dir").value_or("");
  auto w = ParseWorkload(args.Get("workload").value_or(""));
  if (!w) return Usage({"--workload must be report, resnet50, unet3d or shards"});
  opt.workload = *w;
  args.Number("samples", opt.samples);
  args.Number("seed", opt.seed);
  uint64_t shard_mib = 0;
  args.Number("shard-mib", shard_mib);
  opt.shard_bytes = shard_mib << 20;
  if (!args.errors.empty()) return Usage(args.errors);
  auto m = Generate(opt);
  if (!m) {
    std::cerr << "spoke-loader gen: " << m.error().ToString() << "\n";
    return 1;
  }
  std::printf("generated %zu files, %llu samples, %.1f MB in %s\n", m->entries.size(),
              static_cast<unsigned long long>(m->TotalSamples()),
              static_cast<double>(m->TotalBytes()) / 1e6, opt.dir.c_str());
  return 0;
}

// What a run does: the flags over the dataset's MANIFEST and its workload's preset.
struct RunPlan {
  std::string dir;
  Manifest manifest;
  Workload workload = Workload::kReport;
  LoaderConfig config;
  SummaryOptions summary_options;
  double open_delay_ms = 0;
};

// --workload, checked against the dataset's layout; an exit code when it does not fit.
std::optional<int> ChooseWorkload(const Args& args, RunPlan& plan) {
  plan.workload = plan.manifest.workload;
  auto name = args.Get("workload");
  if (!name) return std::nullopt;
  auto w = ParseWorkload(*name);
  if (!w) return Usage({"--workload must be report, resnet50, unet3d or shards"});
  if ((*w == Workload::kShards) != plan.manifest.sharded()) {
    return Usage({"--workload " + *name + " does not match the dataset's layout (" +
                  std::string(WorkloadName(plan.manifest.workload)) + ")"});
  }
  plan.workload = *w;
  return std::nullopt;
}

// The workload's preset with the loader flags over it; bad numbers go to args.errors.
LoaderConfig LoaderConfigFor(Args& args, Workload workload) {
  const Preset preset = PresetFor(workload);
  LoaderConfig config;
  config.batch = preset.batch;
  config.workers = preset.workers;
  config.prefetch_factor = preset.prefetch_factor;
  config.accelerators = preset.accelerators;
  config.compute_ms = preset.compute_ms;
  args.Number("epochs", config.epochs);
  args.Number("batch", config.batch);
  args.Number("workers", config.workers);
  args.Number("prefetch-factor", config.prefetch_factor);
  args.Number("accelerators", config.accelerators);
  args.Number("compute-ms", config.compute_ms);
  args.Number("seed", config.seed);
  args.Number("max-batches", config.max_batches);
  uint64_t chunk_kib = config.chunk_bytes >> 10;
  args.Number("chunk-kib", chunk_kib);
  config.chunk_bytes = chunk_kib << 10;
  config.verify = args.Has("verify");
  config.drop_cache = args.Has("drop-cache");
  config.hints_file = args.Get("hints-file").value_or("");
  config.checkpoint.dir = args.Get("checkpoint-dir").value_or("");
  config.checkpoint.seed = config.seed;
  args.Number("checkpoint-every", config.checkpoint.every_batches);
  uint64_t checkpoint_mib = 0;
  args.Number("checkpoint-mib", checkpoint_mib);
  config.checkpoint.bytes = checkpoint_mib << 20;
  return config;
}

// Fills `plan` from the flags and the dataset; an exit code when something is wrong.
std::optional<int> PlanRun(Args& args, RunPlan& plan) {
  if (auto level = args.Get("log-level")) {
    auto l = log::ParseLevel(*level);
    if (!l) return Usage({"--log-level must be debug, info, warn or error"});
    log::SetLevel(*l);
  }
  plan.dir = args.Get("dir").value_or("");
  if (plan.dir.empty()) return Usage({"--dir is required"});
  auto manifest = ReadManifest(plan.dir);
  if (!manifest) {
    std::cerr << "spoke-loader run: " << manifest.error().ToString() << "\n";
    return 1;
  }
  plan.manifest = std::move(*manifest);
  if (auto rc = ChooseWorkload(args, plan)) return rc;
  plan.config = LoaderConfigFor(args, plan.workload);
  args.Number("window", plan.summary_options.window);
  if (!args.errors.empty()) return Usage(args.errors);
  if (auto st = plan.config.Validate(); !st) return Usage({st.error().message()});
  if (plan.summary_options.window == 0) return Usage({"--window must be >= 1"});
  args.Number("open-delay-ms", plan.open_delay_ms);
  if (!args.errors.empty()) return Usage(args.errors);
  return std::nullopt;
}

RunResult RunLoader(const RunPlan& plan) {
  PosixStorage posix(plan.dir);
  SteadyClock clock;
  DelayedStorage delayed(posix, clock, FromSeconds(plan.open_delay_ms / 1e3));
  Storage& storage = plan.open_delay_ms > 0 ? static_cast<Storage&>(delayed) : posix;
  Loader loader(plan.config, plan.manifest, storage, clock);
  return loader.Run();
}

void PrintRun(std::ostream& text, const RunPlan& plan, const Summary& summary,
              const RunResult& result) {
  const LoaderConfig& config = plan.config;
  text << "workload " << WorkloadName(plan.workload) << ": batch " << config.batch << ", workers "
       << config.workers << ", prefetch " << config.prefetch_factor << ", accelerators "
       << config.accelerators << ", compute " << config.compute_ms << " ms, epochs "
       << config.epochs << "\n";
  PrintSummary(text, summary);
  if (result.checkpoint_load) {
    text << "checkpoint loaded (step " << result.checkpoint_load->step << ") in "
         << result.checkpoint_load->seconds << " s\n";
  }
  if (!result.checkpoint_save_s.empty()) {
    const auto& s = result.checkpoint_save_s;
    text << "checkpoints saved " << s.size() << ", mean "
         << std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size()) << " s, max "
         << *std::max_element(s.begin(), s.end()) << " s\n";
  }
  if (result.read_errors || result.verify_failures || result.hint_failures ||
      result.checkpoint_failures) {
    text << "read errors " << result.read_errors << ", verify failures " << result.verify_failures
         << ", hint failures " << result.hint_failures << ", checkpoint failures "
         << result.checkpoint_failures << "\n";
  }
}

nlohmann::json RunJson(const Args& args, const RunPlan& plan, const Summary& summary,
                       const RunResult& result) {
  const LoaderConfig& config = plan.config;
  nlohmann::json j = SummaryToJson(summary);
  j["label"] = args.Get("label").value_or(std::string(WorkloadName(plan.workload)));
  j["workload"] = WorkloadName(plan.workload);
  j["dir"] = plan.dir;
  j["csv"] = args.Get("csv").value_or("");
  j["read_errors"] = result.read_errors;
  j["verify_failures"] = result.verify_failures;
  j["hint_failures"] = result.hint_failures;
  if (config.checkpoint.enabled()) {
    j["checkpoint"] = {
        {"every_batches", config.checkpoint.every_batches},
        {"bytes", config.checkpoint.bytes},
        {"save_s", result.checkpoint_save_s},
        {"load_s", result.checkpoint_load ? nlohmann::json(result.checkpoint_load->seconds)
                                          : nlohmann::json()},
        {"failures", result.checkpoint_failures}};
  }
  j["config"] = {
      {"epochs", config.epochs},
      {"batch", config.batch},
      {"workers", config.workers},
      {"prefetch_factor", config.prefetch_factor},
      {"accelerators", config.accelerators},
      {"compute_ms", config.compute_ms},
      {"seed", config.seed},
      {"verify", config.verify},
      {"hints", !config.hints_file.empty()},
      {"window", plan.summary_options.window},
      {"max_batches", config.max_batches},
      {"ideal_samples_per_s", config.compute_ms > 0
                                  ? config.batch * config.accelerators / (config.compute_ms / 1e3)
                                  : 0.0}};
  return j;
}

// To stdout for "-", else into the file.
void WriteJson(const std::string& json_path, const nlohmann::json& j) {
  if (json_path == "-") {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::ofstream out(json_path, std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) std::cerr << "spoke-loader: cannot write " << json_path << "\n";
}

int Run(int argc, char** argv) {
  Args args = Parse(argc, argv, 2, {"verify", "drop-cache"});
  if (int rc = CheckUnknown(args, {"dir",
                                   "workload",
                                   "epochs",
                                   "batch",
                                   "workers",
                                   "prefetch-factor",
                                   "accelerators",
                                   "compute-ms",
                                   "seed",
                                   "csv",
                                   "json",
                                   "label",
                                   "hints-file",
                                   "verify",
                                   "drop-cache",
                                   "chunk-kib",
                                   "window",
                                   "log-level",
                                   "open-delay-ms",
                                   "max-batches",
                                   "checkpoint-dir",
                                   "checkpoint-every",
                                   "checkpoint-mib"})) {
    return rc;
  }
  RunPlan plan;
  if (auto rc = PlanRun(args, plan)) return *rc;
  const RunResult result = RunLoader(plan);
  const Summary summary = Summarize(result.records, plan.config.accelerators, plan.summary_options);

  if (auto csv = args.Get("csv")) {
    std::ofstream out(*csv, std::ios::trunc);
    WriteCsv(out, result.records, plan.summary_options.window);
    if (!out) std::cerr << "spoke-loader: cannot write " << *csv << "\n";
  }
  const auto json_path = args.Get("json");
  std::ostream& text = (json_path && *json_path == "-") ? std::cerr : std::cout;
  PrintRun(text, plan, summary, result);
  if (json_path) WriteJson(*json_path, RunJson(args, plan, summary, result));
  return (result.read_errors || result.verify_failures || result.checkpoint_failures) ? 1 : 0;
}

// Writes one checkpoint, as a previous run would have left it (a run's load then reads it).
int WriteCheckpoint(int argc, char** argv) {
  Args args = Parse(argc, argv, 2, {});
  if (int rc = CheckUnknown(args, {"dir", "mib", "step", "seed"})) return rc;
  CheckpointConfig config;
  config.dir = args.Get("dir").value_or("");
  if (config.dir.empty()) return Usage({"--dir is required"});
  config.every_batches = 1;
  uint64_t mib = 0, step = 0;
  args.Number("mib", mib);
  args.Number("step", step);
  args.Number("seed", config.seed);
  config.bytes = mib << 20;
  if (!args.errors.empty()) return Usage(args.errors);
  if (auto st = config.Validate(); !st) return Usage({"--mib must be >= 1"});
  SteadyClock clock;
  Checkpointer ckpt(config, clock);
  auto saved = ckpt.Save(step);
  if (!saved) {
    std::cerr << "spoke-loader checkpoint: " << saved.error().ToString() << "\n";
    return 1;
  }
  std::printf("wrote %s (step %llu, %llu MiB) in %.2f s\n", ckpt.path().c_str(),
              static_cast<unsigned long long>(step), static_cast<unsigned long long>(mib), *saved);
  return 0;
}

}  // namespace
}  // namespace spoke::bench

int main(int argc, char** argv) {
  if (argc < 2) return spoke::bench::Usage({});
  const std::string cmd = argv[1];
  if (cmd == "gen") return spoke::bench::Gen(argc, argv);
  if (cmd == "run") return spoke::bench::Run(argc, argv);
  if (cmd == "checkpoint") return spoke::bench::WriteCheckpoint(argc, argv);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << spoke::bench::kUsage;
    return 0;
  }
  return spoke::bench::Usage({"unknown command " + cmd});
}
