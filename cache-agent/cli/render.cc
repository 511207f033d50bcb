#include "cache-agent/cli/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace spoke::cli {
namespace {

std::string Printf(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

std::string Percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", ratio * 100);
  return buf;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return Printf("%.1f %s", v, kUnits[u]);
}

std::string FormatRate(double bps) {
  if (!(bps > 0)) return "0 B/s";
  static const char* kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (bps >= 1000 && u < 4) {
    bps /= 1000;
    ++u;
  }
  return Printf("%.1f %s", bps, kUnits[u]);
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& r : rows) measure(r);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      line += cell;
      if (i + 1 < width.size()) line += std::string(width[i] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header);
  for (const auto& r : rows) emit(r);
  return out;
}

std::string RenderMounts(const spoke::agent::v1::ListMountsResponse& mounts) {
  if (mounts.mounts().empty()) return "no volumes mounted\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : mounts.mounts()) {
    const auto& ctx = m.volume_context();
    auto get = [&](const char* k) {
      auto it = ctx.find(k);
      return it == ctx.end() ? std::string() : it->second;
    };
    // Appended piece by piece: GCC 12's -Wrestrict misfires on `"/" + std::string` here.
    std::string hub = get("server");
    hub.append(":").append(get("share"));
    if (std::string path = get("path"); !path.empty()) hub.append("/").append(path);
    rows.push_back({m.target_path(), hub, get("mode"), get("consistency"),
                    m.read_only() ? "ro" : "rw", m.hub_reachable() ? "reachable" : "UNREACHABLE"});
  }
  return RenderTable({"TARGET", "EXPORT", "MODE", "CONSISTENCY", "ACCESS", "HUB"}, rows);
}

std::string RenderStats(const std::string& target, const spoke::agent::v1::VolumeStatsResponse& s) {
  std::vector<std::vector<std::string>> rows;
  auto add = [&](std::string k, std::string v) { rows.push_back({std::move(k), std::move(v)}); };
  if (!target.empty()) add("target", target);
  add("volume", s.volume_id());
  std::string cache = FormatBytes(s.cache_bytes());
  if (s.cache_capacity_bytes() > 0) {
    cache += " of " + FormatBytes(s.cache_capacity_bytes()) + " (node quota, " +
             Percent(static_cast<double>(s.cache_bytes()) / s.cache_capacity_bytes()) + ")";
  }
  add("cached", cache);
  uint64_t reads = s.cache_hits() + s.cache_misses();
  add("block reads", std::to_string(reads) + " (" + std::to_string(s.cache_hits()) + " hits, " +
                         std::to_string(s.cache_misses()) + " misses)");
  if (reads > 0) add("hit ratio", Percent(static_cast<double>(s.cache_hits()) / reads));
  add("read from cache", FormatBytes(s.cache_read_bytes()));
  add("read from hub", FormatBytes(s.hub_read_bytes()));
  if (s.demand_miss_latency_ms_avg() > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f ms", s.demand_miss_latency_ms_avg());
    add("miss latency (avg)", buf);
  }
  if (s.prefetched_bytes_used() + s.prefetched_bytes_wasted() > 0) {
    add("prefetched used", FormatBytes(s.prefetched_bytes_used()));
    add("prefetched wasted", FormatBytes(s.prefetched_bytes_wasted()));
  }
  if (s.admission_declined_blocks() > 0) {
    add("prefetch declined", std::to_string(s.admission_declined_blocks()) +
                                 " blocks (nowhere to keep them until read)");
  }
  if (s.has_staging()) {
    const auto& st = s.staging();
    add("staged", std::to_string(st.staged()) + " blocks, " + std::to_string(st.hits()) +
                      " read, " + std::to_string(st.dropped()) + " dropped unread, " +
                      std::to_string(st.evicted()) + " evicted; " + std::to_string(st.blocks()) +
                      " held (" + FormatBytes(st.bytes()) + ")");
  }
  if (s.hints_rejected() + s.hints_unresolved() > 0) {
    add("hints dropped", std::to_string(s.hints_rejected()) + " rejected, " +
                             std::to_string(s.hints_unresolved()) + " unresolved");
  }
  if (s.has_memory() && s.memory().budget_bytes() > 0) {
    const auto& m = s.memory();
    add("agent memory", FormatBytes(m.used_bytes()) + " of " + FormatBytes(m.budget_bytes()) +
                            " budget (peak " + FormatBytes(m.peak_bytes()) + ", " +
                            std::to_string(m.refusals()) + " refusals)");
    add("memory by use",
        "prefetch " + FormatBytes(m.prefetch_bytes()) + ", store queue " +
            FormatBytes(m.store_queue_bytes()) + ", demand " + FormatBytes(m.demand_bytes()) +
            ", hints " + FormatBytes(m.hints_bytes()) + ", metadata " +
            FormatBytes(m.metadata_bytes()) + ", staged " + FormatBytes(m.staged_bytes()) +
            ", write-back " + FormatBytes(m.write_back_bytes()));
  }
  add("checksum failures", std::to_string(s.checksum_failures()));
  add("hub", s.hub_reachable() ? "reachable" : "UNREACHABLE: " + s.last_hub_error());
  if (s.hub_total_bytes() > 0) {
    add("hub capacity", FormatBytes(s.hub_used_bytes()) + " used, " +
                            FormatBytes(s.hub_available_bytes()) + " available of " +
                            FormatBytes(s.hub_total_bytes()));
  }
  if (s.hub_total_inodes() > 0) {
    add("hub inodes", std::to_string(s.hub_total_inodes() - s.hub_free_inodes()) + " used of " +
                          std::to_string(s.hub_total_inodes()));
  }
  std::string out = RenderTable({"FIELD", "VALUE"}, rows);
  if (!s.experts().empty()) {
    std::vector<std::vector<std::string>> ex;
    for (const auto& e : s.experts()) {
      ex.push_back({e.name(), Percent(e.precision()), Percent(e.coverage()),
                    std::to_string(e.predicted_blocks()), std::to_string(e.used_blocks()),
                    std::to_string(e.wasted_blocks()), FormatBytes(e.budget_bytes())});
    }
    out += "\n" +
           RenderTable({"EXPERT", "PRECISION", "COVERAGE", "PREDICTED", "USED", "WASTED", "BUDGET"},
                       ex);
  }
  return out;
}

