#include "cache-agent/cli/commands.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "agent.grpc.pb.h"
#include "cache-agent/cli/render.h"
#include "common/version.h"

namespace spoke::cli {
namespace {

namespace v1 = spoke::agent::v1;
using Clock = std::chrono::steady_clock;

constexpr auto kShortDeadline = std::chrono::seconds(15);
// A mount waits for the hub (bounded by the volume's hub timeout) and the FUSE session.
constexpr auto kMountDeadline = std::chrono::seconds(120);

class Client {
 public:
  Client(const Command& cmd, std::ostream& err) : socket_(cmd.socket), err_(err) {
    channel_ = grpc::CreateChannel("unix://" + socket_, grpc::InsecureChannelCredentials());
    stub_ = v1::Agent::NewStub(channel_);
  }

  v1::Agent::Stub& stub() { return *stub_; }

  std::unique_ptr<grpc::ClientContext> Context(std::chrono::seconds deadline) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (deadline.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + deadline);
    return ctx;
  }

  // Prints the failure in words and returns 1.
  int Report(const grpc::Status& s, std::string_view what) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !Reachable()) return 1;
    err_ << "spokectl: " << what << ": " << s.error_message();
    switch (s.error_code()) {
      case grpc::StatusCode::NOT_FOUND:
        err_ << " (not found)";
        break;
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        err_ << " (the agent did not answer in time)";
        break;
      case grpc::StatusCode::UNAVAILABLE:
        err_ << " (unavailable; the hub may be unreachable)";
        break;
      default:
        break;
    }
    err_ << "\n";
    return 1;
  }

  // Explains why the socket cannot be used, if that is the problem.
  bool Reachable() {
    struct stat st;
    std::string prefix = "spokectl: cannot reach the agent at " + socket_ + ": ";
    if (::stat(socket_.c_str(), &st) != 0) {
      err_ << prefix << std::strerror(errno) << "; is spoke-cache-agent running?\n";
      return false;
    }
    if (!S_ISSOCK(st.st_mode)) {
      err_ << prefix << "not a socket\n";
      return false;
    }
    if (::access(socket_.c_str(), R_OK | W_OK) != 0) {
      err_ << prefix << std::strerror(errno) << " (the socket is root-only; run as root)\n";
      return false;
    }
    if (channel_->GetState(true) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      err_ << prefix << "connection refused; is spoke-cache-agent running?\n";
      return false;
    }
    return true;
  }

  // The volume mounted at `dir` (spokectl takes directories; the API takes volume ids).
  std::optional<std::string> VolumeAt(const std::string& dir, std::string* target) {
    auto ctx = Context(kShortDeadline);
    v1::ListMountsResponse resp;
    grpc::Status s = stub_->ListMounts(ctx.get(), v1::ListMountsRequest(), &resp);
    if (!s.ok()) {
      Report(s, "list mounts");
      return std::nullopt;
    }
    std::string want = AbsoluteDir(dir);
    // Also try the directory with symlinks resolved (not the mount itself: it may be dead).
    std::error_code ec;
    std::filesystem::path p(want);
    std::string resolved =
        (std::filesystem::canonical(p.parent_path(), ec) / p.filename()).lexically_normal();
    for (const auto& m : resp.mounts()) {
      if (m.target_path() == want || (!ec && m.target_path() == resolved)) {
        *target = m.target_path();
        return m.volume_id();
      }
    }
    err_ << "spokectl: no Spoke volume is mounted at " << want
         << " (spokectl status lists the mounts)\n";
    return std::nullopt;
  }

 private:
  std::string socket_;
  std::ostream& err_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

int Mount(const Command& cmd, Client& c, std::ostream& out, std::ostream& err) {
  auto plan = PlanMount(cmd);
  if (!plan) {
    err << "spokectl: " << plan.error().message() << "\n";
    return 2;
  }
  v1::MountRequest req;
  req.set_volume_id(plan->volume_id);
  req.mutable_volume_context()->insert(plan->volume_context.begin(), plan->volume_context.end());
  req.set_target_path(AbsoluteDir(cmd.dir));
  req.set_read_only(plan->read_only);
  v1::MountResponse resp;
  auto ctx = c.Context(kMountDeadline);
  grpc::Status s = c.stub().Mount(ctx.get(), req, &resp);
  if (!s.ok()) return c.Report(s, "mount " + cmd.nfs_url + " at " + req.target_path());
  out << "mounted " << cmd.nfs_url << " at " << req.target_path()
      << (plan->read_only ? " (read-only)" : "") << "\n";
  return 0;
}

