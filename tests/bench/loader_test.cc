#include "bench/loader/loader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "bench/loader/checkpoint.h"
#include "bench/loader/clock.h"
#include "bench/loader/dataset.h"
#include "bench/loader/plan.h"
#include "bench/loader/stats.h"
#include "bench/loader/storage.h"
#include "tests/support/temp_dir.h"

namespace spoke::bench {
namespace {

using spoke::testing::TempDir;

// Counts opens per path, delegating to a real directory.
class CountingStorage : public Storage {
 public:
  explicit CountingStorage(const std::string& root) : inner_(root) {}
  Result<std::unique_ptr<ReadFile>> Open(std::string_view rel_path) override {
    {
      std::lock_guard lock(mu_);
      ++opens_[std::string(rel_path)];
    }
    return inner_.Open(rel_path);
  }
  std::map<std::string, int> opens() {
    std::lock_guard lock(mu_);
    return opens_;
  }

 private:
  PosixStorage inner_;
  std::mutex mu_;
  std::map<std::string, int> opens_;
};

Manifest FakeManifest(uint32_t files, uint32_t records = 1) {
  Manifest m;
  m.workload = records > 1 ? Workload::kShards : Workload::kReport;
  for (uint32_t i = 0; i < files; ++i) {
    // Uneven record counts for shards so workers run out at different times.
    m.entries.push_back({"f" + std::to_string(i), 100, 0, records > 1 ? records + i % 3 : 1});
  }
  return m;
}

// --- shuffle -----------------------------------------------------------------------------

TEST(EpochPermutation, IsAPermutationDifferentPerEpochAndReproducible) {
  const auto e0 = EpochPermutation(42, 0, 1000);
  const auto e1 = EpochPermutation(42, 1, 1000);
  std::vector<uint32_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);

  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, EpochPermutation(42, 0, 1000));
  EXPECT_NE(e0, EpochPermutation(43, 0, 1000));
  // Actually shuffled: few fixed points.
  int fixed = 0;
  for (uint32_t i = 0; i < 1000; ++i) fixed += e0[i] == i;
  EXPECT_LT(fixed, 20);
}

// --- plans -------------------------------------------------------------------------------

