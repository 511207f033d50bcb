// spokectl's output: aligned tables, human sizes and rates, and the warm-up progress line.
// Pure functions of their inputs (time passed in), so tests check the exact text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent.pb.h"

namespace spoke::cli {

// 1536 -> "1.5 KiB", 0 -> "0 B".
std::string FormatBytes(uint64_t bytes);
// Bytes per second -> "350.2 MB/s" (SI, like dd and fio).
std::string FormatRate(double bytes_per_second);
// Seconds -> "42s", "3m05s", "2h01m".
std::string FormatDuration(double seconds);

// Columns padded to the widest cell, two spaces apart, header first.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

std::string RenderMounts(const spoke::agent::v1::ListMountsResponse& mounts);
std::string RenderStats(const std::string& target, const spoke::agent::v1::VolumeStatsResponse& s);

// One progress line. `tty`: "[#####-----]  45%  1.2 GiB / 2.7 GiB  350.0 MB/s  ETA 4s"
// (no newline; the caller rewrites it with \r); otherwise a plain log line with newline.
// One warm-up progress message as a JSON object on one line (spokectl warmup --json):
// filesTotal, filesDone, bytesTotal, bytesDone, bytesFromHub, done, error, elapsedSeconds.
std::string RenderProgressJson(const spoke::agent::v1::WarmupProgress& p, double elapsed_seconds);

std::string RenderProgress(const spoke::agent::v1::WarmupProgress& p, double elapsed_seconds,
                           bool tty, int width = 30);

}  // namespace spoke::cli