int Unmount(const Command& cmd, Client& c, std::ostream& out) {
  v1::UnmountRequest req;
  req.set_target_path(AbsoluteDir(cmd.dir));
  v1::UnmountResponse resp;
  auto ctx = c.Context(kMountDeadline);
  grpc::Status s = c.stub().Unmount(ctx.get(), req, &resp);
  if (!s.ok()) return c.Report(s, "unmount " + req.target_path());
  out << "unmounted " << req.target_path() << "\n";
  return 0;
}

int Status(Client& c, std::ostream& out) {
  v1::ListMountsResponse resp;
  auto ctx = c.Context(kShortDeadline);
  grpc::Status s = c.stub().ListMounts(ctx.get(), v1::ListMountsRequest(), &resp);
  if (!s.ok()) return c.Report(s, "status");
  out << RenderMounts(resp);
  size_t unreachable = 0;
  for (const auto& m : resp.mounts()) unreachable += !m.hub_reachable();
  if (!resp.mounts().empty()) {
    out << "\nhub: "
        << (unreachable == 0 ? "reachable from every mount"
                             : std::to_string(unreachable) + " mount(s) cannot reach their hub")
        << "\n";
  }
  return unreachable == 0 ? 0 : 1;
}

int Stats(const Command& cmd, Client& c, std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> targets;  // (target, volume id)
  if (!cmd.volume_id.empty()) {
    targets.emplace_back("", cmd.volume_id);
  } else if (!cmd.dir.empty()) {
    std::string target;
    auto id = c.VolumeAt(cmd.dir, &target);
    if (!id) return 1;
    targets.emplace_back(target, *id);
  } else {
    v1::ListMountsResponse resp;
    auto ctx = c.Context(kShortDeadline);
    grpc::Status s = c.stub().ListMounts(ctx.get(), v1::ListMountsRequest(), &resp);
    if (!s.ok()) return c.Report(s, "stats");
    for (const auto& m : resp.mounts()) targets.emplace_back(m.target_path(), m.volume_id());
    if (targets.empty()) out << "no volumes mounted\n";
  }
  int rc = 0;
  bool first = true;
  for (const auto& [target, id] : targets) {
    v1::VolumeStatsRequest req;
    if (target.empty()) {
      req.set_volume_id(id);
    } else {
      req.set_target_path(target);
    }
    v1::VolumeStatsResponse resp;
    auto ctx = c.Context(kShortDeadline);
    grpc::Status s = c.stub().VolumeStats(ctx.get(), req, &resp);
    if (!s.ok()) {
      rc = c.Report(s, "stats " + (target.empty() ? id : target));
      continue;
    }
    if (!first) out << "\n";
    first = false;
    out << RenderStats(target, resp);
  }
  return rc;
}