TEST(PlanEpoch, MapStyleCoversEverySampleOnceWithRoundRobinWorkers) {
  const Manifest m = FakeManifest(103);
  const EpochPlan plan = PlanEpoch(m, 7, 3, 10, 4);
  ASSERT_EQ(plan.batches.size(), 11u);  // 10 full + one of 3 (drop_last=False)
  EXPECT_EQ(plan.batches.back().items.size(), 3u);
  std::vector<int> seen(103, 0);
  for (size_t b = 0; b < plan.batches.size(); ++b) {
    EXPECT_EQ(plan.batches[b].index, b);
    EXPECT_EQ(plan.batches[b].worker, b % 4);
    for (const auto& item : plan.batches[b].items) ++seen[item.file];
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  EXPECT_EQ(plan.per_worker[1], (std::vector<uint32_t>{1, 5, 9}));
  // The order is the epoch's permutation.
  const auto perm = EpochPermutation(7, 3, 103);
  EXPECT_EQ(plan.batches[0].items[0].file, perm[0]);
  EXPECT_EQ(plan.batches[1].items[0].file, perm[10]);
}

TEST(PlanEpoch, ShardsAreStreamedSequentiallyByOneWorkerEach) {
  const Manifest m = FakeManifest(7, 10);  // 10..12 records per shard
  const uint32_t workers = 3;
  const EpochPlan plan = PlanEpoch(m, 1, 0, 4, workers);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  std::map<uint32_t, uint32_t> shard_worker;
  uint64_t items = 0;
  for (const auto& b : plan.batches) {
    for (const auto& item : b.items) {
      EXPECT_TRUE(seen.insert({item.file, item.record}).second) << "read twice";
      auto [it, fresh] = shard_worker.emplace(item.file, b.worker);
      EXPECT_EQ(it->second, b.worker) << "a shard split across workers";
      ++items;
    }
  }
  EXPECT_EQ(items, m.TotalSamples());
  // Each worker's stream is sequential inside each shard, shards in permutation order.
  const auto perm = EpochPermutation(1, 0, 7);
  for (uint32_t k = 0; k < workers; ++k) {
    std::vector<ReadItem> stream;
    for (uint32_t idx : plan.per_worker[k]) {
      EXPECT_EQ(plan.batches[idx].worker, k);
      for (const auto& item : plan.batches[idx].items) stream.push_back(item);
    }
    std::vector<ReadItem> expected;
    for (uint32_t s = k; s < 7; s += workers) {
      for (uint32_t r = 0; r < m.entries[perm[s]].records; ++r) expected.push_back({perm[s], r});
    }
    EXPECT_EQ(stream, expected) << "worker " << k;
  }
  // Delivery interleaves workers: the first batches come from workers 0, 1, 2.
  EXPECT_EQ(plan.batches[0].worker, 0u);
  EXPECT_EQ(plan.batches[1].worker, 1u);
  EXPECT_EQ(plan.batches[2].worker, 2u);
}

TEST(HintPaths, ListsEachFileOnceInDeliveryOrder) {
  const Manifest m = FakeManifest(25);
  const EpochPlan plan = PlanEpoch(m, 3, 0, 4, 2);
  const auto hints = HintPaths(m, plan);
  ASSERT_EQ(hints.size(), 25u);
  size_t i = 0;
  for (const auto& b : plan.batches) {
    for (const auto& item : b.items) EXPECT_EQ(hints[i++], m.entries[item.file].path);
  }
}

// --- statistics --------------------------------------------------------------------------

// A synthetic run on one accelerator: batch i waits wait(i) then computes `compute`.
std::vector<BatchRecord> SyntheticRun(int batches, double compute,
                                      const std::function<double(int)>& wait) {
  std::vector<BatchRecord> out;
  double t = 0;
  for (int i = 0; i < batches; ++i) {
    BatchRecord r;
    r.seq = i;
    r.batch = i;
    r.samples = 32;
    r.bytes = 32 * 110000;
    r.data_wait_s = wait(i);
    r.compute_s = compute;
    r.dispatch_s = t + r.data_wait_s;
    r.completion_s = r.dispatch_s + compute;
    t = r.completion_s;
    out.push_back(r);
  }
  return out;
}

TEST(Summarize, WarmupIsTheStalledPrefix) {
  const auto records = SyntheticRun(200, 0.27, [](int i) { return i < 20 ? 1.0 : 0.0; });
  const Summary s = Summarize(records, 1);
  EXPECT_EQ(s.batches, 200u);
  EXPECT_EQ(s.samples, 6400u);
  EXPECT_NEAR(s.steady_samples_per_s, 32 / 0.27, 1e-6);
  EXPECT_EQ(s.warmup_batches, 20u);
  EXPECT_EQ(s.stalled_batches_after_warmup, 0u);
  EXPECT_NEAR(s.time_to_first_batch_s, 1.0, 1e-9);
  const double total = 20 * 1.0 + 200 * 0.27;
  EXPECT_NEAR(s.total_time_s, total, 1e-9);
  EXPECT_NEAR(s.au, 200 * 0.27 / total, 1e-9);
  EXPECT_NEAR(s.samples_per_s, 6400 / total, 1e-9);
  EXPECT_NEAR(s.data_wait_s, 20.0, 1e-9);
}

TEST(Summarize, NeverStalledHasNoWarmupAndFullUtilisation) {
  const auto records = SyntheticRun(50, 0.27, [](int) { return 0.0; });
  const Summary s = Summarize(records, 1);
  EXPECT_EQ(s.warmup_batches, 0u);
  EXPECT_NEAR(s.au, 1.0, 1e-9);
}

TEST(Summarize, UtilisationCountsEveryAccelerator) {
  // Two accelerators, each batch 1 s compute, both busy the whole time but the run is 10 s
  // with only 10 batches: AU = 10 / (10 x 2) = 0.5.
  std::vector<BatchRecord> records;
  for (int i = 0; i < 10; ++i) {
    BatchRecord r;
    r.seq = i;
    r.samples = 1;
    r.compute_s = 1.0;
    r.dispatch_s = i;
    r.completion_s = i + 1.0;
    records.push_back(r);
  }
  EXPECT_NEAR(Summarize(records, 2).au, 0.5, 1e-9);
  EXPECT_NEAR(Summarize(records, 1).au, 1.0, 1e-9);
}

TEST(Summarize, SteadyStateIgnoresALateIsolatedStall) {
  // One long stall near the end (an epoch boundary) must not move the median.
  const auto records = SyntheticRun(100, 0.5, [](int i) { return i == 90 ? 5.0 : 0.0; });
  const Summary s = Summarize(records, 1);
  EXPECT_NEAR(s.steady_samples_per_s, 64.0, 1e-6);
  EXPECT_EQ(s.warmup_batches, 0u);
  EXPECT_EQ(s.stalled_batches_after_warmup, 1u);
}

TEST(WriteCsv, OneLinePerBatchWithHeader) {
  const auto records = SyntheticRun(5, 0.27, [](int) { return 0.01; });
  std::ostringstream out;
  WriteCsv(out, records, 10);
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  EXPECT_TRUE(line.starts_with("seq,epoch,batch,"));
  int n = 0;
  while (std::getline(in, line)) ++n;
  EXPECT_EQ(n, 5);
}

// --- generation + real runs ----------------------------------------------------------------

LoaderConfig SmallConfig() {
  LoaderConfig c;
  c.epochs = 2;
  c.batch = 4;
  c.workers = 3;
  c.prefetch_factor = 2;
  c.accelerators = 2;
  c.compute_ms = 100;
  c.verify = true;
  return c;
}

TEST(GenerateAndRun, EveryFileReadOncePerEpochAndChecksumsVerify) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kReport, 37, 5, 0});
  ASSERT_TRUE(m) << m.error().ToString();
  ASSERT_EQ(m->entries.size(), 37u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/train/class-000/sample-000000.jpg"));
  auto reread = ReadManifest(dir.path());
  ASSERT_TRUE(reread) << reread.error().ToString();
  ASSERT_EQ(reread->entries.size(), 37u);
  EXPECT_EQ(reread->entries[3].checksum, m->entries[3].checksum);
  EXPECT_EQ(reread->workload, Workload::kReport);
  // Sizes spread around the mean.
  std::set<uint64_t> sizes;
  for (const auto& e : m->entries) sizes.insert(e.size);
  EXPECT_GT(sizes.size(), 30u);

  CountingStorage storage(dir.path());
  ManualClock clock;
  const LoaderConfig config = SmallConfig();
  ASSERT_TRUE(config.Validate());
  Loader loader(config, *reread, storage, clock);
  const RunResult r = loader.Run();
  EXPECT_EQ(r.read_errors, 0u);
  EXPECT_EQ(r.verify_failures, 0u);
  ASSERT_EQ(r.records.size(), 2u * 10u);  // ceil(37 / 4) per epoch
  uint64_t bytes = 0, samples = 0;
  for (const auto& rec : r.records) bytes += rec.bytes, samples += rec.samples;
  EXPECT_EQ(bytes, 2 * m->TotalBytes());
  EXPECT_EQ(samples, 2u * 37u);
  for (const auto& [path, count] : storage.opens()) EXPECT_EQ(count, 2) << path;
  EXPECT_EQ(storage.opens().size(), 37u);
  // Compute was simulated on the clock: 20 batches x 100 ms over 2 accelerators.
  const Summary s = Summarize(r.records, config.accelerators);
  EXPECT_NEAR(s.compute_s, 2.0, 1e-9);
  EXPECT_GE(s.total_time_s, 1.0 - 1e-9);
}

