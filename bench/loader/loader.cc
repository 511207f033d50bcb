#include "bench/loader/loader.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "bench/loader/plan.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace spoke::bench {
namespace {

// What a worker hands over for one batch (the data itself stays in the worker's buffer: the
// emulator measures delivery, not what a model does with the bytes).
struct BatchOutcome {
  uint32_t index = 0;  // the plan batch this is (delivery must hand them out in index order)
  uint64_t bytes = 0;
  uint32_t samples = 0;
  uint32_t read_errors = 0;
  uint32_t verify_failures = 0;
  Nanos ready{0};
};

// Shared between one epoch's workers and the consumer.
struct EpochState {
  explicit EpochState(size_t batches) : done(batches) {}
  Mutex mu;
  CondVar cv;
  std::vector<std::optional<BatchOutcome>> done GUARDED_BY(mu);  // by plan batch index
  uint64_t consumed GUARDED_BY(mu) = 0;
};

// Counts a failure; logs only the first few so a broken mount does not flood the terminal.
void ReportError(uint32_t& counter, const std::string& what) {
  static std::atomic<int> logged{0};
  ++counter;
  if (logged.fetch_add(1) < 10) log::Warn("sample read failed", {{"error", what}});
}

// A worker's sequential reader over its shards: reads chunk_bytes at a time and cuts records
// out of the buffer, as a TFRecord / WebDataset reader does.
class ShardStream {
 public:
  ShardStream(const Manifest& manifest, Storage& storage, const LoaderConfig& config)
      : manifest_(manifest), storage_(storage), config_(config) {}
  ~ShardStream() {
    if (state_) XXH3_freeState(state_);
  }

  // Reads record item.record of shard item.file, which must be the next one in the stream.
  void Next(const ReadItem& item, BatchOutcome& out) {
    ++out.samples;
    if (item.file != file_ || !open_) Start(item.file, out);
    if (broken_) {
      ReportError(out.read_errors, manifest_.entries[item.file].path + ": shard unreadable");
      return;
    }
    assert(item.record == next_record_ && "shard records must be read in order");
    const auto& entry = manifest_.entries[file_];
    if (!Ensure(kRecordHeaderBytes, out)) return;
    auto header = DecodeRecordHeader(buf_.data() + pos_);
    if (!header) {
      broken_ = true;
      ReportError(out.verify_failures, entry.path + ": " + header.error().message());
      return;
    }
    pos_ += kRecordHeaderBytes;
    if (!Ensure(header->length, out)) return;
    if (config_.verify && Checksum(std::span<const std::byte>(
                              buf_.data() + pos_, header->length)) != header->checksum) {
      ReportError(out.verify_failures,
                  entry.path + ": record " + std::to_string(item.record) + " checksum");
    }
    pos_ += header->length;
    ++next_record_;
    if (next_record_ == entry.records) Finish(out);
  }

 private:
  void Start(uint32_t file, BatchOutcome& out) {
    file_ = file;
    open_ = true;
    broken_ = false;
    next_record_ = 0;
    offset_ = 0;
    pos_ = 0;
    len_ = 0;
    if (!state_) state_ = XXH3_createState();
    XXH3_64bits_reset(state_);
    auto f = storage_.Open(manifest_.entries[file].path);
    if (!f) {
      broken_ = true;
      ReportError(out.read_errors, f.error().ToString());
      return;
    }
    handle_ = std::move(*f);
  }

  // Makes n bytes available at pos_, reading further chunks. False = error (counted).
  bool Ensure(uint64_t n, BatchOutcome& out) {
    if (len_ - pos_ >= n) return true;
    if (len_ > pos_) std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
    len_ -= pos_;
    pos_ = 0;
    const uint64_t want = std::max<uint64_t>(n, config_.chunk_bytes);
    if (buf_.size() < want + config_.chunk_bytes) buf_.resize(want + config_.chunk_bytes);
    while (len_ < n) {
      auto got = handle_->PRead(
          std::span<std::byte>(buf_.data() + len_,
                               std::min<uint64_t>(config_.chunk_bytes, buf_.size() - len_)),
          offset_);
      if (!got || *got == 0) {
        broken_ = true;
        ReportError(out.read_errors,
                    got ? manifest_.entries[file_].path + ": short shard" : got.error().ToString());
        return false;
      }
      XXH3_64bits_update(state_, buf_.data() + len_, *got);
      len_ += *got;
      offset_ += *got;
      out.bytes += *got;
    }
    return true;
  }

