#include "cache-agent/fs/kernel_inode_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "cache-agent/fs/kept_root.h"
#include "common/file_io.h"
#include "common/hex.h"
#include "common/log.h"

namespace spoke::agent {
namespace {

// Names and handles are hex ("-" when empty): any byte, never a space or a newline.
std::string Hex(std::string_view bytes) { return bytes.empty() ? "-" : ToHex(bytes); }

std::optional<std::string> Unhex(const std::string& text) {
  if (text == "-") return std::string();
  auto bytes = FromHex(text, "entry");
  if (!bytes) return std::nullopt;
  return std::move(*bytes);
}

// "K ino parent <attr> fh name end" or "D ino end".
std::string LineOf(const KernelInodeLog::Entry& e) {
  std::ostringstream out;
  out << "K " << e.ino << ' ' << e.parent << ' ';
  WriteAttrText(out, e.attr);
  out << ' ' << Hex(e.fh) << ' ' << Hex(e.name) << " end\n";
  return out.str();
}

std::string DropLineOf(uint64_t ino) { return "D " + std::to_string(ino) + " end\n"; }

// Appends all of `bytes`; false (errno set) when it cannot.
bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int OpenForAppend(const std::string& file, bool fresh) {
  return ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (fresh ? O_TRUNC : 0),
                0600);
}

}  // namespace

std::vector<KernelInodeLog::Entry> KernelInodeLog::Load(const std::string& file) {
  std::ifstream in(file);
  std::vector<Entry> order;  // every K line; replaced or dropped ones are left out below
  std::unordered_map<uint64_t, size_t> latest;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, end;
    uint64_t ino = 0;
    if (!(words >> kind >> ino) || ino == 0) continue;
    if (kind == "D") {
      if (words >> end && end == "end") latest.erase(ino);
      continue;
    }
    Entry e;
    e.ino = ino;
    std::string fh, name;
    if (kind != "K" || !(words >> e.parent) || !ReadAttrText(words, &e.attr) ||
        !(words >> fh >> name >> end) || end != "end") {
      continue;
    }
    auto fh_bytes = Unhex(fh);
    auto name_bytes = Unhex(name);
    if (!fh_bytes || !name_bytes || name_bytes->empty()) continue;
    e.fh = std::move(*fh_bytes);
    e.name = std::move(*name_bytes);
    latest[ino] = order.size();
    order.push_back(std::move(e));
  }
  std::vector<Entry> live;
  live.reserve(latest.size());
  for (size_t i = 0; i < order.size(); ++i) {
    auto it = latest.find(order[i].ino);
    if (it != latest.end() && it->second == i) live.push_back(std::move(order[i]));
  }
  return live;
}

Result<std::unique_ptr<KernelInodeLog>> KernelInodeLog::Open(const std::string& file, bool fresh,
                                                             std::chrono::milliseconds interval) {
  uint64_t lines = 0;
  if (!fresh) {
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) ++lines;
  }
  int fd = OpenForAppend(file, fresh);
  if (fd < 0) return Fail(Code::kIo, "cannot open " + file + ": " + std::strerror(errno));
  return std::unique_ptr<KernelInodeLog>(new KernelInodeLog(file, fd, lines, interval));
}

KernelInodeLog::KernelInodeLog(std::string file, int fd, uint64_t lines,
                               std::chrono::milliseconds interval)
    : file_(std::move(file)), interval_(interval), fd_(fd), lines_(lines) {
  flusher_ = std::thread([this] { FlushLoop(); });
}

KernelInodeLog::~KernelInodeLog() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  flusher_.join();
  Flush();
  MutexLock w(write_mu_);
  ::close(fd_);
}

void KernelInodeLog::Kept(const Entry& entry) {
  std::string line = LineOf(entry);
  MutexLock lock(mu_);
  queued_ += line;
  ++lines_;
}

void KernelInodeLog::Dropped(uint64_t ino) {
  MutexLock lock(mu_);
  queued_ += DropLineOf(ino);
  ++lines_;
}

void KernelInodeLog::Rewrite(std::vector<Entry> live) {
  MutexLock lock(mu_);
  queued_.clear();
  lines_ = live.size();
  rewrite_ = std::move(live);
}

uint64_t KernelInodeLog::lines() const {
  MutexLock lock(mu_);
  return lines_;
}

void KernelInodeLog::Flush() {
  MutexLock w(write_mu_);
  WriteQueued();
}

void KernelInodeLog::FlushLoop() {
  while (true) {
    {
      MutexLock lock(mu_);
      cv_.wait_for(lock, interval_, [this]() REQUIRES(mu_) { return stop_; });
      if (stop_) return;
    }
    Flush();
  }
}

void KernelInodeLog::WriteQueued() {
  std::string bytes;
  std::optional<std::vector<Entry>> rewrite;
  {
    MutexLock lock(mu_);
    bytes.swap(queued_);
    rewrite.swap(rewrite_);
  }
  if (rewrite) {
    std::string whole;
    for (const Entry& e : *rewrite) whole += LineOf(e);
    // A failed rewrite keeps the old file, which still holds every entry (and more).
    if (auto st = ReplaceFile(file_, whole); !st) {
      log::Warn("cannot rewrite the kernel's inode list", {{"error", st.error().ToString()}});
    } else if (int fd = OpenForAppend(file_, false); fd >= 0) {
      ::close(fd_);
      fd_ = fd;
    }
  }
  if (!bytes.empty() && !WriteAll(fd_, bytes) && !std::exchange(warned_, true)) {
    log::Warn(
        "cannot keep the kernel's inodes for a restart: a restart while the hub is down "
        "answers some of them only once the hub is back",
        {{"file", file_}, {"error", std::strerror(errno)}});
  }
}

}  // namespace spoke::agent
