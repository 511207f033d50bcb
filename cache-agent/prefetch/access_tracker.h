// AccessTracker: what a volume's readers have done, for the prefetch experts.
//
// It keeps
//  - the volume's files (from the metadata walk, AddTreeFile, and from opens), each with a
//    dense FileIndex, grouped by directory (listing sorted by name, the order loaders use);
//  - per-open read streams (handle -> file, next offset, sequential run);
//  - the volume's open order per epoch (first open of each file in the epoch) and the
//    previous epoch's order;
//  - a block clock: blocks read so far on the volume (the unit of predicted_use ranks).
//
// Epoch boundaries (training loaders read every file once per epoch, in a fresh or in the
// same order):
//  1. Exhaustion: once every file of the reference set (the previous epoch's files, or in
//     the first epoch the whole walked tree) has been read, the next open of a file already
//     read this epoch starts a new epoch.
//  2. Re-open: a file already read this epoch is opened again after at least
//     `reopen_gap_fraction` of this epoch's files were first opened after it (and the epoch
//     has at least `min_epoch_files` files). Re-opens shortly after the first open (a loader
//     that opens a file twice, several workers on one shard) do not count.
//  Re-opens that did not trigger a boundary but happened in the last `carry_fraction` of the
//  epoch's opens are moved into the new epoch when it starts: in a shuffled order the first
//  re-opens of the next epoch often hit files read late in this one, and they belong to the
//  next epoch.
// Not thread-safe: PrefetchScheduler calls it under its lock.
#pragma once

#if !__has_include("spoke_layer/prefetch.h")
#error "wrong-way include: cache-agent/prefetch/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache-agent/prefetch/predictor.h"
#include "common/status.h"

namespace spoke::agent {

using FileIndex = uint32_t;
using DirIndex = uint32_t;

// One file, 40 bytes: the walk feeds every file of the volume (a million on a big tree), so
// its path is not a string of its own but a directory index and a leaf name in the tracker's
// name arena (AccessTracker::Path builds the path).
struct TrackedFile {
  uint64_t file_id = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  uint64_t name_at : 40 = 0;    // the leaf name's offset in the name arena
  uint64_t name_size : 24 = 0;  // and its length (a path is far shorter: PATH_MAX)
  DirIndex dir = 0;             // parent directory (AccessTracker::DirectoryPath)
  bool in_tree = false;         // known from the metadata walk (not only from an open)
  bool dead = false;            // forgotten: the slot is on the free list (AccessTracker::Forget)

  uint64_t Blocks(uint32_t block_size) const { return (size + block_size - 1) / block_size; }
};
static_assert(sizeof(TrackedFile) == 40);

struct ReadStream {
  FileIndex file = 0;
  uint64_t next_offset = 0;     // end of the last read
  uint64_t sequential_run = 0;  // bytes read contiguously up to next_offset
  uint64_t bytes_read = 0;
};

class AccessTracker {
 public:
  struct Config {
    uint32_t block_size = 1 << 20;     // the cache's block size: unit of the block clock
    double reopen_gap_fraction = 0.5;  // see rule 2 above; half an epoch separates epochs
    uint32_t min_epoch_files = 4;      // shorter "epochs" are re-opens, not epochs
    double carry_fraction = 0.05;      // see above: the tail of an epoch where re-opens carry
    Status Validate() const;
  };

  explicit AccessTracker(Config config);

  // Metadata walk: one call per regular file, in walk order. Returns its index. A file seen
  // again (same path) is updated in place. Paths are relative to the volume root.
  FileIndex AddTreeFile(std::string_view path, uint64_t file_id, uint64_t version, uint64_t size);

  void OnOpen(const OpenEvent& e);
  void OnRead(const ReadEvent& e);
  void OnClose(const CloseEvent& e);

  // Takes a file out of the tracker (removed from the volume): out of the path index, its
  // directory's listing, the walk order and the epoch orders; its open streams end, and its
  // slot goes on a free list that the next new file reuses, so a volume whose files come and
  // go keeps a flat tracker. Indices of other files stay valid; positions in the orders and
  // listings after the file's shift down by one (experts that keep positions hear of it first:
  // TrackerExpert::OnForget). Returns false when the path is unknown.
  bool Forget(std::string_view path);
  void Forget(FileIndex f);
  // Forgets several files at once (a relisting that found many gone from the hub), leaving
  // the tracker exactly as Forget(f) for each of `files` in turn would (duplicates and
  // files already forgotten are skipped), but in one pass over each order and listing
  // instead of one per file: Forget is O(files) each.
  void ForgetMany(std::span<const FileIndex> files);