  // The last record was read: confirm EOF, check the whole-shard checksum, close.
  void Finish(BatchOutcome& out) {
    const auto& entry = manifest_.entries[file_];
    std::byte probe[1];
    auto got = handle_->PRead(probe, offset_);
    if (!got) ReportError(out.read_errors, got.error().ToString());
    if (config_.verify && ((got && *got != 0) || pos_ != len_ || offset_ != entry.size ||
                           XXH3_64bits_digest(state_) != entry.checksum)) {
      ReportError(out.verify_failures, entry.path + ": shard checksum or size mismatch");
    }
    if (config_.drop_cache) handle_->DropCache(0, entry.size);
    handle_.reset();
    open_ = false;
  }

  const Manifest& manifest_;
  Storage& storage_;
  const LoaderConfig& config_;
  std::unique_ptr<ReadFile> handle_;
  XXH3_state_t* state_ = nullptr;
  std::vector<std::byte> buf_;
  uint32_t file_ = 0;
  bool open_ = false;
  bool broken_ = false;
  uint32_t next_record_ = 0;
  uint64_t offset_ = 0;  // file offset of buf_[len_]
  uint64_t pos_ = 0;     // next unread byte in buf_
  uint64_t len_ = 0;     // valid bytes in buf_
};

// A worker's reader of whole-file samples: opens, reads and (with --verify) checks each file.
class FileSampleReader {
 public:
  FileSampleReader(const Manifest& manifest, Storage& storage, const LoaderConfig& config)
      : manifest_(manifest), storage_(storage), config_(config) {}

  void Read(const ReadItem& item, BatchOutcome& out) {
    const ManifestEntry& entry = manifest_.entries[item.file];
    ++out.samples;
    auto file = storage_.Open(entry.path);
    if (!file) {
      ReportError(out.read_errors, file.error().ToString());
      return;
    }
    auto n = ReadWhole(**file, entry.size, 0, buf_);
    if (!n) {
      ReportError(out.read_errors, n.error().ToString());
      return;
    }
    out.bytes += *n;
    if (config_.verify && (*n != entry.size || Checksum(std::span<const std::byte>(
                                                   buf_.data(), *n)) != entry.checksum)) {
      ReportError(out.verify_failures, entry.path + ": checksum or size mismatch");
    }
    if (config_.drop_cache) (*file)->DropCache(0, entry.size);
  }

 private:
  const Manifest& manifest_;
  Storage& storage_;
  const LoaderConfig& config_;
  std::vector<std::byte> buf_;
};

// Writes the epoch's file order to the hints file. False = failed (warned).
bool WriteHints(const std::string& path, const std::vector<std::string>& files) {
  std::string text;
  for (const auto& f : files) text.append(f).push_back('\n');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    log::Warn("hints file not written, continuing",
              {{"path", path}, {"error", std::strerror(errno)}});
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log::Warn("hints file write failed, continuing",
                {{"path", path}, {"error", std::strerror(errno)}});
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    log::Warn("hints file close failed, continuing",
              {{"path", path}, {"error", std::strerror(errno)}});
    return false;
  }
  return true;
}

// The first max_batches batches of plan (all of them when max_batches is 0); each worker keeps
// the indices it had below the cut, so the sample is built exactly as in the full epoch.
EpochPlan TruncatePlan(EpochPlan plan, uint32_t max_batches) {
  if (max_batches == 0 || plan.batches.size() <= max_batches) return plan;
  plan.batches.resize(max_batches);
  for (auto& indices : plan.per_worker) {
    std::erase_if(indices, [&](uint32_t idx) { return idx >= max_batches; });
  }
  return plan;
}

}  // namespace