std::string RenderProgress(const spoke::agent::v1::WarmupProgress& p, double elapsed, bool tty,
                           int width) {
  double rate = elapsed > 0 ? static_cast<double>(p.bytes_done()) / elapsed : 0;
  double frac = p.bytes_total() > 0
                    ? std::min(1.0, static_cast<double>(p.bytes_done()) / p.bytes_total())
                    : (p.done() ? 1.0 : 0.0);
  std::string eta = "?";
  if (p.done()) {
    eta = "0s";
  } else if (rate > 0 && p.bytes_total() >= p.bytes_done()) {
    eta = FormatDuration(static_cast<double>(p.bytes_total() - p.bytes_done()) / rate);
  }
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3.0f%%", frac * 100);
  std::string files =
      std::to_string(p.files_done()) + "/" + std::to_string(p.files_total()) + " files";
  std::string figures = FormatBytes(p.bytes_done()) + " / " + FormatBytes(p.bytes_total()) + "  " +
                        FormatRate(rate) + "  " + files + "  hub " +
                        FormatBytes(p.bytes_from_hub());
  if (!tty) {
    return std::string(p.done() ? "done " : "warmup ") + pct + "  " + figures + "  ETA " + eta +
           "\n";
  }
  int filled = static_cast<int>(frac * width);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '-') + "]";
  return bar + " " + pct + "  " + figures + "  ETA " + eta;
}

std::string RenderProgressJson(const spoke::agent::v1::WarmupProgress& p, double elapsed_seconds) {
  nlohmann::json j = {{"filesTotal", p.files_total()},
                      {"filesDone", p.files_done()},
                      {"bytesTotal", p.bytes_total()},
                      {"bytesDone", p.bytes_done()},
                      {"bytesFromHub", p.bytes_from_hub()},
                      {"blocksVerified", p.blocks_verified()},
                      {"blocksRepaired", p.blocks_repaired()},
                      {"filesChanged", p.files_changed()},
                      {"done", p.done()},
                      {"error", p.error()},
                      {"elapsedSeconds", elapsed_seconds}};
  return j.dump() + "\n";
}

}  // namespace spoke::cli
