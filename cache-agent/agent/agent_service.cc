#include "cache-agent/agent/agent_service.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "common/log.h"

namespace spoke::agent {
namespace {

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// A relative path inside the volume ("" = the root; ".", "/", "./sub", "sub/" forgiven).
// `field` names it in errors.
Result<std::string> CheckPrefix(const std::string& prefix, std::string_view field) {
  return NormalizePathInVolume(prefix, field);
}

}  // namespace

grpc::Status ToGrpc(const Error& e) {
  using grpc::StatusCode;
  StatusCode c = StatusCode::INTERNAL;
  switch (e.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      c = StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kNotFound:
      c = StatusCode::NOT_FOUND;
      break;
    case Code::kAlreadyExists:
      c = StatusCode::ALREADY_EXISTS;
      break;
    case Code::kPermissionDenied:
      c = StatusCode::PERMISSION_DENIED;
      break;
    case Code::kReadOnly:
    case Code::kNotEmpty:
      c = StatusCode::FAILED_PRECONDITION;
      break;
    case Code::kNoSpace:
      c = StatusCode::RESOURCE_EXHAUSTED;
      break;
    case Code::kUnavailable:
      c = StatusCode::UNAVAILABLE;
      break;
    case Code::kTimeout:
      c = StatusCode::DEADLINE_EXCEEDED;
      break;
    case Code::kCancelled:
    case Code::kInterrupted:
      c = StatusCode::CANCELLED;
      break;
    case Code::kIo:
    case Code::kChecksum:
    case Code::kInternal:
      c = StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(c, e.message());
}

Result<std::shared_ptr<MountedVolume>> AgentService::Find(const std::string& volume_id) {
  if (volume_id.empty()) return Fail(Code::kInvalidArgument, "volume_id: required");
  auto v = mounts_.FindByVolume(volume_id);
  if (!v) return Fail(Code::kNotFound, "volume " + volume_id + " is not mounted on this node");
  return v;
}

grpc::Status AgentService::Mount(grpc::ServerContext* context, const v1::MountRequest* req,
                                 v1::MountResponse*) {
  if (req->volume_id().empty()) return Invalid("volume_id: required");
  if (req->target_path().empty()) return Invalid("target_path: required");
  if (req->volume_context().empty()) return Invalid("volume_context: required");
  StringMap ctx(req->volume_context().begin(), req->volume_context().end());
  // The client has given up, or is about to: the server's copy of the deadline runs late by
  // the request's delivery time, and the client's cancel may not have arrived yet. A tenth of
  // the call's budget (at most 1 s) is kept as margin; a mount undone early is only retried.
  auto now = std::chrono::system_clock::now();
  auto margin = std::min<std::chrono::system_clock::duration>(std::chrono::seconds(1),
                                                              (context->deadline() - now) / 10);
  auto s =
      mounts_.Mount(req->volume_id(), ctx, req->target_path(), req->read_only(), [context, margin] {
        return context->IsCancelled() ||
               context->deadline() - margin <= std::chrono::system_clock::now();
      });
  return s ? grpc::Status::OK : ToGrpc(s.error());
}

grpc::Status AgentService::Unmount(grpc::ServerContext*, const v1::UnmountRequest* req,
                                   v1::UnmountResponse*) {
  if (req->target_path().empty()) return Invalid("target_path: required");
  auto s = mounts_.Unmount(req->target_path());
  return s ? grpc::Status::OK : ToGrpc(s.error());
}

grpc::Status AgentService::ListMounts(grpc::ServerContext*, const v1::ListMountsRequest*,
                                      v1::ListMountsResponse* resp) {
  for (const MountStatus& m : mounts_.List()) {
    if (!m.mounted) continue;  // a pending restore is not usable yet
    auto* info = resp->add_mounts();
    info->set_volume_id(m.record.volume_id);
    info->set_target_path(m.record.target_path);
    info->set_read_only(m.record.read_only);
    info->mutable_volume_context()->insert(m.record.volume_context.begin(),
                                           m.record.volume_context.end());
    info->set_hub_reachable(m.hub_reachable);
  }
  return grpc::Status::OK;
}

grpc::Status AgentService::VolumeStats(grpc::ServerContext*, const v1::VolumeStatsRequest* req,
                                       v1::VolumeStatsResponse* resp) {
  if (req->volume_id().empty() && req->target_path().empty()) {
    return Invalid("volume_id or target_path: one is required");
  }
  if (!req->volume_id().empty() && !req->target_path().empty()) {
    return Invalid("volume_id and target_path: give only one");
  }
  std::shared_ptr<MountedVolume> v;
  if (!req->volume_id().empty()) {
    v = mounts_.FindByVolume(req->volume_id());
    if (!v) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "volume " + req->volume_id() + " is not mounted on this node");
    }
  } else {
    if (req->target_path().front() != '/') return Invalid("target_path: must be absolute");
    v = mounts_.FindByTarget(req->target_path());
    if (!v) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "nothing is mounted at " + req->target_path());
    }
  }
  VolumeFigures f = v->Figures();
  resp->set_volume_id(v->volume_id());
  resp->set_cache_bytes(f.cache_bytes);
  resp->set_cache_hits(f.cache_hits);
  resp->set_cache_misses(f.cache_misses);
  resp->set_hub_read_bytes(f.hub_read_bytes);
  resp->set_cache_read_bytes(f.cache_read_bytes);
  resp->set_checksum_failures(f.checksum_failures);
  resp->set_hub_reachable(f.hub_reachable);
  resp->set_last_hub_error(f.last_hub_error);
  resp->set_hub_total_bytes(f.hub_total_bytes);
  resp->set_hub_available_bytes(f.hub_available_bytes);
  resp->set_hub_used_bytes(f.hub_used_bytes);
  resp->set_hub_total_inodes(f.hub_total_inodes);
  resp->set_hub_free_inodes(f.hub_free_inodes);
  resp->set_prefetched_bytes_used(f.prefetched_bytes_used);
  resp->set_prefetched_bytes_wasted(f.prefetched_bytes_wasted);
  resp->set_demand_miss_latency_ms_avg(f.demand_miss_latency_ms_avg);
  resp->set_cache_capacity_bytes(options_.cache_capacity_bytes);
  resp->set_hints_rejected(f.hints_rejected);
  resp->set_hints_unresolved(f.hints_unresolved);
  resp->set_admission_declined_blocks(f.admission_declined_blocks);
  if (f.staged_blocks > 0 || f.staged_evicted > 0) {
    auto* st = resp->mutable_staging();
    st->set_blocks(f.staged_blocks_held);
    st->set_bytes(f.staged_bytes_held);
    st->set_staged(f.staged_blocks);
    st->set_hits(f.staged_hits);
    st->set_dropped(f.staged_dropped);
    st->set_evicted(f.staged_evicted);
  }
  if (f.memory.budget_bytes > 0) {
    auto* m = resp->mutable_memory();
    m->set_budget_bytes(f.memory.budget_bytes);
    m->set_used_bytes(f.memory.used_bytes);
    m->set_peak_bytes(f.memory.peak_bytes);
    m->set_prefetch_bytes(f.memory.prefetch_bytes);
    m->set_store_queue_bytes(f.memory.store_queue_bytes);
    m->set_demand_bytes(f.memory.demand_bytes);
    m->set_hints_bytes(f.memory.hints_bytes);
    m->set_metadata_bytes(f.memory.metadata_bytes);
    m->set_staged_bytes(f.memory.staged_bytes);
    m->set_write_back_bytes(f.memory.write_back_bytes);
    m->set_refusals(f.memory.refusals);
  }
  for (const ExpertStats& e : f.experts) {
    auto* x = resp->add_experts();
    x->set_name(e.name);
    x->set_precision(e.precision);
    x->set_coverage(e.coverage);
    x->set_predicted_blocks(e.predicted_blocks);
    x->set_used_blocks(e.used_blocks);
    x->set_wasted_blocks(e.wasted_blocks);
    x->set_budget_bytes(e.budget_bytes);
  }
  return grpc::Status::OK;
}