TEST(GenerateAndRun, VerifyCatchesACorruptSample) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kResnet50, 12, 9, 0});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->entries[0].size, 114660u);
  {
    const std::string victim = dir.path() + "/" + m->entries[5].path;
    const int fd = ::open(victim.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "corrupt!", 8, 1000), 8);
    ::close(fd);
  }
  PosixStorage storage(dir.path());
  ManualClock clock;
  LoaderConfig config = SmallConfig();
  config.epochs = 1;
  const RunResult r = Loader(config, *m, storage, clock).Run();
  EXPECT_EQ(r.verify_failures, 1u);
  config.verify = false;
  EXPECT_EQ(Loader(config, *m, storage, clock).Run().verify_failures, 0u);
}

TEST(GenerateAndRun, MaxBatchesStopsEachEpochEarly) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kResnet50, 40, 9, 0});
  ASSERT_TRUE(m);
  PosixStorage storage(dir.path());
  ManualClock clock;
  LoaderConfig config = SmallConfig();
  config.epochs = 2;
  config.max_batches = 2;
  const RunResult r = Loader(config, *m, storage, clock).Run();
  ASSERT_EQ(r.records.size(), 4u);  // 2 batches in each of 2 epochs
  EXPECT_EQ(r.records[1].epoch, 0u);
  EXPECT_EQ(r.records[1].batch, 1u);
  EXPECT_EQ(r.records[2].epoch, 1u);
  EXPECT_EQ(r.records[2].batch, 0u);
  config.max_batches = 1000;  // more than the epoch has: the whole epoch
  EXPECT_GT(Loader(config, *m, storage, clock).Run().records.size(), 4u);
}