int Warmup(const Command& cmd, Client& c, std::ostream& out, std::ostream& err, bool tty) {
  std::string target = "volume " + cmd.volume_id;
  auto id = cmd.volume_id.empty() ? c.VolumeAt(cmd.dir, &target) : cmd.volume_id;
  if (!id) return 1;
  tty = tty && !cmd.json;
  v1::WarmupRequest req;
  req.set_volume_id(*id);
  req.set_path_prefix(cmd.prefix);
  req.set_rate_bytes_per_second(cmd.rate_bytes_per_second);
  req.set_verify(cmd.verify);
  auto ctx = c.Context(std::chrono::seconds(0));  // as long as it takes; Ctrl-C cancels
  auto reader = c.stub().Warmup(ctx.get(), req);
  v1::WarmupProgress p;
  v1::WarmupProgress last;
  auto start = Clock::now();
  auto last_line = Clock::time_point{};
  bool got_done = false;
  while (reader->Read(&p)) {
    last = p;
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (tty) {
      out << "\r" << RenderProgress(p, elapsed, true) << "\x1b[K" << std::flush;
    } else if (p.done() || Clock::now() - last_line >= std::chrono::seconds(1)) {
      last_line = Clock::now();
      // JSON: a reader (the warm-up controller) keeps only the last line.
      out << (cmd.json ? RenderProgressJson(p, elapsed) : RenderProgress(p, elapsed, false))
          << std::flush;
    }
    got_done = got_done || p.done();
  }
  if (tty) out << "\n";
  grpc::Status s = reader->Finish();
  if (!s.ok()) return c.Report(s, "warmup " + target);
  if (!last.error().empty()) {
    err << "spokectl: warmup " << target << " incomplete: " << last.error() << "\n";
    return 1;
  }
  if (!got_done) {
    err << "spokectl: warmup " << target << ": the agent ended the stream early\n";
    return 1;
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (cmd.json) return 0;  // the last JSON line (done) is the summary
  out << "warmed " << FormatBytes(last.bytes_done()) << " in " << last.files_done() << " files in "
      << FormatDuration(elapsed) << " (" << FormatBytes(last.bytes_from_hub())
      << " from the hub)\n";
  if (cmd.verify) {
    out << "verified " << last.blocks_verified() << " cached blocks, fetched "
        << last.blocks_repaired() << " again, " << last.files_changed()
        << " files changed on the hub\n";
  }
  return 0;
}

int Evict(const Command& cmd, Client& c, std::ostream& out) {
  std::string target;
  auto id = c.VolumeAt(cmd.dir, &target);
  if (!id) return 1;
  v1::EvictRequest req;
  req.set_volume_id(*id);
  req.set_path_prefix(cmd.prefix);
  v1::EvictResponse resp;
  auto ctx = c.Context(std::chrono::seconds(120));
  grpc::Status s = c.stub().Evict(ctx.get(), req, &resp);
  if (!s.ok()) return c.Report(s, "evict " + target);
  out << "evicted " << resp.evicted_blocks() << " blocks (" << FormatBytes(resp.evicted_bytes())
      << ") from " << target << (cmd.prefix.empty() ? "" : "/" + cmd.prefix) << "\n";
  return 0;
}

int Hint(const Command& cmd, Client& c, std::ostream& out, std::ostream& err) {
  std::string target;
  auto id = c.VolumeAt(cmd.dir, &target);
  if (!id) return 1;
  std::ifstream file;
  std::istream* in = &std::cin;
  if (cmd.hint_file != "-") {
    file.open(cmd.hint_file);
    if (!file) {
      err << "spokectl: cannot read " << cmd.hint_file << ": " << std::strerror(errno) << "\n";
      return 1;
    }
    in = &file;
  }
  // Batches keep each message far below gRPC's 4 MiB limit.
  constexpr int kBatch = 10000;
  uint64_t accepted = 0, rejected = 0;
  v1::HintRequest req;
  req.set_volume_id(*id);
  auto flush = [&]() -> bool {
    if (req.paths_size() == 0) return true;
    v1::HintResponse resp;
    auto ctx = c.Context(std::chrono::seconds(60));
    grpc::Status s = c.stub().Hint(ctx.get(), req, &resp);
    if (!s.ok()) {
      c.Report(s, "hint " + target);
      return false;
    }
    accepted += resp.accepted();
    rejected += resp.rejected();
    req.clear_paths();
    return true;
  };
  std::string line;
  while (std::getline(*in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    // Paths may be given relative to the volume or as absolute paths under the mount.
    if (line.starts_with(target + "/")) line = line.substr(target.size() + 1);
    req.add_paths(line);
    if (req.paths_size() >= kBatch && !flush()) return 1;
  }
  if (!flush()) return 1;
  out << "hinted " << accepted << " paths" << (rejected ? ", rejected " : "")
      << (rejected ? std::to_string(rejected) : "") << "\n";
  return 0;
}

}  // namespace

int RunCommand(const Command& cmd, std::ostream& out, std::ostream& err, bool tty) {
  if (cmd.verb == Verb::kHelp) {
    out << Usage();
    return 0;
  }
  if (cmd.verb == Verb::kVersion) {
    out << "spokectl " << Version() << "\n";
    return 0;
  }
  Client c(cmd, err);
  switch (cmd.verb) {
    case Verb::kMount:
      return Mount(cmd, c, out, err);
    case Verb::kUnmount:
      return Unmount(cmd, c, out);
    case Verb::kStatus:
      return Status(c, out);
    case Verb::kStats:
      return Stats(cmd, c, out);
    case Verb::kWarmup:
      return Warmup(cmd, c, out, err, tty);
    case Verb::kEvict:
      return Evict(cmd, c, out);
    case Verb::kHint:
      return Hint(cmd, c, out, err);
    default:
      return 2;
  }
}

}  // namespace spoke::cli
