// spoke-wan-proxy: a userspace TCP proxy that adds a one-way delay in each direction, to
// emulate a WAN link where `tc netem` is not available.
//
//   spoke-wan-proxy --delay-ms 30 --route 127.0.0.1:3049=127.0.0.1:2049 [--route ...]
//                   [--rate-mbytes 0] [--link-mbytes 0] [--stats-file PATH]
//                   [--control-socket PATH]
//
// --rate-mbytes caps each direction of each connection; --link-mbytes caps each direction of
// the whole link, shared by every connection of every route (MB/s, 10^6 bytes): a WAN path
// of that bandwidth. What the link cannot carry yet waits in the proxy, as in a router's
// queue, so a reply sent behind a backlog arrives after it.
//
// --stats-file: every 200 ms the proxy rewrites PATH with "<bytes to target> <bytes from
// target>" summed over all routes, counted as they leave the link (delivered), so
// benchmarks can report bytes over the WAN.
//
// --control-socket: a unix socket taking one text command per line, each answered with one
// line ("ok ..." or "error ..."), to inject faults for a bounded time (tests, fault soaks):
//   latency MS SECONDS      add MS to the one-way delay of data arriving in the next SECONDS
//   bandwidth KBPS SECONDS  cap each direction of each connection at KBPS KiB/s
//   blackhole SECONDS       hold all data (new and existing connections) for SECONDS, then
//                           deliver it, like a partition that heals (TCP would retransmit)
//   reset [SECONDS]         abort every open connection now (RST); for SECONDS more, abort
//                           every new connection at once
//   clear                   end every fault now
//   status                  the faults active and their remaining seconds
// Without --control-socket the proxy behaves exactly as before.
//
// Each chunk is stamped when it arrives and written at arrival + delay; sleeps are never
// serialised per chunk, so the delay adds latency without capping throughput (the link
// behaves like a long fat pipe). An optional rate cap (MB/s per direction) models bandwidth.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
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
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_bytes_up{0};    // client -> target (requests)
std::atomic<uint64_t> g_bytes_down{0};  // target -> client (data)

// Faults injected through the control socket. Each ends at its own deadline; a default
// (expired) deadline means the fault is off.
class Faults {
 public:
  struct Snapshot {
    std::chrono::microseconds extra_delay{0};
    double rate_bytes_per_s = 0;  // 0: no cap from a fault
    Clock::time_point blackhole_until{};
    bool refuse_new = false;
  };

  Snapshot Now() {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::time_point now = Clock::now();
    Snapshot s;
    if (now < latency_until_) s.extra_delay = extra_delay_;
    if (now < bandwidth_until_) s.rate_bytes_per_s = rate_;
    if (now < blackhole_until_) s.blackhole_until = blackhole_until_;
    s.refuse_new = now < reset_until_;
    return s;
  }
  Clock::time_point BlackholeUntil() {
    std::lock_guard<std::mutex> lock(mu_);
    return blackhole_until_;
  }
  void SetLatency(std::chrono::microseconds extra, Clock::duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    extra_delay_ = extra;
    latency_until_ = Clock::now() + d;
  }
  void SetBandwidth(double bytes_per_s, Clock::duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    rate_ = bytes_per_s;
    bandwidth_until_ = Clock::now() + d;
  }
  void SetBlackhole(Clock::duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    blackhole_until_ = Clock::now() + d;
  }
  void SetRefuseNew(Clock::duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    reset_until_ = Clock::now() + d;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    latency_until_ = bandwidth_until_ = blackhole_until_ = reset_until_ = Clock::time_point{};
  }
  std::string Describe() {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::time_point now = Clock::now();
    auto left = [now](Clock::time_point until) {
      return std::chrono::duration<double>(until - now).count();
    };
    std::ostringstream out;
    out.precision(3);
    out << std::fixed;
    if (now < latency_until_) {
      out << " latency=" << extra_delay_.count() / 1000.0 << "ms:" << left(latency_until_) << "s";
    }
    if (now < bandwidth_until_) {
      out << " bandwidth=" << rate_ / 1024 << "KiB/s:" << left(bandwidth_until_) << "s";
    }
    if (now < blackhole_until_) out << " blackhole:" << left(blackhole_until_) << "s";
    if (now < reset_until_) out << " reset:" << left(reset_until_) << "s";
    std::string s = out.str();
    return s.empty() ? " none" : s;
  }

 private:
  std::mutex mu_;
  std::chrono::microseconds extra_delay_{0};
  double rate_ = 0;
  Clock::time_point latency_until_{}, bandwidth_until_{}, blackhole_until_{}, reset_until_{};
};

Faults g_faults;