TEST(GenerateAndRun, ShardsStreamAndVerify) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kShards, 60, 3, 1 << 20});
  ASSERT_TRUE(m) << m.error().ToString();
  EXPECT_GT(m->entries.size(), 3u);  // ~9 records per 1 MiB shard
  EXPECT_EQ(m->TotalSamples(), 60u);
  for (const auto& e : m->entries) EXPECT_LE(e.size, 1u << 20);
  CountingStorage storage(dir.path());
  ManualClock clock;
  LoaderConfig config = SmallConfig();
  config.chunk_bytes = 64 << 10;  // several chunks per record on average
  const RunResult r = Loader(config, *m, storage, clock).Run();
  EXPECT_EQ(r.read_errors, 0u);
  EXPECT_EQ(r.verify_failures, 0u);
  uint64_t bytes = 0, samples = 0;
  for (const auto& rec : r.records) bytes += rec.bytes, samples += rec.samples;
  EXPECT_EQ(samples, 2u * 60u);
  EXPECT_EQ(bytes, 2 * m->TotalBytes());
  for (const auto& [path, count] : storage.opens()) EXPECT_EQ(count, 2) << path;

  // Flip a byte inside one record's payload: the record and the shard checksums both fail.
  const std::string victim = dir.path() + "/" + m->entries[0].path;
  const int fd = ::open(victim.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "x", 1, 100), 1);
  ::close(fd);
  config.epochs = 1;
  EXPECT_EQ(Loader(config, *m, storage, clock).Run().verify_failures, 2u);
}

TEST(GenerateAndRun, HintsFileGetsTheEpochOrderBeforeReads) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kReport, 10, 4, 0});
  ASSERT_TRUE(m);
  const std::string hints = dir.path() + "/hints.txt";
  PosixStorage storage(dir.path());
  ManualClock clock;
  LoaderConfig config = SmallConfig();
  config.hints_file = hints;
  std::vector<std::string> seen_at_epoch_start;
  LoaderHooks hooks;
  std::mutex mu;
  hooks.on_batch_start = [&](uint32_t epoch, uint32_t batch, uint64_t) {
    if (batch != 0) return;
    std::ifstream in(hints);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::lock_guard lock(mu);
    seen_at_epoch_start.push_back(text);
  };
  const RunResult r = Loader(config, *m, storage, clock, hooks).Run();
  EXPECT_EQ(r.hint_failures, 0u);
  ASSERT_EQ(seen_at_epoch_start.size(), 2u);
  for (uint32_t e = 0; e < 2; ++e) {
    std::string expected;
    for (const auto& p :
         HintPaths(*m, PlanEpoch(*m, config.seed, e, config.batch, config.workers))) {
      expected += p + "\n";
    }
    EXPECT_EQ(seen_at_epoch_start[e], expected) << "epoch " << e;
  }
  EXPECT_NE(seen_at_epoch_start[0], seen_at_epoch_start[1]);

  // An unwritable hints path is a warning, not a failure of the run.
  config.hints_file = dir.path() + "/no/such/dir/hints";
  const RunResult r2 = Loader(config, *m, storage, clock).Run();
  EXPECT_EQ(r2.hint_failures, 2u);
  EXPECT_EQ(r2.records.size(), 6u);
}

