// Fakes of the agent's seams: VolumeMounter/MountedVolume (no FUSE) and HostMounts (no
// mount table), shared by the agent and spokectl tests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache-agent/agent/host_mounts.h"
#include "cache-agent/agent/mounted_volume.h"

namespace spoke::agent::testing {

// Shared by the test's thread and the agent's (gRPC) threads: both sides take mu, also where
// a gRPC call already orders them (ThreadSanitizer cannot see gRPC's ordering).
struct FakeWorld {
  std::mutex mu;
  int mount_calls = 0;
  int unmount_calls = 0;
  std::map<std::string, std::string> live;  // target -> volume id
  // When set, Mount fails with this code until cleared.
  std::optional<Code> fail_mount;
  // While set, Mount waits (a hub that does not answer) until it is cleared.
  bool hold_mount = false;
  std::condition_variable mount_cv;
  // Unmount takes this long (a FUSE loop that ends slowly); the most at once is recorded.
  std::chrono::milliseconds unmount_delay{0};
  int unmounts_running = 0;
  int most_unmounts_at_once = 0;
  VolumeFigures figures;
  // Warmup: steps, bytes per step, delay per step.
  int warmup_steps = 5;
  uint64_t warmup_step_bytes = 1 << 20;
  std::chrono::milliseconds warmup_step_delay{1};
  std::atomic<bool> warmup_was_cancelled{false};
  std::optional<Error> warmup_error;
  std::string last_warmup_prefix;
  WarmupOptions last_warmup_options;
  std::string last_evict_prefix;
  std::vector<std::string> hinted;
  std::set<std::string> known_paths = {"a.jpg", "dir/b.jpg"};
};

class FakeHostMounts : public HostMounts {
 public:
  std::vector<MountEntry> List() override {
    std::lock_guard<std::mutex> l(mu);
    return table;
  }
  bool IsDisconnected(const std::string& path) override {
    std::lock_guard<std::mutex> l(mu);
    return disconnected.contains(path);
  }
  Status DetachUnmount(const std::string& path) override {
    std::lock_guard<std::mutex> l(mu);
    detached.push_back(path);
    bool was_disconnected = disconnected.erase(path) > 0;
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (it->mount_point == path) {
        table.erase(std::next(it).base());
        return Ok();
      }
    }
    if (was_disconnected) return Ok();
    return Fail(Code::kNotFound, "nothing mounted");
  }

  // The kernel's side of a FUSE session's end: the mount leaves the table (not a detach).
  void Remove(const std::string& path) {
    std::lock_guard<std::mutex> l(mu);
    std::erase_if(table, [&](const MountEntry& e) { return e.mount_point == path; });
  }

  std::mutex mu;
  std::vector<MountEntry> table;
  std::set<std::string> disconnected;
  std::vector<std::string> detached;
};