// A transmitter of `rate` bytes/s: a chunk that may start at `from` has been sent once the
// chunks before it have and its own bytes took their time.
struct Transmitter {
  Clock::time_point next_free{};
  Clock::time_point Send(size_t bytes, double rate, Clock::time_point from) {
    next_free = std::max(next_free, from) +
                std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(static_cast<double>(bytes) / rate));
    return next_free;
  }
};

// A link's bandwidth in one direction, shared by all its connections: each chunk, once it is
// ready to leave, takes the next free slot of the link's transmit time. Writers take slots
// chunk by chunk, so connections with data waiting share the link about evenly, like TCP
// flows through one bottleneck.
class SharedLink {
 public:
  void SetRate(double bytes_per_s) { rate_ = bytes_per_s; }
  // When a chunk of `bytes` that may leave at `ready` has crossed the link (ready if uncapped).
  Clock::time_point Reserve(size_t bytes, Clock::time_point ready) {
    if (rate_ <= 0) return ready;
    std::lock_guard<std::mutex> lock(mu_);
    return tx_.Send(bytes, rate_, ready);
  }

 private:
  double rate_ = 0;  // set before any connection, read-only after
  std::mutex mu_;
  Transmitter tx_;
};

SharedLink g_link_up, g_link_down;

// Open connections, so that a reset can abort them all.
class Connections {
 public:
  void Add(int cfd, int sfd) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.insert({cfd, sfd});
  }
  void Remove(int cfd, int sfd) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase({cfd, sfd});
  }
  // Zero linger makes the final close() send RST instead of FIN; shutdown wakes the pipes'
  // blocked reads so the connection's threads end and close both sockets.
  size_t ResetAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto [cfd, sfd] : open_) {
      Abort(cfd);
      Abort(sfd);
    }
    return open_.size();
  }
  static void Abort(int fd) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::shutdown(fd, SHUT_RDWR);
  }

 private:
  std::mutex mu_;
  std::set<std::pair<int, int>> open_;
};

Connections g_connections;

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
  Pipe(int from, int to, std::chrono::microseconds delay, double rate_bytes_per_s, SharedLink* link,
       std::atomic<uint64_t>* counter)
      : from_(from),
        to_(to),
        delay_(delay),
        rate_(rate_bytes_per_s),
        link_(link),
        counter_(counter) {}

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
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Chunk{Clock::now() + delay_ + g_faults.Now().extra_delay, std::move(buf)});
      cv_.notify_one();
    }
    std::lock_guard<std::mutex> lock(mu_);
    eof_ = true;
    cv_.notify_one();
  }

  void WriteLoop() {
    Transmitter capped;  // this connection's own rate cap (--rate-mbytes, bandwidth fault)
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
      double rate = rate_;
      double fault_rate = g_faults.Now().rate_bytes_per_s;
      if (fault_rate > 0 && (rate <= 0 || fault_rate < rate)) rate = fault_rate;
      if (rate > 0) due = std::max(due, capped.Send(c.data.size(), rate, Clock::now()));
      // The chunk joins the shared link's queue once it is ready to leave (its delay over),
      // so the link's slots go in the order chunks become ready: a router's link is never
      // idle while a packet waits. Reserving a slot before then would hold the link for a
      // chunk still on its way while other connections' ready chunks waited behind it.
      std::this_thread::sleep_until(due);
      due = link_->Reserve(c.data.size(), Clock::now());
      std::this_thread::sleep_until(due);
      // A blackhole holds the chunk until it ends; it may be extended or cleared meanwhile.
      for (Clock::time_point hold; (hold = g_faults.BlackholeUntil()) > Clock::now();) {
        std::this_thread::sleep_until(std::min(hold, Clock::now() + std::chrono::milliseconds(50)));
      }
      size_t off = 0;
      while (off < c.data.size()) {
        ssize_t n = ::write(to_, c.data.data() + off, c.data.size() - off);
        if (n <= 0) {
          ::shutdown(from_, SHUT_RDWR);
          return;
        }
        off += static_cast<size_t>(n);
      }
      // Counted as it leaves the link: what waits in the link's queue has not crossed yet.
      counter_->fetch_add(c.data.size(), std::memory_order_relaxed);
    }
    ::shutdown(to_, SHUT_WR);
  }

  int from_, to_;
  std::chrono::microseconds delay_;
  double rate_;
  SharedLink* link_;
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
    if (g_faults.Now().refuse_new) {
      Connections::Abort(cfd);
      ::close(cfd);
      continue;
    }
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
      Pipe up(cfd, sfd, delay, rate, &g_link_up, &g_bytes_up),
          down(sfd, cfd, delay, rate, &g_link_down, &g_bytes_down);
      g_connections.Add(cfd, sfd);
      std::thread t([&] { down.Run(); });
      up.Run();
      t.join();
      g_connections.Remove(cfd, sfd);
      ::close(cfd);
      ::close(sfd);
    }).detach();
  }
}

