#include "cache-agent/prefetch/access_tracker.h"

#include <algorithm>

namespace spoke::agent {

Status AccessTracker::Config::Validate() const {
  if (block_size == 0) return Fail(Code::kInvalidArgument, "block_size must be > 0");
  if (!(reopen_gap_fraction > 0 && reopen_gap_fraction <= 1)) {
    return Fail(Code::kInvalidArgument, "reopen_gap_fraction must be in (0, 1]");
  }
  if (min_epoch_files < 2) return Fail(Code::kInvalidArgument, "min_epoch_files must be >= 2");
  if (!(carry_fraction >= 0 && carry_fraction < 0.5)) {
    return Fail(Code::kInvalidArgument, "carry_fraction must be in [0, 0.5)");
  }
  return Ok();
}

AccessTracker::AccessTracker(Config config) : config_(config) {}

FileIndex AccessTracker::AddTreeFile(std::string_view path, uint64_t file_id, uint64_t version,
                                     uint64_t size) {
  return Intern(path, file_id, version, size, /*in_tree=*/true);
}

FileIndex AccessTracker::Intern(std::string_view path, uint64_t file_id, uint64_t version,
                                uint64_t size, bool in_tree) {
  auto it = by_path_.find(std::string(path));
  if (it != by_path_.end()) {
    TrackedFile& f = files_[it->second];
    f.file_id = file_id;
    f.version = version;
    f.size = size;
    if (in_tree && !f.in_tree) {
      f.in_tree = true;
      tree_order_.push_back(it->second);
      ++tree_files_;
    }
    return it->second;
  }
  const auto index = static_cast<FileIndex>(files_.size());
  TrackedFile f;
  f.path = std::string(path);
  const size_t slash = f.path.rfind('/');
  f.dir = slash == std::string::npos ? std::string() : f.path.substr(0, slash);
  f.file_id = file_id;
  f.version = version;
  f.size = size;
  f.in_tree = in_tree;
  Dir& d = dirs_[f.dir];
  if (!d.files.empty() && files_[d.files.back()].path > f.path) d.sorted = false;
  d.files.push_back(index);
  files_.push_back(std::move(f));
  by_path_.emplace(files_.back().path, index);
  if (in_tree) {
    tree_order_.push_back(index);
    ++tree_files_;
  }
  read_epoch_.push_back(0);
  read_epoch_prev_.push_back(0);
  order_pos_.push_back(0);
  dir_pos_.push_back(static_cast<uint32_t>(d.files.size() - 1));
  return index;
}

std::optional<FileIndex> AccessTracker::Find(std::string_view path) const {
  auto it = by_path_.find(std::string(path));
  if (it == by_path_.end()) return std::nullopt;
  return it->second;
}

const std::vector<FileIndex>& AccessTracker::Directory(const std::string& dir) const {
  static const std::vector<FileIndex> kEmpty;
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return kEmpty;
  Dir& d = it->second;
  if (!d.sorted) {
    std::sort(d.files.begin(), d.files.end(),
              [this](FileIndex a, FileIndex b) { return files_[a].path < files_[b].path; });
    for (size_t i = 0; i < d.files.size(); ++i) dir_pos_[d.files[i]] = static_cast<uint32_t>(i);
    d.sorted = true;
  }
  return d.files;
}

uint32_t AccessTracker::PositionInDirectory(FileIndex f) const {
  Directory(files_[f].dir);  // sorts lazily
  return dir_pos_[f];
}

bool AccessTracker::ReadLastEpoch(FileIndex f) const {
  if (epoch_ == 0) return false;
  if (read_epoch_[f] == epoch_) return true;
  return read_epoch_[f] == epoch_ + 1 && read_epoch_prev_[f] == epoch_;
}

size_t AccessTracker::ReferenceSize() const {
  return epoch_ == 0 ? tree_files_ : previous_order_.size();
}

void AccessTracker::MarkRead(FileIndex f) {
  const bool in_reference = epoch_ == 0 ? files_[f].in_tree : ReadLastEpoch(f);
  read_epoch_prev_[f] = read_epoch_[f];
  read_epoch_[f] = epoch_ + 1;
  order_pos_[f] = static_cast<uint32_t>(current_order_.size());
  current_order_.push_back(f);
  if (in_reference) ++reference_read_;
}

void AccessTracker::StartEpoch(FileIndex trigger) {
  // Re-opens in the tail of the ending epoch belong to the new one (see header).
  const size_t n = current_order_.size();
  const size_t tail =
      std::max<size_t>(config_.min_epoch_files, static_cast<size_t>(config_.carry_fraction * n));
  std::vector<FileIndex> carried;
  for (const Reopen& r : reopens_) {
    if (r.at + tail >= n && r.file != trigger &&
        std::find(carried.begin(), carried.end(), r.file) == carried.end()) {
      carried.push_back(r.file);
    }
  }
  previous_order_ = std::move(current_order_);
  current_order_.clear();
  reopens_.clear();
  reference_read_ = 0;
  ++epoch_;
  for (FileIndex f : carried) MarkRead(f);
  MarkRead(trigger);
}

void AccessTracker::OnOpen(const OpenEvent& e) {
  const FileIndex f = Intern(e.path, e.file_id, e.version, e.size, /*in_tree=*/false);
  ++opens_;
  last_opened_ = f;
  streams_[e.handle] = ReadStream{f, 0, 0, 0};
  if (!ReadThisEpoch(f)) {
    MarkRead(f);
    return;
  }
  const size_t n = current_order_.size();
  const size_t reference = ReferenceSize();
  const bool exhausted = reference > 0 && reference_read_ >= reference;
  const size_t opened_after = n - 1 - order_pos_[f];
  const bool gap = n >= config_.min_epoch_files &&
                   static_cast<double>(opened_after) >= config_.reopen_gap_fraction * n;
  if (exhausted || gap) {
    StartEpoch(f);
  } else {
    reopens_.push_back(Reopen{f, n});
  }
}

void AccessTracker::OnRead(const ReadEvent& e) {
  if (e.length > 0) {
    const uint64_t first = e.offset / config_.block_size;
    const uint64_t last = (e.offset + e.length - 1) / config_.block_size;
    blocks_read_ += last - first + 1;
  }
  auto it = streams_.find(e.handle);
  if (it == streams_.end()) return;
  ReadStream& s = it->second;
  s.sequential_run = e.offset == s.next_offset ? s.sequential_run + e.length : e.length;
  s.next_offset = e.offset + e.length;
  s.bytes_read += e.length;
}

void AccessTracker::OnClose(const CloseEvent& e) { streams_.erase(e.handle); }

const ReadStream* AccessTracker::stream(uint64_t handle) const {
  auto it = streams_.find(handle);
  return it == streams_.end() ? nullptr : &it->second;
}

}  // namespace spoke::agent