class FakeVolume : public MountedVolume {
 public:
  FakeVolume(std::shared_ptr<FakeWorld> w, std::string id, VolumeContext ctx, std::string target,
             bool ro, FakeHostMounts* host = nullptr)
      : w_(std::move(w)),
        id_(std::move(id)),
        ctx_(std::move(ctx)),
        target_(std::move(target)),
        ro_(ro),
        host_(host) {}
  const std::string& volume_id() const override { return id_; }
  const std::string& target_path() const override { return target_; }
  const VolumeContext& context() const override { return ctx_; }
  bool read_only() const override { return ro_; }
  VolumeFigures Figures() override {
    std::lock_guard<std::mutex> l(w_->mu);
    return w_->figures;
  }
  Status Warmup(const std::string& prefix, const WarmupOptions& options,
                const std::function<void(const WarmupFigures&)>& progress,
                const std::atomic<bool>& cancelled) override {
    int steps;
    uint64_t step_bytes;
    std::chrono::milliseconds step_delay;
    {
      // The test sets these before its call, on its own thread.
      std::lock_guard<std::mutex> l(w_->mu);
      w_->last_warmup_prefix = prefix;
      w_->last_warmup_options = options;
      steps = w_->warmup_steps;
      step_bytes = w_->warmup_step_bytes;
      step_delay = w_->warmup_step_delay;
    }
    WarmupFigures f;
    f.files_total = steps;
    f.bytes_total = steps * step_bytes;
    for (int i = 0; i < steps; ++i) {
      if (cancelled) {
        w_->warmup_was_cancelled = true;
        return Fail(Code::kCancelled, "cancelled");
      }
      std::this_thread::sleep_for(step_delay);
      f.files_done++;
      f.bytes_done += step_bytes;
      f.bytes_from_hub += step_bytes / 2;
      progress(f);
    }
    std::lock_guard<std::mutex> l(w_->mu);
    if (w_->warmup_error) return std::unexpected(*w_->warmup_error);
    return Ok();
  }
  Result<uint64_t> Evict(const std::string& prefix) override {
    std::lock_guard<std::mutex> l(w_->mu);
    w_->last_evict_prefix = prefix;
    return 7;
  }
  HintFigures Hint(const std::vector<std::string>& paths) override {
    std::lock_guard<std::mutex> l(w_->mu);
    HintFigures h;
    for (const auto& p : paths) {
      w_->hinted.push_back(p);
      (w_->known_paths.contains(p) ? h.accepted : h.rejected)++;
    }
    return h;
  }
  Status Unmount() override {
    std::chrono::milliseconds delay;
    {
      std::lock_guard<std::mutex> l(w_->mu);
      if (unmounted_) return Ok();
      unmounted_ = true;
      w_->unmount_calls++;
      w_->live.erase(target_);
      delay = w_->unmount_delay;
      w_->most_unmounts_at_once = std::max(w_->most_unmounts_at_once, ++w_->unmounts_running);
    }
    if (host_) host_->Remove(target_);
    std::this_thread::sleep_for(delay);
    std::lock_guard<std::mutex> l(w_->mu);
    --w_->unmounts_running;
    return Ok();
  }

 private:
  std::shared_ptr<FakeWorld> w_;
  std::string id_;
  VolumeContext ctx_;
  std::string target_;
  bool ro_;
  FakeHostMounts* host_;
  bool unmounted_ = false;
};

// Mounts show in `host`'s table, as FUSE mounts do in the kernel's, and leave it on Unmount.
class FakeMounter : public VolumeMounter {
 public:
  FakeMounter(std::shared_ptr<FakeWorld> w, FakeHostMounts& host) : w_(std::move(w)), host_(host) {}
  Result<std::unique_ptr<MountedVolume>> Mount(const std::string& id, const VolumeContext& ctx,
                                               const std::string& target, bool ro) override {
    {
      std::unique_lock<std::mutex> l(w_->mu);
      w_->mount_calls++;
      w_->mount_cv.wait(l, [&] { return !w_->hold_mount; });
      if (w_->fail_mount) return Fail(*w_->fail_mount, "fake mount failure");
      w_->live[target] = id;
    }
    {
      std::lock_guard<std::mutex> l(host_.mu);
      host_.table.push_back(MountEntry{target, "fuse.spoke", "spoke"});
    }
    return std::unique_ptr<MountedVolume>(
        std::make_unique<FakeVolume>(w_, id, ctx, target, ro, &host_));
  }

 private:
  std::shared_ptr<FakeWorld> w_;
  FakeHostMounts& host_;
};

// A valid dataset volume context and its id.
inline StringMap DatasetContext(const std::string& share = "/srv/data") {
  return {{"server", "127.0.0.1"}, {"share", share},    {"nfsPort", "20491"},
          {"mountPort", "20492"},  {"mode", "dataset"}, {"path", ""}};
}
inline std::string DatasetId(const std::string& share = "/srv/data") {
  return "spoke1|dataset|retain|127.0.0.1|20491|20492|" + share + "|";
}

}  // namespace spoke::agent::testing