// A fault's duration: bounded so that a forgotten fault cannot outlive a test run by much.
bool ParseSeconds(const std::string& s, Clock::duration* d) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 3600) return false;
  *d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(v));
  return true;
}

bool ParsePositive(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && *v > 0 && *v < 1e12;
}

// Runs one control command; returns the reply line (without the newline).
std::string Control(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  if (w.empty()) return "error empty command";
  const std::string& cmd = w[0];
  Clock::duration d{};
  double v = 0;
  if (cmd == "latency" && w.size() == 3) {
    if (!ParsePositive(w[1], &v)) return "error latency: bad MS '" + w[1] + "'";
    if (!ParseSeconds(w[2], &d)) return "error latency: bad SECONDS '" + w[2] + "' (0 < s <= 3600)";
    g_faults.SetLatency(std::chrono::microseconds(static_cast<int64_t>(v * 1000)), d);
    return "ok latency";
  }
  if (cmd == "bandwidth" && w.size() == 3) {
    if (!ParsePositive(w[1], &v)) return "error bandwidth: bad KBPS '" + w[1] + "'";
    if (!ParseSeconds(w[2], &d)) {
      return "error bandwidth: bad SECONDS '" + w[2] + "' (0 < s <= 3600)";
    }
    g_faults.SetBandwidth(v * 1024, d);
    return "ok bandwidth";
  }
  if (cmd == "blackhole" && w.size() == 2) {
    if (!ParseSeconds(w[1], &d)) return "error blackhole: bad SECONDS '" + w[1] + "'";
    g_faults.SetBlackhole(d);
    return "ok blackhole";
  }
  if (cmd == "reset" && (w.size() == 1 || w.size() == 2)) {
    if (w.size() == 2) {
      if (!ParseSeconds(w[1], &d)) return "error reset: bad SECONDS '" + w[1] + "'";
      g_faults.SetRefuseNew(d);
    }
    return "ok reset " + std::to_string(g_connections.ResetAll()) + " connections";
  }
  if (cmd == "clear" && w.size() == 1) {
    g_faults.Clear();
    return "ok clear";
  }
  if (cmd == "status" && w.size() == 1) return "ok" + g_faults.Describe();
  return "error unknown command '" + line +
         "' (latency MS SECONDS | bandwidth KBPS SECONDS | blackhole SECONDS | reset [SECONDS] "
         "| clear | status)";
}

void ServeControl(int lfd) {
  for (;;) {
    int c = ::accept(lfd, nullptr, nullptr);
    if (c < 0) continue;
    std::thread([c] {
      std::string buf;
      char tmp[512];
      for (;;) {
        ssize_t n = ::read(c, tmp, sizeof tmp);
        if (n <= 0) break;
        buf.append(tmp, static_cast<size_t>(n));
        if (buf.size() > 4096) break;  // not a command
        for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
          std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          if (!line.empty() && line.back() == '\r') line.pop_back();
          std::string reply = Control(line) + "\n";
          if (::write(c, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) break;
        }
      }
      ::close(c);
    }).detach();
  }
}

int ListenControl(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    std::fprintf(stderr, "spoke-wan-proxy: --control-socket path too long: %s\n", path.c_str());
    std::exit(1);
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
    std::fprintf(stderr, "spoke-wan-proxy: cannot listen on %s: %s\n", path.c_str(),
                 std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

[[noreturn]] void Usage() {
  std::fprintf(
      stderr,
      "usage: spoke-wan-proxy --delay-ms N --route LISTEN_HOST:PORT=TARGET_HOST:PORT "
      "[--route ...] [--rate-mbytes MB_PER_S] [--link-mbytes MB_PER_S] [--stats-file PATH] "
      "[--control-socket PATH]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  double delay_ms = -1, rate_mb = 0, link_mb = 0;
  std::string stats_file, control_socket;
  std::vector<Route> routes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) Usage();
    std::string v = argv[++i];
    if (a == "--delay-ms") {
      delay_ms = std::atof(v.c_str());
    } else if (a == "--rate-mbytes") {
      rate_mb = std::atof(v.c_str());
    } else if (a == "--link-mbytes") {
      char* end = nullptr;
      link_mb = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(link_mb >= 0) || link_mb > 1e6) {
        std::fprintf(stderr, "spoke-wan-proxy: bad --link-mbytes '%s' (MB/s, 0 = uncapped)\n",
                     v.c_str());
        Usage();
      }
    } else if (a == "--stats-file") {
      stats_file = v;
    } else if (a == "--control-socket") {
      control_socket = v;
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
  g_link_up.SetRate(link_mb * 1e6);
  g_link_down.SetRate(link_mb * 1e6);
  if (!control_socket.empty()) std::thread(ServeControl, ListenControl(control_socket)).detach();
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
