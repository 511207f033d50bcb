// A tiny FUSE filesystem served through SessionIo, run as a child process by
// fuse_takeover_test: it mounts (or takes over a mount from the fd keeper), so the test can
// SIGKILL or SIGTERM it and start another one on the same connection.
//
//   takeover_testfs --keeper SOCK --key KEY mount --mountpoint DIR [options]
//   takeover_testfs --keeper SOCK --key KEY takeover [options]
//   options: --slow block|<ms>  reads of /slow block forever or take <ms> (default: no delay)
//            --marker PATH       created when a read of /slow starts
//            --drain-ms N        SIGTERM: drain for at most N ms (default 5000)
//
// Files: /data and /slow, 4 MiB each, byte at offset o = Pattern(o). Opens are direct_io and
// get fh = ino * 1000 + 42; a read with another fh fails with EBADF, so a handle the kernel
// kept from an earlier process is checked. stdout gets "ready resend=<outcome>
// init_match=<0|1>" once serving and "drained ok|timeout" after a SIGTERM.
#define FUSE_USE_VERSION 34
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/fuse/session_io.h"
#include "common/fd_keeper.h"
#include "tests/cache-agent/restart/pattern.h"

namespace {

using namespace std::chrono_literals;
using spoke::fuse::SessionIo;

constexpr fuse_ino_t kData = 2;
constexpr fuse_ino_t kSlow = 3;

struct Options {
  std::string keeper, key, mode, mountpoint, marker;
  long slow_ms = 0;  // -1: block forever
  long drain_ms = 5000;
};
Options g_opt;

void FillAttr(fuse_ino_t ino, struct stat* st) {
  *st = {};
  st->st_ino = ino;
  st->st_nlink = 1;
  if (ino == FUSE_ROOT_ID) {
    st->st_mode = S_IFDIR | 0755;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_size = spoke::testfs::kFileSize;
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_ino_t ino = 0;
  if (parent == FUSE_ROOT_ID && std::strcmp(name, "data") == 0) ino = kData;
  if (parent == FUSE_ROOT_ID && std::strcmp(name, "slow") == 0) ino = kSlow;
  if (ino == 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = ino;
  FillAttr(ino, &e.attr);
  fuse_reply_entry(req, &e);  // timeouts 0: every lookup reaches the daemon
}

void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != FUSE_ROOT_ID && ino != kData && ino != kSlow) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  FillAttr(ino, &st);
  fuse_reply_attr(req, &st, 0);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  fi->fh = ino * 1000 + 42;
  fi->direct_io = 1;
  fuse_reply_open(req, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  if (fi->fh != ino * 1000 + 42) {
    fuse_reply_err(req, EBADF);
    return;
  }
  if (ino == kSlow) {
    if (!g_opt.marker.empty()) ::close(::open(g_opt.marker.c_str(), O_CREAT | O_WRONLY, 0644));
    if (g_opt.slow_ms < 0) {
      for (;;) ::pause();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(g_opt.slow_ms));
  }
  std::vector<char> buf;
  if (off < spoke::testfs::kFileSize) {
    size_t n = std::min<size_t>(size, static_cast<size_t>(spoke::testfs::kFileSize - off));
    buf.resize(n);
    for (size_t i = 0; i < n; ++i) buf[i] = spoke::testfs::Pattern(static_cast<uint64_t>(off) + i);
  }
  fuse_reply_buf(req, buf.data(), buf.size());
}

int Die(const std::string& msg) {
  std::cerr << "takeover_testfs: " << msg << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--keeper")
      g_opt.keeper = value();
    else if (a == "--key")
      g_opt.key = value();
    else if (a == "--mountpoint")
      g_opt.mountpoint = value();
    else if (a == "--marker")
      g_opt.marker = value();
    else if (a == "--drain-ms")
      g_opt.drain_ms = std::stol(value());
    else if (a == "--slow") {
      std::string v = value();
      g_opt.slow_ms = v == "block" ? -1 : std::stol(v);
    } else if (a == "mount" || a == "takeover")
      g_opt.mode = a;
    else
      return Die("unknown argument " + a);
  }
  if (g_opt.keeper.empty() || g_opt.key.empty() || g_opt.mode.empty()) return Die("usage");

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  fuse_lowlevel_ops ops{};
  ops.lookup = Lookup;
  ops.getattr = Getattr;
  ops.open = Open;
  ops.read = Read;
  const char* fuse_argv[] = {"takeover_testfs", "-o", "fsname=spoke-takeover-test"};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(fuse_argv));
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (se == nullptr) return Die("fuse_session_new failed");

  spoke::FdKeeperClient keeper(g_opt.keeper, 5000ms);
  std::unique_ptr<SessionIo> io;
  if (g_opt.mode == "mount") {
    if (fuse_session_mount(se, g_opt.mountpoint.c_str()) != 0) return Die("mount failed");
    auto attached = SessionIo::AttachToMounted(se);
    if (!attached) return Die(attached.error().ToString());
    io = std::move(*attached);
  } else {
    auto list = keeper.List();
    if (!list) return Die(list.error().ToString());
    for (auto& kept : *list) {
      if (kept.key != g_opt.key) continue;
      auto init = spoke::fuse::InitRecord::FromJson(kept.metadata_json);
      if (!init) return Die(init.error().ToString());
      auto adopted = SessionIo::Adopt(se, std::move(kept.fd), std::move(*init));
      if (!adopted) return Die(adopted.error().ToString());
      io = std::move(*adopted);
    }
    if (!io) return Die("keeper has no key " + g_opt.key);
  }

  std::thread loop([se] {
    fuse_loop_config cfg{};
    cfg.clone_fd = 0;
    cfg.max_idle_threads = 8;
    fuse_session_loop_mt(se, &cfg);
  });
  auto init = io->WaitForInit(10000ms);
  if (!init) return Die(init.error().ToString());
  if (g_opt.mode == "mount") {
    if (auto s = keeper.Put(g_opt.key, init->ToJson(), io->fd()); !s) {
      return Die(s.error().ToString());
    }
  }
  std::printf("ready resend=%s init_match=%d\n",
              spoke::fuse::ResendOutcomeName(io->resend_outcome()),
              io->init_reply_matches() ? 1 : 0);
  std::fflush(stdout);

  std::atomic<bool> terminating{false};
  std::thread on_term([&] {
    int sig = 0;
    sigwait(&set, &sig);
    terminating = true;
    auto s = io->Drain(std::chrono::milliseconds(g_opt.drain_ms));
    std::printf("drained %s\n", s ? "ok" : "timeout");
    std::fflush(stdout);
  });
  loop.join();
  if (terminating) on_term.join();  // the loop ended because of the drain: report it
  // Hand-over or unmount: never unmount here; the connection belongs to the keeper.
  std::fflush(stdout);
  _exit(0);  // the SIGTERM thread may still wait; no destructor must touch the session
}
