// spoke-wan-proxy: a userspace TCP proxy that adds a one-way delay in each direction, to
// emulate a WAN link where `tc netem` is not available.
//
//   spoke-wan-proxy --delay-ms 30 --route 127.0.0.1:3049=127.0.0.1:2049 [--route ...]
//                   [--rate-mbytes 0] [--stats-file PATH]
//
// --stats-file: every 200 ms the proxy rewrites PATH with "<bytes to target> <bytes from
// target>" summed over all routes, so benchmarks can report bytes over the WAN.
//
// Each chunk is stamped when it arrives and written at arrival + delay; sleeps are never
// serialised per chunk, so the delay adds latency without capping throughput (the link
// behaves like a long fat pipe). An optional rate cap (MB/s per direction) models bandwidth.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_bytes_up{0};    // client -> target (requests)
std::atomic<uint64_t> g_bytes_down{0};  // target -> client (data)

struct Endpoint {
  std::string host;
  uint16_t port = 0;
};

struct Route {
  Endpoint listen;
  Endpoint target;
};

bool ParseEndpoint(const std::string& s, Endpoint* e) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  e->host = s.substr(0, colon);
  int p = std::atoi(s.c_str() + colon + 1);
  if (p <= 0 || p > 65535) return false;
  e->port = static_cast<uint16_t>(p);
  return true;
}

sockaddr_in ToAddr(const Endpoint& e) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(e.port);
  ::inet_pton(AF_INET, e.host.c_str(), &a.sin_addr);
  return a;
}

struct Chunk {
  Clock::time_point due;
  std::vector<char> data;
};

// One direction of one connection: a reader stamps chunks, a writer sends them when due.
class Pipe {
 public:
  Pipe(int from, int to, std::chrono::microseconds delay, double rate_bytes_per_s,
       std::atomic<uint64_t>* counter)
      : from_(from), to_(to), delay_(delay), rate_(rate_bytes_per_s), counter_(counter) {}

  void Run() {
    std::thread writer([this] { WriteLoop(); });
    ReadLoop();
    writer.join();
  }

 private:
  void ReadLoop() {
    for (;;) {
      std::vector<char> buf(256 * 1024);
      ssize_t n = ::read(from_, buf.data(), buf.size());
      if (n <= 0) break;
      buf.resize(static_cast<size_t>(n));
      counter_->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Chunk{Clock::now() + delay_, std::move(buf)});
      cv_.notify_one();
    }
    std::lock_guard<std::mutex> lock(mu_);
    eof_ = true;
    cv_.notify_one();
  }

  void WriteLoop() {
    Clock::time_point next_free = Clock::now();  // rate cap: when the link is free again
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || eof_; });
        if (queue_.empty()) break;
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      Clock::time_point due = c.due;
      if (rate_ > 0) {
        auto tx = std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(static_cast<double>(c.data.size()) / rate_));
        next_free = std::max(next_free, Clock::now()) + tx;
        due = std::max(due, next_free);
      }
      std::this_thread::sleep_until(due);
      size_t off = 0;
      while (off < c.data.size()) {
        ssize_t n = ::write(to_, c.data.data() + off, c.data.size() - off);
        if (n <= 0) {
          ::shutdown(from_, SHUT_RDWR);
          return;
        }
        off += static_cast<size_t>(n);
      }
    }
    ::shutdown(to_, SHUT_WR);
  }

  int from_, to_;
  std::chrono::microseconds delay_;
  double rate_;
  std::atomic<uint64_t>* counter_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  bool eof_ = false;
};

void Serve(Route route, std::chrono::microseconds delay, double rate) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in la = ToAddr(route.listen);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&la), sizeof la) != 0 || ::listen(lfd, 128) != 0) {
    std::fprintf(stderr, "spoke-wan-proxy: cannot listen on %s:%u: %s\n", route.listen.host.c_str(),
                 route.listen.port, std::strerror(errno));
    std::exit(1);
  }
  for (;;) {
    int cfd = ::accept(lfd, nullptr, nullptr);
    if (cfd < 0) continue;
    std::thread([cfd, route, delay, rate] {
      int sfd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in ta = ToAddr(route.target);
      if (::connect(sfd, reinterpret_cast<sockaddr*>(&ta), sizeof ta) != 0) {
        ::close(cfd);
        ::close(sfd);
        return;
      }
      int one = 1;
      ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Pipe up(cfd, sfd, delay, rate, &g_bytes_up), down(sfd, cfd, delay, rate, &g_bytes_down);
      std::thread t([&] { down.Run(); });
      up.Run();
      t.join();
      ::close(cfd);
      ::close(sfd);
    }).detach();
  }
}

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: spoke-wan-proxy --delay-ms N --route LISTEN_HOST:PORT=TARGET_HOST:PORT "
               "[--route ...] [--rate-mbytes MB_PER_S] [--stats-file PATH]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  double delay_ms = -1, rate_mb = 0;
  std::string stats_file;
  std::vector<Route> routes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) Usage();
    std::string v = argv[++i];
    if (a == "--delay-ms") {
      delay_ms = std::atof(v.c_str());
    } else if (a == "--rate-mbytes") {
      rate_mb = std::atof(v.c_str());
    } else if (a == "--stats-file") {
      stats_file = v;
    } else if (a == "--route") {
      size_t eq = v.find('=');
      Route r;
      if (eq == std::string::npos || !ParseEndpoint(v.substr(0, eq), &r.listen) ||
          !ParseEndpoint(v.substr(eq + 1), &r.target)) {
        std::fprintf(stderr, "spoke-wan-proxy: bad --route '%s'\n", v.c_str());
        Usage();
      }
      routes.push_back(r);
    } else {
      Usage();
    }
  }
  if (delay_ms < 0 || routes.empty()) Usage();
  auto delay = std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000));
  std::vector<std::thread> servers;
  for (const Route& r : routes) servers.emplace_back(Serve, r, delay, rate_mb * 1e6);
  if (!stats_file.empty()) {
    std::thread([stats_file] {
      for (;;) {
        std::string tmp = stats_file + ".tmp";
        if (FILE* f = std::fopen(tmp.c_str(), "w")) {
          std::fprintf(f, "%llu %llu\n", static_cast<unsigned long long>(g_bytes_up.load()),
                       static_cast<unsigned long long>(g_bytes_down.load()));
          std::fclose(f);
          std::rename(tmp.c_str(), stats_file.c_str());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }).detach();
  }
  for (auto& t : servers) t.join();
}
