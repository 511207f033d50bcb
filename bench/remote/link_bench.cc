// What the hub link carries for a cold fill, without FUSE and without a cache: lists a tree
// through the project's remote layer (LibnfsRemote: READDIRPLUS by handle, several
// directories at once, as the agent's walk does) and then reads every regular file's bytes
// the way the agent's BlockFetcher reads a cold block (ReadCheckedAsync of each block of at
// most block_size bytes, by the listing's handle for a short block), with connections x
// inflight_per_connection reads in flight. The bytes are counted and dropped.
//
//   spoke-remote-link-bench URL [--connections N] [--inflight-per-connection N]
//                               [--prefix DIR] [--list-parallel N] [--block-size BYTES]
//
// URL is what `spokectl mount` takes: nfs://server/share?nfsport=..&mountport=.. (the WAN
// proxy's ports for the link over the WAN). The defaults are the agent's (agent_config.h:
// 4 connections x 128 reads in flight, 1 MiB blocks). Prints a human summary and one line
// "RESULT key=value ..." for scripts (bench/cold-fill/cold_fill.py).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/remote/libnfs_remote.h"
#include "common/volume.h"

using spoke::agent::DirEntry;
using spoke::agent::LibnfsRemote;
using spoke::agent::RemoteFs;
using Clock = std::chrono::steady_clock;

namespace {

struct File {
  std::string path;
  uint64_t file_id = 0;
  uint64_t size = 0;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s URL [--connections N] [--inflight-per-connection N] [--prefix DIR]\n"
               "          [--list-parallel N] [--block-size BYTES]\n",
               argv0);
  return 2;
}

// Lists the tree under `top` breadth first, `parallel` directories at once (blocking
// ReadDir calls on that many threads). Returns false (message printed) on a hub error.
bool ListTree(LibnfsRemote& remote, const std::string& top, int parallel, std::vector<File>* files,
              uint64_t* dirs) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> todo{top};
  int busy = 0;
  bool failed = false;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return failed || !todo.empty() || busy == 0; });
      if (failed || (todo.empty() && busy == 0)) return;
      std::string dir = std::move(todo.front());
      todo.pop_front();
      busy++;
      lock.unlock();
      auto r = remote.ReadDir(dir);
      lock.lock();
      busy--;
      (*dirs)++;
      if (!r) {
        std::fprintf(stderr, "list %s: %s\n", dir.c_str(), r.error().ToString().c_str());
        failed = true;
      } else {
        for (const DirEntry& e : *r) {
          std::string p = dir.empty() ? e.name : dir + "/" + e.name;
          if (e.attr.is_dir()) {
            todo.push_back(std::move(p));
          } else if (e.attr.is_reg()) {
            files->push_back(File{std::move(p), e.attr.file_id, e.attr.size});
          }
        }
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < parallel; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return !failed;
}

struct BenchFlags {
  LibnfsRemote::Config config;  // the agent's defaults unless told otherwise
  std::string prefix;
  int list_parallel = 16;  // the agent's walk lists 16 directories at once
  uint32_t block_size = 1u << 20;
};

// The flags after the URL; false on an unknown flag or one without its value.
bool ParseFlags(int argc, char** argv, BenchFlags& flags) {
  flags.config.request_timeout_seconds = 30;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--connections") {
      flags.config.connections = std::atoi(v);
    } else if (a == "--inflight-per-connection") {
      flags.config.inflight_per_connection = std::atoi(v);
    } else if (a == "--prefix") {
      flags.prefix = v;
    } else if (a == "--list-parallel") {
      flags.list_parallel = std::atoi(v);
    } else if (a == "--block-size") {
      flags.block_size = static_cast<uint32_t>(std::atoll(v));
    } else {
      return false;
    }
  }
  return true;
}

struct ReadFigures {
  uint64_t bytes = 0, reads = 0, errors = 0;
  std::string first_error;
};

// One read per block, as the BlockFetcher asks for a cold block; at most `depth` in flight.
ReadFigures ReadEveryBlock(LibnfsRemote& remote, const std::vector<File>& files,
                           uint32_t block_size, int depth) {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  ReadFigures figures;
  for (const File& f : files) {
    for (uint64_t off = 0; off < f.size; off += block_size) {
      uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block_size, f.size - off));
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return in_flight < depth; });
        in_flight++;
      }
      remote.ReadCheckedAsync(
          f.path, f.file_id, off, len, [&, len](spoke::Result<RemoteFs::CheckedRead> r) {
            std::lock_guard<std::mutex> lock(mu);
            if (!r || r->data.size() != len) {
              if (figures.errors++ == 0) {
                figures.first_error = r ? "short read: " + std::to_string(r->data.size()) + " of " +
                                              std::to_string(len)
                                        : r.error().ToString();
              }
            } else {
              figures.bytes += len;
              figures.reads++;
            }
            in_flight--;
            cv.notify_all();
          });
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  return figures;
}