// Holds every read of one file until `release` reads of other files have completed.
class GatedStorage : public Storage {
 public:
  GatedStorage(const std::string& root, std::string gated, int release)
      : inner_(root), gated_(std::move(gated)), release_(release) {}

  Result<std::unique_ptr<ReadFile>> Open(std::string_view rel_path) override {
    if (rel_path == gated_) {
      std::unique_lock lock(mu_);
      timed_out_ =
          !cv_.wait_for(lock, std::chrono::seconds(20), [&] { return others_done_ >= release_; });
    }
    auto f = inner_.Open(rel_path);
    if (rel_path != gated_) {
      std::lock_guard lock(mu_);
      ++others_done_;
      cv_.notify_all();
    }
    return f;
  }
  bool timed_out() {
    std::lock_guard lock(mu_);
    return timed_out_;
  }

 private:
  PosixStorage inner_;
  std::string gated_;
  int release_;
  std::mutex mu_;
  std::condition_variable cv_;
  int others_done_ = 0;
  bool timed_out_ = false;
};

TEST(Loader, DeliversInOrderWhenLaterBatchesAreReadyFirst) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kReport, 32, 11, 0});
  ASSERT_TRUE(m);
  LoaderConfig config = SmallConfig();
  config.epochs = 1;
  config.workers = 4;
  config.accelerators = 1;
  const EpochPlan plan = PlanEpoch(*m, config.seed, 0, config.batch, config.workers);
  // Batch 0's first file is held until batches 1, 2 and 3 (workers 1-3) were opened.
  const std::string gated = m->entries[plan.batches[0].items[0].file].path;
  GatedStorage storage(dir.path(), gated, 3 * static_cast<int>(config.batch));
  ManualClock clock;
  std::vector<uint32_t> dispatched;
  LoaderHooks hooks;
  hooks.on_dispatch = [&](const BatchRecord& r) { dispatched.push_back(r.batch); };
  const RunResult r = Loader(config, *m, storage, clock, hooks).Run();
  EXPECT_FALSE(storage.timed_out());
  ASSERT_EQ(dispatched.size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(dispatched[i], i);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(r.records[i].batch, i);
    EXPECT_EQ(r.records[i].worker, i % 4);
  }
}

TEST(Loader, AtMostPrefetchFactorTimesWorkersBatchesOutstanding) {
  TempDir dir;
  auto m = Generate({dir.path(), Workload::kReport, 24, 2, 0});
  ASSERT_TRUE(m);
  LoaderConfig config = SmallConfig();
  config.epochs = 1;
  config.batch = 1;
  config.workers = 2;
  config.prefetch_factor = 2;  // 4 outstanding
  PosixStorage storage(dir.path());
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  int64_t max_lead = -1;
  LoaderHooks hooks;
  hooks.on_batch_start = [&](uint32_t, uint32_t batch, uint64_t consumed) {
    std::lock_guard lock(mu);
    ++started;
    max_lead = std::max<int64_t>(max_lead, int64_t{batch} - static_cast<int64_t>(consumed));
    cv.notify_all();
  };
  int started_while_first_held = 0;
  hooks.on_dispatch = [&](const BatchRecord& r) {
    if (r.batch != 0) return;
    // Hold the consumer on batch 0 (one taken -> batches up to 4 may start) and let the
    // workers run as far ahead as they are allowed to.
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return started >= 5; });
    cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return started > 5; });
    started_while_first_held = started;
  };
  const RunResult r = Loader(config, *m, storage, clock, hooks).Run();
  EXPECT_EQ(r.records.size(), 24u);
  EXPECT_EQ(started_while_first_held, 5);
  EXPECT_EQ(max_lead, 3);  // batch idx starts only when idx < consumed + 4
}