Status LoaderConfig::Validate() const {
  if (epochs == 0) return Fail(Code::kInvalidArgument, "--epochs must be >= 1");
  if (batch == 0) return Fail(Code::kInvalidArgument, "--batch must be >= 1");
  if (workers == 0 || workers > 256) {
    return Fail(Code::kInvalidArgument, "--workers must be in [1, 256]");
  }
  if (prefetch_factor == 0) return Fail(Code::kInvalidArgument, "--prefetch-factor must be >= 1");
  if (accelerators == 0) return Fail(Code::kInvalidArgument, "--accelerators must be >= 1");
  if (!(compute_ms >= 0)) return Fail(Code::kInvalidArgument, "--compute-ms must be >= 0");
  if (chunk_bytes == 0) return Fail(Code::kInvalidArgument, "--chunk-kib must be >= 1");
  SPOKE_RETURN_IF_ERROR(checkpoint.Validate());
  return Ok();
}

Loader::Loader(LoaderConfig config, const Manifest& manifest, Storage& storage, Clock& clock,
               LoaderHooks hooks)
    : config_(std::move(config)),
      manifest_(manifest),
      storage_(storage),
      clock_(clock),
      hooks_(std::move(hooks)) {
  if (config_.checkpoint.enabled()) checkpointer_.emplace(config_.checkpoint, clock_);
}

// What the epochs share: the run's clock origin, when each accelerator is free again, and
// what was delivered so far.
struct Loader::RunState {
  Nanos t0{0};
  Nanos compute{0};          // one batch's computation
  uint64_t outstanding = 0;  // batches built ahead of the consumer (prefetch_factor x workers)
  std::vector<Nanos> free_at;
  uint64_t seq = 0;
  RunResult result;
};

// One epoch: its plan, and what its workers share with the dispatcher.
struct Loader::Epoch {
  Epoch(uint32_t epoch, EpochPlan p)
      : index(epoch), plan(std::move(p)), state(plan.batches.size()) {}
  uint32_t index;
  const EpochPlan plan;
  EpochState state;
};

RunResult Loader::Run() {
  RunState run;
  LoadCheckpoint(run);
  run.t0 = clock_.Now();
  run.compute = FromSeconds(config_.compute_ms / 1e3);
  run.outstanding = uint64_t{config_.prefetch_factor} * config_.workers;
  run.free_at.assign(config_.accelerators, run.t0);
  for (uint32_t epoch = 0; epoch < config_.epochs; ++epoch) RunEpoch(epoch, run);
  // Wait for the last computations so the run ends when the accelerators do.
  clock_.SleepUntil(*std::max_element(run.free_at.begin(), run.free_at.end()));
  return std::move(run.result);
}

void Loader::RunEpoch(uint32_t epoch, RunState& run) {
  Epoch e(epoch,
          TruncatePlan(PlanEpoch(manifest_, config_.seed, epoch, config_.batch, config_.workers),
                       config_.max_batches));
  std::vector<std::thread> workers;
  for (uint32_t b = 0; b < e.plan.batches.size(); ++b) {
    // The next free accelerator asks for a batch.
    const auto acc = static_cast<uint32_t>(
        std::min_element(run.free_at.begin(), run.free_at.end()) - run.free_at.begin());
    clock_.SleepUntil(run.free_at[acc]);
    if (b == 0) {
      if (!config_.hints_file.empty() &&
          !WriteHints(config_.hints_file, HintPaths(manifest_, e.plan))) {
        ++run.result.hint_failures;
      }
      for (uint32_t k = 0; k < config_.workers; ++k) {
        workers.emplace_back(
            [this, &e, k, outstanding = run.outstanding] { BuildBatches(e, k, outstanding); });
      }
    }
    Dispatch(e, b, acc, run);
    MaybeSaveCheckpoint(run);
  }
  for (auto& t : workers) t.join();
  log::Info("epoch done", {{"epoch", epoch},
                           {"batches", e.plan.batches.size()},
                           {"elapsed_s", ToSeconds(clock_.Now() - run.t0)}});
}