  // --- files ---
  // Slots (live and free): FileIndex values are below it. Bounded by the peak live count.
  size_t file_count() const { return files_.size(); }
  size_t live_file_count() const { return files_.size() - free_.size(); }
  size_t name_bytes() const { return names_.size(); }
  const TrackedFile& file(FileIndex i) const { return files_[i]; }
  std::optional<FileIndex> Find(std::string_view path) const;
  // A file's path (relative to the volume root) and its leaf name.
  std::string Path(FileIndex f) const;
  std::string_view Name(FileIndex f) const;
  // Walked files in walk order.
  const std::vector<FileIndex>& tree_order() const { return tree_order_; }
  // The files of a directory ("" = root), sorted by name, and a file's position in its
  // directory listing. A directory without files has an empty listing.
  const std::vector<FileIndex>& Directory(std::string_view dir) const;
  const std::vector<FileIndex>& Directory(DirIndex dir) const;
  DirIndex DirectoryOf(FileIndex f) const { return files_[f].dir; }
  const std::string& DirectoryPath(DirIndex dir) const { return *dirs_[dir].path; }
  uint32_t PositionInDirectory(FileIndex f) const;

  // --- epochs ---
  uint64_t epoch() const { return epoch_; }  // 0 = the first
  const std::vector<FileIndex>& current_order() const { return current_order_; }
  const std::vector<FileIndex>& previous_order() const { return previous_order_; }
  bool ReadThisEpoch(FileIndex f) const { return read_epoch_[f] == EpochMark(epoch_ + 1); }
  bool ReadLastEpoch(FileIndex f) const;
  // The file opened most recently, if any.
  std::optional<FileIndex> last_opened() const { return last_opened_; }
  uint64_t opens() const { return opens_; }

  // --- streams and clock ---
  const ReadStream* stream(uint64_t handle) const;
  uint64_t blocks_read() const { return blocks_read_; }
  uint32_t block_size() const { return config_.block_size; }

 private:
  FileIndex Intern(std::string_view path, uint64_t file_id, uint64_t version, uint64_t size,
                   bool in_tree);
  void StartEpoch(FileIndex trigger);
  void MarkRead(FileIndex f);
  size_t ReferenceSize() const;

  // Path index: an open-addressing table of file indices (4 bytes a slot) hashed by
  // (directory, leaf name), instead of a node and a path copy per file.
  static constexpr FileIndex kNoFile = ~FileIndex{0};
  static size_t Hash(DirIndex dir, std::string_view name);
  std::optional<FileIndex> FindIn(DirIndex dir, std::string_view name) const;
  void IndexPath(FileIndex f);
  void UnindexPath(FileIndex f);
  void CompactNames();
  // Forget's last step: the slot goes on the free list (the orders no longer hold it).
  void ReleaseSlot(FileIndex f);

  Config config_;
  std::vector<TrackedFile> files_;
  std::vector<char> names_;            // leaf names, back to back (TrackedFile::name_at)
  std::vector<FileIndex> path_slots_;  // kNoFile = free; size a power of two
  std::vector<FileIndex> free_;        // forgotten slots, reused by Intern
  size_t dead_name_bytes_ = 0;         // bytes of names_ no live file points at
  std::vector<FileIndex> tree_order_;
  size_t tree_files_ = 0;
  struct Dir {
    const std::string* path;  // the key in dir_index_
    std::vector<FileIndex> files;
    bool sorted = true;
  };
  std::map<std::string, DirIndex, std::less<>> dir_index_;
  mutable std::vector<Dir> dirs_;
  mutable std::vector<uint32_t> dir_pos_;

  uint64_t epoch_ = 0;
  // epoch+1 when read in that epoch, 0 = never; 32 bits a file (a mark 2^32 epochs old is
  // taken for a recent one: a prediction, never a byte served, can be wrong by it).
  static uint32_t EpochMark(uint64_t mark) { return static_cast<uint32_t>(mark); }
  std::vector<uint32_t> read_epoch_;
  // Read in the epoch before the one read_epoch_ marks (a bit, not the earlier mark: only
  // ReadLastEpoch asks, and only whether it was the previous epoch).
  std::vector<bool> read_before_mark_;
  std::vector<uint32_t> order_pos_;  // position in current_order_ (valid when read)
  std::vector<FileIndex> current_order_;
  std::vector<FileIndex> previous_order_;
  size_t reference_read_ = 0;  // files of the reference set read this epoch
  struct Reopen {
    FileIndex file;
    size_t at;  // current_order_.size() when it happened
  };
  std::vector<Reopen> reopens_;
  std::optional<FileIndex> last_opened_;
  uint64_t opens_ = 0;

  std::unordered_map<uint64_t, ReadStream> streams_;
  uint64_t blocks_read_ = 0;
};

}  // namespace spoke::agent
