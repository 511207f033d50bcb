// The data-loader emulator: PyTorch DataLoader's shape, reading real files.
//
//  - W worker threads; worker k builds the batches the epoch plan gives it (k, k+W, ... for
//    map-style datasets), reading every sample fully with pread.
//  - At most prefetch_factor x W batches are outstanding (being built or built and not yet
//    taken), as DataLoader keeps prefetch_factor x W index batches in flight.
//  - Batches are taken in order (DataLoader's in-order iterator) and each goes to the next
//    free one of A simulated accelerators, which is busy for compute_ms.
//  - A new epoch's workers start when an accelerator asks for the first batch after the last
//    one of the previous epoch (persistent_workers=False); before that, the epoch's file
//    order is written to the hints file when one is configured.
//  - With checkpoints configured: the latest one is read before the first batch, and after
//    every `every_batches` batches the training step waits for its computations to end and
//    for a checkpoint to be written (torch.save in the loop), while the workers read ahead.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/loader/checkpoint.h"
#include "bench/loader/clock.h"
#include "bench/loader/dataset.h"
#include "bench/loader/stats.h"
#include "bench/loader/storage.h"
#include "common/status.h"

namespace spoke::bench {

struct LoaderConfig {
  uint32_t epochs = 1;
  uint32_t batch = 32;
  uint32_t workers = 8;
  uint32_t prefetch_factor = 2;  // PyTorch's default
  uint32_t accelerators = 1;
  double compute_ms = 270.0;  // per batch per accelerator
  uint64_t seed = 1;
  bool verify = false;     // check every sample against the manifest checksum
  std::string hints_file;  // empty = no hints
  // Bytes per pread when streaming shards (a buffered record reader's chunk); whole-file
  // samples are read with one pread for the whole file (plus the one that sees EOF).
  uint64_t chunk_bytes = 1 << 20;
  // posix_fadvise(DONTNEED) after each file so a rerun is not served by the page cache.
  bool drop_cache = false;
  // Stop each epoch after this many batches (0 = the whole epoch): a sample of an epoch too
  // slow to run in full (e.g. a remote mount without a cache), at the same per-batch pace.
  uint32_t max_batches = 0;
  CheckpointConfig checkpoint;

  // Returns kInvalidArgument naming the flag.
  Status Validate() const;
};

// Observation points for tests. Called without the loader's lock held.
struct LoaderHooks {
  // A worker starts building a batch; consumed = batches taken so far in this epoch.
  std::function<void(uint32_t epoch, uint32_t batch, uint64_t consumed)> on_batch_start;
  // The consumer handed a batch to an accelerator.
  std::function<void(const BatchRecord&)> on_dispatch;
};

struct RunResult {
  std::vector<BatchRecord> records;  // in delivery order
  uint64_t read_errors = 0;
  uint64_t verify_failures = 0;
  uint64_t hint_failures = 0;
  // Checkpoints: the one read at the start (none when there was none), each save's seconds,
  // and the loads and saves that failed (logged).
  std::optional<CheckpointLoad> checkpoint_load;
  std::vector<double> checkpoint_save_s;
  uint64_t checkpoint_failures = 0;
};

class Loader {
 public:
  // config must have passed Validate(); manifest, storage and clock outlive the Loader.
  Loader(LoaderConfig config, const Manifest& manifest, Storage& storage, Clock& clock,
         LoaderHooks hooks = {});

  // Runs all epochs. Read errors and checksum mismatches are counted and logged, not fatal.
  RunResult Run();

 private:
  struct RunState;
  struct Epoch;
  void RunEpoch(uint32_t epoch, RunState& run);
  // A worker: builds its batches of the epoch, at most `outstanding` ahead of the consumer.
  void BuildBatches(Epoch& e, uint32_t worker, uint64_t outstanding);
  // Waits for batch `b`, hands it to accelerator `acc` and records it.
  void Dispatch(Epoch& e, uint32_t b, uint32_t acc, RunState& run);
  // Reads the latest checkpoint, if any; a failure other than none is counted.
  void LoadCheckpoint(RunState& run);
  // After every every_batches batches: waits for the accelerators, then saves.
  void MaybeSaveCheckpoint(RunState& run);

  LoaderConfig config_;
  const Manifest& manifest_;
  Storage& storage_;
  Clock& clock_;
  LoaderHooks hooks_;
  std::optional<Checkpointer> checkpointer_;
};

}  // namespace spoke::bench