TEST(Checkpointer, ALoadReadsWhatTheLastSaveWroteAndChecksEveryByte) {
  TempDir dir;
  ManualClock clock;
  const CheckpointConfig config{
      .dir = dir.path(), .every_batches = 1, .bytes = 10 << 10, .chunk = 4 << 10, .seed = 3};
  Checkpointer ckpt(config, clock);
  EXPECT_EQ(ckpt.Load().error().code(), Code::kNotFound);
  ASSERT_TRUE(ckpt.Save(4));
  ASSERT_TRUE(ckpt.Save(9));  // replaces step 4's
  auto load = ckpt.Load();
  ASSERT_TRUE(load) << load.error().ToString();
  EXPECT_EQ(load->step, 9u);
  EXPECT_FALSE(std::filesystem::exists(ckpt.path() + ".tmp"));

  // One byte changed in the last (short) chunk: the load names the chunk.
  {
    std::fstream f(ckpt.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((8 << 10) + 100);
    f.put('\x5a' ^ static_cast<char>(f.peek()));
  }
  load = ckpt.Load();
  ASSERT_FALSE(load);
  EXPECT_EQ(load.error().code(), Code::kChecksum);
  EXPECT_NE(load.error().message().find("chunk 2"), std::string::npos) << load.error().message();

  // A checkpoint cut short is not a fast, good load.
  ASSERT_TRUE(ckpt.Save(11));
  std::filesystem::resize_file(ckpt.path(), 6 << 10);
  load = ckpt.Load();
  ASSERT_FALSE(load);
  EXPECT_NE(load.error().message().find("4096 good bytes"), std::string::npos)
      << load.error().message();
}

TEST(GenerateAndRun, CheckpointsLoadFirstAndEachSaveWaitsForTheAcceleratorsBefore) {
  TempDir dir;
  TempDir ckpt_dir;
  auto m = Generate({dir.path(), Workload::kResnet50, 64, 9, 0});
  ASSERT_TRUE(m);
  PosixStorage storage(dir.path());
  ManualClock clock;
  LoaderConfig config = SmallConfig();
  config.accelerators = 2;
  config.compute_ms = 100;
  config.checkpoint = {
      .dir = ckpt_dir.path(), .every_batches = 3, .bytes = 64 << 10, .chunk = 16 << 10, .seed = 1};
  const RunResult first = Loader(config, *m, storage, clock).Run();
  EXPECT_FALSE(first.checkpoint_load);  // nothing to load yet
  EXPECT_EQ(first.checkpoint_failures, 0u);
  const size_t n = first.records.size();
  ASSERT_GE(n, 7u);
  EXPECT_EQ(first.checkpoint_save_s.size(), n / 3);
  for (size_t k = 3; k < n; k += 3) {
    // Batch k is handed out only after every batch before it finished computing (the save
    // ran in between), although two accelerators otherwise overlap.
    EXPECT_GE(first.records[k].dispatch_s, first.records[k - 1].completion_s) << k;
    EXPECT_GE(first.records[k].dispatch_s, first.records[k - 2].completion_s) << k;
  }
  EXPECT_LT(first.records[1].dispatch_s, first.records[0].completion_s);

  const RunResult second = Loader(config, *m, storage, clock).Run();
  ASSERT_TRUE(second.checkpoint_load);
  EXPECT_EQ(second.checkpoint_load->step, n / 3 * 3);  // the first run's last save
}

TEST(LoaderConfig, ValidateNamesTheFlag) {
  LoaderConfig c;
  c.batch = 0;
  auto st = c.Validate();
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message().find("--batch"), std::string::npos);
  c = {};
  c.accelerators = 0;
  EXPECT_NE(c.Validate().error().message().find("--accelerators"), std::string::npos);
  c = {};
  c.checkpoint.dir = "/tmp";
  EXPECT_NE(c.Validate().error().message().find("--checkpoint-every"), std::string::npos);
  c.checkpoint.every_batches = 5;
  EXPECT_NE(c.Validate().error().message().find("--checkpoint-mib"), std::string::npos);
}

}  // namespace
}  // namespace spoke::bench
