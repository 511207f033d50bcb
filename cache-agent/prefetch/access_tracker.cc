#include "cache-agent/prefetch/access_tracker.h"

#include <algorithm>
#include <functional>
#include <utility>

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

namespace {

// "a/b/c" -> ("a/b", "c"); "c" -> ("", "c"). A path the root directory holds is its own name
// (also "/c", which is not a relative path but must come back as it went in: Path()).
std::pair<std::string_view, std::string_view> SplitPath(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return {std::string_view(), path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

size_t AccessTracker::Hash(DirIndex dir, std::string_view name) {
  const size_t h = std::hash<std::string_view>{}(name);
  return h ^ (static_cast<size_t>(dir) * 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
}

std::string_view AccessTracker::Name(FileIndex f) const {
  const TrackedFile& t = files_[f];
  return std::string_view(names_.data() + t.name_at, t.name_size);
}

std::string AccessTracker::Path(FileIndex f) const {
  const std::string& dir = DirectoryPath(files_[f].dir);
  const std::string_view name = Name(f);
  if (dir.empty()) return std::string(name);
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  path.append(dir).append(1, '/').append(name);
  return path;
}

std::optional<FileIndex> AccessTracker::FindIn(DirIndex dir, std::string_view name) const {
  if (path_slots_.empty()) return std::nullopt;
  const size_t mask = path_slots_.size() - 1;
  for (size_t i = Hash(dir, name) & mask;; i = (i + 1) & mask) {
    const FileIndex f = path_slots_[i];
    if (f == kNoFile) return std::nullopt;
    if (files_[f].dir == dir && Name(f) == name) return f;
  }
}

void AccessTracker::IndexPath(FileIndex f) {
  const auto put = [this](FileIndex g) {
    const size_t mask = path_slots_.size() - 1;
    size_t i = Hash(files_[g].dir, Name(g)) & mask;
    while (path_slots_[i] != kNoFile) i = (i + 1) & mask;
    path_slots_[i] = g;
  };
  // Load at most 3/4 of the live files (probe runs stay short); the table doubles, and every
  // file moves. It never shrinks: its size follows the peak live count.
  if (live_file_count() * 4 > path_slots_.size() * 3) {
    path_slots_.assign(std::max<size_t>(64, path_slots_.size() * 2), kNoFile);
    for (FileIndex g = 0; g < files_.size(); ++g) {
      if (g != f && !files_[g].dead) put(g);
    }
  }
  put(f);
}

void AccessTracker::UnindexPath(FileIndex f) {
  const size_t mask = path_slots_.size() - 1;
  size_t i = Hash(files_[f].dir, Name(f)) & mask;
  while (path_slots_[i] != f) i = (i + 1) & mask;
  // Linear probing deletes by shifting back the entries of the run that the hole would cut
  // off from their home slot (no tombstones: a table of churning files stays clean).
  path_slots_[i] = kNoFile;
  for (size_t j = (i + 1) & mask; path_slots_[j] != kNoFile; j = (j + 1) & mask) {
    const FileIndex g = path_slots_[j];
    const size_t home = Hash(files_[g].dir, Name(g)) & mask;
    const bool reachable = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (reachable) continue;
    path_slots_[i] = g;
    path_slots_[j] = kNoFile;
    i = j;
  }
}

void AccessTracker::CompactNames() {
  std::vector<char> names;
  names.reserve(names_.size() - dead_name_bytes_);
  for (TrackedFile& f : files_) {
    if (f.dead) continue;
    const size_t at = names.size();
    names.insert(names.end(), names_.begin() + f.name_at, names_.begin() + f.name_at + f.name_size);
    f.name_at = at;
  }
  names_ = std::move(names);
  dead_name_bytes_ = 0;
}

FileIndex AccessTracker::Intern(std::string_view path, uint64_t file_id, uint64_t version,
                                uint64_t size, bool in_tree) {
  const auto [dir_path, name] = SplitPath(path);
  auto d = dir_index_.find(dir_path);
  if (d != dir_index_.end()) {
    if (const auto found = FindIn(d->second, name)) {
      TrackedFile& f = files_[*found];
      f.file_id = file_id;
      f.version = version;
      f.size = size;
      if (in_tree && !f.in_tree) {
        f.in_tree = true;
        tree_order_.push_back(*found);
        ++tree_files_;
      }
      return *found;
    }
  } else {
    const auto dir = static_cast<DirIndex>(dirs_.size());
    d = dir_index_.emplace(std::string(dir_path), dir).first;
    dirs_.push_back(Dir{&d->first, {}, true});
  }
  TrackedFile f;
  f.file_id = file_id;
  f.version = version;
  f.size = size;
  f.name_at = names_.size();
  f.name_size = name.size();
  f.dir = d->second;
  f.in_tree = in_tree;
  names_.insert(names_.end(), name.begin(), name.end());
  FileIndex index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
    files_[index] = f;  // Forget reset the slot's epoch state
  } else {
    index = static_cast<FileIndex>(files_.size());
    files_.push_back(f);
    read_epoch_.push_back(0);
    read_before_mark_.push_back(false);
    order_pos_.push_back(0);
    dir_pos_.push_back(0);
  }
  Dir& dir = dirs_[f.dir];
  if (!dir.files.empty() && Name(dir.files.back()) > name) dir.sorted = false;
  dir.files.push_back(index);
  dir_pos_[index] = static_cast<uint32_t>(dir.files.size() - 1);
  IndexPath(index);
  if (in_tree) {
    tree_order_.push_back(index);
    ++tree_files_;
  }
  return index;
}

bool AccessTracker::Forget(std::string_view path) {
  const auto f = Find(path);
  if (!f) return false;
  Forget(*f);
  return true;
}

void AccessTracker::Forget(FileIndex f) {
  TrackedFile& t = files_[f];
  if (t.dead) return;
  // The epoch orders: positions after the file's shift down.
  if (ReadThisEpoch(f)) {
    const bool in_reference = epoch_ == 0 ? t.in_tree : ReadLastEpoch(f);
    if (in_reference && reference_read_ > 0) --reference_read_;
    const uint32_t pos = order_pos_[f];
    current_order_.erase(current_order_.begin() + pos);
    for (size_t i = pos; i < current_order_.size(); ++i)
      order_pos_[current_order_[i]] = static_cast<uint32_t>(i);
    for (Reopen& r : reopens_) {
      if (r.at > pos) --r.at;
    }
  }
  if (ReadLastEpoch(f)) {
    auto it = std::find(previous_order_.begin(), previous_order_.end(), f);
    if (it != previous_order_.end()) previous_order_.erase(it);
  }
  std::erase_if(reopens_, [f](const Reopen& r) { return r.file == f; });
  if (last_opened_ == f) last_opened_.reset();
  std::erase_if(streams_, [f](const auto& s) { return s.second.file == f; });
  if (t.in_tree) {
    auto it = std::find(tree_order_.begin(), tree_order_.end(), f);
    if (it != tree_order_.end()) tree_order_.erase(it);
    --tree_files_;
  }
  // The directory listing (kept sorted if it was).
  Dir& d = dirs_[t.dir];
  auto at = std::find(d.files.begin(), d.files.end(), f);
  at = d.files.erase(at);
  if (d.sorted) {
    for (; at != d.files.end(); ++at) --dir_pos_[*at];
  }
  ReleaseSlot(f);
  // Dead names stay until they are half the arena.
  if (dead_name_bytes_ * 2 > names_.size()) CompactNames();
}

void AccessTracker::ReleaseSlot(FileIndex f) {
  TrackedFile& t = files_[f];
  read_epoch_[f] = 0;
  read_before_mark_[f] = false;
  order_pos_[f] = 0;
  dir_pos_[f] = 0;
  UnindexPath(f);
  dead_name_bytes_ += t.name_size;
  t = TrackedFile{};
  t.dead = true;
  free_.push_back(f);
}

void AccessTracker::ForgetMany(std::span<const FileIndex> files) {
  // The dying set, as a bitmap over the slots: each order is filtered in one pass.
  std::vector<bool> dying(files_.size());
  std::vector<FileIndex> batch;
  batch.reserve(files.size());
  for (FileIndex f : files) {
    if (f >= files_.size() || files_[f].dead || dying[f]) continue;
    dying[f] = true;
    batch.push_back(f);
  }
  if (batch.empty()) return;
  // What Forget asks of each file's epoch state, before any of it is reset.
  std::vector<bool> in_previous(files_.size());
  bool any_current = false, any_previous = false, any_tree = false;
  size_t reference_gone = 0;
  std::vector<DirIndex> dirs;
  dirs.reserve(batch.size());
  for (FileIndex f : batch) {
    const TrackedFile& t = files_[f];
    if (ReadThisEpoch(f)) {
      any_current = true;
      if (epoch_ == 0 ? t.in_tree : ReadLastEpoch(f)) ++reference_gone;
    }
    if (ReadLastEpoch(f)) {
      in_previous[f] = true;
      any_previous = true;
    }
    if (t.in_tree) {
      any_tree = true;
      --tree_files_;
    }
    dirs.push_back(t.dir);
  }
  // Forget decrements reference_read_ per file down to 0.
  reference_read_ -= std::min(reference_read_, reference_gone);
  if (any_current) {
    // Positions after a removed one shift down by the removed ones before them; so do the
    // re-opens' positions (Forget: `at` past the file's position moves down by one).
    std::vector<size_t> removed;  // ascending
    size_t w = 0;
    for (size_t i = 0; i < current_order_.size(); ++i) {
      const FileIndex g = current_order_[i];
      if (dying[g]) {
        removed.push_back(i);
        continue;
      }
      current_order_[w] = g;
      order_pos_[g] = static_cast<uint32_t>(w);
      ++w;
    }
    current_order_.resize(w);
    for (Reopen& r : reopens_) {
      r.at -= static_cast<size_t>(std::lower_bound(removed.begin(), removed.end(), r.at) -
                                  removed.begin());
    }
  }
  if (any_previous) {
    std::erase_if(previous_order_, [&](FileIndex g) { return in_previous[g]; });
  }
  std::erase_if(reopens_, [&](const Reopen& r) { return dying[r.file]; });
  if (last_opened_ && dying[*last_opened_]) last_opened_.reset();
  std::erase_if(streams_, [&](const auto& s) { return dying[s.second.file]; });
  if (any_tree) std::erase_if(tree_order_, [&](FileIndex g) { return dying[g]; });
  // The directory listings (positions recomputed if sorted, as Forget keeps them).
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  for (DirIndex dir : dirs) {
    Dir& d = dirs_[dir];
    std::erase_if(d.files, [&](FileIndex g) { return dying[g]; });
    if (d.sorted) {
      for (size_t i = 0; i < d.files.size(); ++i) dir_pos_[d.files[i]] = static_cast<uint32_t>(i);
    }
  }
  // Slots go on the free list in the order Forget calls would put them there.
  for (FileIndex f : batch) ReleaseSlot(f);
  if (dead_name_bytes_ * 2 > names_.size()) CompactNames();
}

std::optional<FileIndex> AccessTracker::Find(std::string_view path) const {
  const auto [dir_path, name] = SplitPath(path);
  auto d = dir_index_.find(dir_path);
  if (d == dir_index_.end()) return std::nullopt;
  return FindIn(d->second, name);
}

const std::vector<FileIndex>& AccessTracker::Directory(std::string_view dir) const {
  static const std::vector<FileIndex> kEmpty;
  auto it = dir_index_.find(dir);
  if (it == dir_index_.end()) return kEmpty;
  return Directory(it->second);
}

const std::vector<FileIndex>& AccessTracker::Directory(DirIndex dir) const {
  Dir& d = dirs_[dir];
  if (!d.sorted) {
    // One directory's files share its path: ordering by name orders by path.
    std::sort(d.files.begin(), d.files.end(),
              [this](FileIndex a, FileIndex b) { return Name(a) < Name(b); });
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
  if (read_epoch_[f] == EpochMark(epoch_)) return true;
  return read_epoch_[f] == EpochMark(epoch_ + 1) && read_before_mark_[f];
}

size_t AccessTracker::ReferenceSize() const {
  return epoch_ == 0 ? tree_files_ : previous_order_.size();
}

void AccessTracker::MarkRead(FileIndex f) {
  const bool in_reference = epoch_ == 0 ? files_[f].in_tree : ReadLastEpoch(f);
  read_before_mark_[f] = read_epoch_[f] == EpochMark(epoch_);  // read in the epoch before this one
  read_epoch_[f] = EpochMark(epoch_ + 1);
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
