// Checkpoints as a training loop writes them with torch.save: the whole state into a temporary
// file, fsync, close, rename over the previous one (os.replace), fsync of the directory; at
// the start of a run, the latest one read whole. The training step waits for all of it.
//
// Content: one random block of `chunk` bytes from the seed, repeated, each chunk stamped at
// its start with the checkpoint's step and the chunk's index, so a load checks every byte it
// reads (a stale chunk, a misplaced one or a short file is a failure, not a slow success).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/loader/clock.h"
#include "common/status.h"

namespace spoke::bench {

struct CheckpointConfig {
  std::string dir;             // where checkpoint.pt lives (empty: no checkpoints)
  uint64_t every_batches = 0;  // a save after every this many batches of the run (0: none)
  uint64_t bytes = 0;          // size of one checkpoint
  uint64_t chunk = 4 << 20;    // bytes per write() and read(), as a buffered writer's
  uint64_t seed = 1;

  bool enabled() const { return !dir.empty(); }
  // Returns kInvalidArgument naming the flag.
  Status Validate() const;
};

struct CheckpointLoad {
  uint64_t step = 0;
  double seconds = 0;
};

class Checkpointer {
 public:
  // config must have passed Validate().
  Checkpointer(CheckpointConfig config, Clock& clock);

  // Writes the checkpoint of `step` and replaces the previous one; returns the seconds it
  // took. kIo and friends name the call and the path that failed.
  Result<double> Save(uint64_t step);
  // Reads the latest checkpoint whole and checks every byte. kNotFound: there is none;
  // kChecksum: a byte or the size is not what its step wrote.
  Result<CheckpointLoad> Load();

  std::string path() const { return config_.dir + "/checkpoint.pt"; }

 private:
  // The chunk with index `i` of the checkpoint of `step` (its last one may be shorter).
  void Stamp(uint64_t step, uint64_t i, std::vector<char>& buf) const;
  Status WriteAll(int fd, uint64_t step, const std::string& where);

  CheckpointConfig config_;
  Clock& clock_;
  std::vector<char> pattern_;
};

}  // namespace spoke::bench