grpc::Status AgentService::Warmup(grpc::ServerContext* ctx, const v1::WarmupRequest* req,
                                  grpc::ServerWriter<v1::WarmupProgress>* writer) {
  auto prefix = CheckPrefix(req->path_prefix(), "path_prefix");
  if (req->volume_id().empty()) return Invalid("volume_id: required");
  if (!prefix) return ToGrpc(prefix.error());
  auto v = Find(req->volume_id());
  if (!v) return ToGrpc(v.error());

  std::atomic<bool> cancelled{false};
  std::atomic<bool> finished{false};
  // The volume only looks at `cancelled`: turn the client going away into it.
  std::thread watcher([&] {
    while (!finished.load()) {
      if (ctx->IsCancelled()) {
        cancelled = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::mutex write_mu;
  auto last_write = std::chrono::steady_clock::time_point{};
  WarmupFigures last;
  auto to_proto = [](const WarmupFigures& f) {
    v1::WarmupProgress p;
    p.set_files_total(f.files_total);
    p.set_files_done(f.files_done);
    p.set_bytes_total(f.bytes_total);
    p.set_bytes_done(f.bytes_done);
    p.set_bytes_from_hub(f.bytes_from_hub);
    p.set_blocks_verified(f.blocks_verified);
    p.set_blocks_repaired(f.blocks_repaired);
    p.set_files_changed(f.files_changed);
    return p;
  };
  auto progress = [&](const WarmupFigures& f) {
    std::lock_guard<std::mutex> lock(write_mu);
    last = f;
    auto now = std::chrono::steady_clock::now();
    if (now - last_write < options_.progress_interval) return;
    last_write = now;
    if (!writer->Write(to_proto(f))) cancelled = true;  // the stream is gone
  };
  WarmupOptions options;
  options.rate_bytes_per_second = req->rate_bytes_per_second();
  options.verify = req->verify();
  log::Info("warmup started", {{"volume", req->volume_id()},
                               {"prefix", *prefix},
                               {"rate_bytes_per_second", options.rate_bytes_per_second},
                               {"verify", options.verify}});
  Status s = (*v)->Warmup(*prefix, options, progress, cancelled);
  finished = true;
  watcher.join();
  if (cancelled || ctx->IsCancelled()) {
    log::Info("warmup cancelled by the client", {{"volume", req->volume_id()}});
    return grpc::Status(grpc::StatusCode::CANCELLED, "warm-up cancelled");
  }
  v1::WarmupProgress done;
  {
    std::lock_guard<std::mutex> lock(write_mu);
    done = to_proto(last);
  }
  done.set_done(true);
  if (!s) {
    if (s.error().code() == Code::kInvalidArgument || s.error().code() == Code::kNotFound) {
      return ToGrpc(s.error());  // e.g. the prefix does not exist
    }
    done.set_error(s.error().message());
  }
  writer->Write(done);
  log::Info("warmup finished", {{"volume", req->volume_id()},
                                {"bytes", done.bytes_done()},
                                {"from_hub", done.bytes_from_hub()},
                                {"verified", done.blocks_verified()},
                                {"repaired", done.blocks_repaired()},
                                {"error", done.error()}});
  return grpc::Status::OK;
}

grpc::Status AgentService::Evict(grpc::ServerContext*, const v1::EvictRequest* req,
                                 v1::EvictResponse* resp) {
  if (req->volume_id().empty()) return Invalid("volume_id: required");
  auto prefix = CheckPrefix(req->path_prefix(), "path_prefix");
  if (!prefix) return ToGrpc(prefix.error());
  auto v = Find(req->volume_id());
  if (!v) return ToGrpc(v.error());
  auto n = (*v)->Evict(*prefix);
  if (!n) return ToGrpc(n.error());
  resp->set_evicted_blocks(*n);
  resp->set_evicted_bytes(*n * options_.block_size);
  return grpc::Status::OK;
}

grpc::Status AgentService::Hint(grpc::ServerContext*, const v1::HintRequest* req,
                                v1::HintResponse* resp) {
  if (req->volume_id().empty()) return Invalid("volume_id: required");
  if (req->paths_size() > 10'000'000) return Invalid("paths: more than 10,000,000 paths");
  auto v = Find(req->volume_id());
  if (!v) return ToGrpc(v.error());
  // Paths escaping the volume are rejected here; the volume rejects unknown ones.
  std::vector<std::string> good;
  good.reserve(req->paths_size());
  uint32_t rejected = 0;
  for (const std::string& p : req->paths()) {
    auto n = NormalizePathInVolume(p, "paths");  // "./a/b" (find's output) is forgiven
    if (!n || n->empty()) {
      ++rejected;
    } else {
      good.push_back(std::move(*n));
    }
  }
  HintFigures f = (*v)->Hint(good);
  resp->set_accepted(f.accepted);
  resp->set_rejected(f.rejected + rejected);
  return grpc::Status::OK;
}

}  // namespace spoke::agent