struct Report {
  std::string url;
  int connections = 0, inflight_per_connection = 0;
  int depth = 0;  // reads in flight
  size_t files = 0;
  uint64_t dirs = 0;
  ReadFigures read;
  uint64_t by_handle = 0;
  double connect_s = 0, list_s = 0, read_s = 0;
};

void PrintReport(const Report& r) {
  const double total_s = r.list_s + r.read_s;
  const uint64_t bytes = r.read.bytes;
  std::printf("link %s, %d connections x %d in flight = %d reads in flight\n", r.url.c_str(),
              r.connections, r.inflight_per_connection, r.depth);
  std::printf("  connect %.2f s; listed %lu files in %lu directories in %.2f s\n", r.connect_s,
              static_cast<unsigned long>(r.files), static_cast<unsigned long>(r.dirs), r.list_s);
  std::printf("  read %lu bytes (%lu reads, %lu by handle) in %.2f s: %.1f MB/s, %.0f files/s\n",
              static_cast<unsigned long>(bytes), static_cast<unsigned long>(r.read.reads),
              static_cast<unsigned long>(r.by_handle), r.read_s, bytes / r.read_s / 1e6,
              r.files / r.read_s);
  std::printf("  list + read %.2f s: %.1f MB/s, %.0f files/s\n", total_s, bytes / total_s / 1e6,
              r.files / total_s);
  std::printf(
      "RESULT files=%lu dirs=%lu bytes=%lu reads=%lu reads_by_handle=%lu depth=%d connect_s=%.3f "
      "list_s=%.3f read_s=%.3f total_s=%.3f\n",
      static_cast<unsigned long>(r.files), static_cast<unsigned long>(r.dirs),
      static_cast<unsigned long>(bytes), static_cast<unsigned long>(r.read.reads),
      static_cast<unsigned long>(r.by_handle), r.depth, r.connect_s, r.list_s, r.read_s, total_s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return Usage(argv[0]);
  auto hub = spoke::ParseNfsUrl(argv[1]);
  if (!hub) {
    std::fprintf(stderr, "%s: %s\n", argv[1], hub.error().ToString().c_str());
    return 2;
  }
  BenchFlags flags;
  if (!ParseFlags(argc, argv, flags)) return Usage(argv[0]);
  const LibnfsRemote::Config& config = flags.config;
  if (auto s = config.Validate(); !s) {
    std::fprintf(stderr, "%s\n", s.error().ToString().c_str());
    return 2;
  }
  if (flags.list_parallel < 1 || flags.block_size < 4096 || flags.block_size > (1u << 20)) {
    return Usage(argv[0]);
  }

  Report report;
  report.url = hub->NfsUrl();
  report.connections = config.connections;
  report.inflight_per_connection = config.inflight_per_connection;
  auto connect_start = Clock::now();
  auto remote = LibnfsRemote::Connect(*hub, "", config, nullptr);
  if (!remote) {
    std::fprintf(stderr, "connect: %s\n", remote.error().ToString().c_str());
    return 1;
  }
  report.connect_s = Since(connect_start);

  auto list_start = Clock::now();
  std::vector<File> files;
  uint64_t dirs = 0;
  if (!ListTree(**remote, flags.prefix, flags.list_parallel, &files, &dirs)) return 1;
  report.list_s = Since(list_start);

  report.depth = config.connections * config.inflight_per_connection;
  auto read_start = Clock::now();
  report.read = ReadEveryBlock(**remote, files, flags.block_size, report.depth);
  report.read_s = Since(read_start);
  if (report.read.errors > 0) {
    std::fprintf(stderr, "%lu reads failed; first: %s\n",
                 static_cast<unsigned long>(report.read.errors), report.read.first_error.c_str());
    return 1;
  }
  report.files = files.size();
  report.dirs = dirs;
  report.by_handle = (*remote)->reads_by_handle();
  PrintReport(report);
  return 0;
}