void Loader::BuildBatches(Epoch& e, uint32_t worker, uint64_t outstanding) {
  FileSampleReader files(manifest_, storage_, config_);
  ShardStream stream(manifest_, storage_, config_);
  for (const uint32_t idx : e.plan.per_worker[worker]) {
    uint64_t consumed;
    {
      MutexLock lock(e.state.mu);
      e.state.cv.wait(lock,
                      [&]() REQUIRES(e.state.mu) { return idx < e.state.consumed + outstanding; });
      consumed = e.state.consumed;
    }
    if (hooks_.on_batch_start) hooks_.on_batch_start(e.index, idx, consumed);
    BatchOutcome out;
    out.index = idx;
    for (const ReadItem& item : e.plan.batches[idx].items) {
      if (manifest_.sharded()) {
        stream.Next(item, out);
      } else {
        files.Read(item, out);
      }
    }
    out.ready = clock_.Now();
    {
      MutexLock lock(e.state.mu);
      e.state.done[idx] = out;
    }
    e.state.cv.notify_all();
  }
}

void Loader::Dispatch(Epoch& e, uint32_t b, uint32_t acc, RunState& run) {
  BatchOutcome out;
  {
    MutexLock lock(e.state.mu);
    e.state.cv.wait(lock, [&]() REQUIRES(e.state.mu) { return e.state.done[b].has_value(); });
    out = *e.state.done[b];
    e.state.consumed = b + 1;
  }
  e.state.cv.notify_all();
  const Nanos now = clock_.Now();
  BatchRecord r;
  r.seq = run.seq++;
  r.epoch = e.index;
  r.batch = out.index;
  r.worker = e.plan.batches[out.index].worker;
  r.accelerator = acc;
  r.samples = out.samples;
  r.bytes = out.bytes;
  r.data_wait_s = ToSeconds(now - run.free_at[acc]);
  r.compute_s = ToSeconds(run.compute);
  r.ready_s = ToSeconds(out.ready - run.t0);
  r.dispatch_s = ToSeconds(now - run.t0);
  r.completion_s = ToSeconds(now + run.compute - run.t0);
  run.free_at[acc] = now + run.compute;
  run.result.read_errors += out.read_errors;
  run.result.verify_failures += out.verify_failures;
  if (hooks_.on_dispatch) hooks_.on_dispatch(r);
  run.result.records.push_back(r);
}

void Loader::LoadCheckpoint(RunState& run) {
  if (!checkpointer_) return;
  auto load = checkpointer_->Load();
  if (load) {
    log::Info("checkpoint loaded", {{"step", load->step}, {"seconds", load->seconds}});
    run.result.checkpoint_load = *load;
  } else if (load.error().code() != Code::kNotFound) {
    ++run.result.checkpoint_failures;
    log::Warn("checkpoint load failed", {{"error", load.error().ToString()}});
  }
}

void Loader::MaybeSaveCheckpoint(RunState& run) {
  if (!checkpointer_ || run.seq % config_.checkpoint.every_batches != 0) return;
  // The step that saves runs after the batches before it (a synchronous torch.save).
  clock_.SleepUntil(*std::max_element(run.free_at.begin(), run.free_at.end()));
  auto saved = checkpointer_->Save(run.seq);
  if (saved) {
    run.result.checkpoint_save_s.push_back(*saved);
  } else {
    ++run.result.checkpoint_failures;
    log::Warn("checkpoint save failed", {{"step", run.seq}, {"error", saved.error().ToString()}});
  }
  std::fill(run.free_at.begin(), run.free_at.end(), clock_.Now());
}

}  // namespace spoke::bench
