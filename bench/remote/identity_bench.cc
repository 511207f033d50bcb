// Cost of per-caller hub credentials: small-file create + 4 KiB write (stable, so "close"
// has nothing left to do) through LibnfsRemote over the 60 ms WAN proxy, one file after the
// other, as the agent's own identity and as callers' identities, in one run.
//
//   spoke-remote-identity-bench [files_per_mode=30] [one_way_delay_ms=30]
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cache-agent/remote/libnfs_remote.h"
#include "tests/support/hub.h"

using spoke::agent::CreateMode;
using spoke::agent::Credentials;
using spoke::agent::LibnfsRemote;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int files = argc > 1 ? std::atoi(argv[1]) : 30;
  int delay_ms = argc > 2 ? std::atoi(argv[2]) : 30;
  if (files < 1 || delay_ms < 0) {
    std::fprintf(stderr, "usage: %s [files_per_mode>=1] [one_way_delay_ms>=0]\n", argv[0]);
    return 2;
  }
  auto hub = spoke::testing::TestHub::Start();
  if (!hub) return 1;
  auto proxy = spoke::testing::WanProxy::Start(*hub, delay_ms);
  if (!proxy) return 1;
  std::filesystem::create_directories(hub->export_dir() + "/scratch");
  std::filesystem::permissions(hub->export_dir() + "/scratch", std::filesystem::perms::all);

  LibnfsRemote::Config config;
  config.connections = 1;
  config.request_timeout_seconds = 30;
  auto remote = LibnfsRemote::Connect(proxy->address(), "scratch", config, nullptr);
  if (!remote) {
    std::fprintf(stderr, "connect: %s\n", remote.error().ToString().c_str());
    return 1;
  }
  std::string payload(4096, 'x');
  auto run = [&](const char* mode, auto create_and_write) {
    auto start = Clock::now();
    for (int i = 0; i < files; ++i) {
      auto st = create_and_write(std::string(mode) + "-" + std::to_string(i));
      if (!st) {
        std::fprintf(stderr, "%s file %d: %s\n", mode, i, st.error().ToString().c_str());
        std::exit(1);
      }
    }
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%-34s %4d files  %7.2f s  %6.2f files/s  %6.1f ms/file\n", mode, files, s,
                files / s, 1000 * s / files);
  };
  auto agent = [&](const std::string& name) -> spoke::Status {
    SPOKE_RETURN_IF_ERROR((*remote)->Create(name, 0644));
    SPOKE_RETURN_IF_ERROR((*remote)->Write(name, 0, payload.data(), payload.size()));
    return spoke::Ok();
  };
  auto as = [&](const Credentials& who, const std::string& name) -> spoke::Status {
    SPOKE_RETURN_IF_ERROR((*remote)->CreateAs(who, name, 0644, CreateMode::kExclusive));
    SPOKE_RETURN_IF_ERROR((*remote)->WriteAs(who, name, 0, payload.data(), payload.size()));
    return spoke::Ok();
  };
  std::printf("small-file create+write(4 KiB) over %d ms RTT, sequential\n", 2 * delay_ms);
  run("agent identity (no credentials)", agent);
  // The first call of an identity opens its context (TCP + MOUNT): measured on its own.
  auto first = Clock::now();
  if (!as(Credentials{1000, 1000, {1000, 2000}}, "first-of-1000")) return 1;
  std::printf("%-34s %6.1f ms (new context + mount + create + write)\n",
              "first call of a new identity",
              1000 * std::chrono::duration<double>(Clock::now() - first).count());
  run("caller identity (uid 1000)", [&](const std::string& n) {
    return as(Credentials{1000, 1000, {1000, 2000}}, n);
  });
  int i = 0;
  run("8 caller identities, rotating", [&](const std::string& n) {
    uint32_t uid = 2000 + static_cast<uint32_t>(i++ % 8);
    return as(Credentials{uid, uid, {}}, n);
  });
  run("agent identity again", agent);
  std::printf("identity contexts open: %zu\n", (*remote)->IdentityConnections());
  return 0;
}
