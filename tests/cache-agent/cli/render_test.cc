#include "cache-agent/cli/render.h"

#include <gtest/gtest.h>

namespace spoke::cli {
namespace {

namespace v1 = spoke::agent::v1;

TEST(RenderTest, Units) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(10ull << 30), "10.0 GiB");
  EXPECT_EQ(FormatRate(0), "0 B/s");
  EXPECT_EQ(FormatRate(350.2e6), "350.2 MB/s");
  EXPECT_EQ(FormatDuration(42), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7260), "2h01m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(RenderTest, ProgressJsonCarriesEveryFigure) {
  v1::WarmupProgress p;
  p.set_files_total(4);
  p.set_files_done(3);
  p.set_bytes_total(1000);
  p.set_bytes_done(750);
  p.set_bytes_from_hub(700);
  p.set_blocks_verified(9);
  p.set_blocks_repaired(2);
  p.set_files_changed(1);
  std::string line = RenderProgressJson(p, 1.5);
  EXPECT_EQ(line,
            "{\"blocksRepaired\":2,\"blocksVerified\":9,\"bytesDone\":750,\"bytesFromHub\":700,"
            "\"bytesTotal\":1000,\"done\":false,\"elapsedSeconds\":1.5,\"error\":\"\","
            "\"filesChanged\":1,\"filesDone\":3,\"filesTotal\":4}\n");
  p.set_done(true);
  p.set_error("a \"quoted\" path");
  EXPECT_NE(RenderProgressJson(p, 2).find("\"done\":true"), std::string::npos);
  EXPECT_NE(RenderProgressJson(p, 2).find("a \\\"quoted\\\" path"), std::string::npos);
}

TEST(RenderTest, TableAlignsColumns) {
  EXPECT_EQ(RenderTable({"A", "LONGER"}, {{"xxx", "1"}, {"y", "22"}}),
            "A    LONGER\n"
            "xxx  1\n"
            "y    22\n");
}

TEST(RenderTest, Mounts) {
  v1::ListMountsResponse r;
  EXPECT_EQ(RenderMounts(r), "no volumes mounted\n");
  auto* m = r.add_mounts();
  m->set_target_path("/mnt/d");
  m->set_read_only(true);
  m->set_hub_reachable(false);
  (*m->mutable_volume_context())["server"] = "10.0.0.5";
  (*m->mutable_volume_context())["share"] = "/srv/data";
  (*m->mutable_volume_context())["path"] = "imagenet";
  (*m->mutable_volume_context())["mode"] = "dataset";
  (*m->mutable_volume_context())["consistency"] = "immutable";
  EXPECT_EQ(RenderMounts(r),
            "TARGET  EXPORT                       MODE     CONSISTENCY  ACCESS  HUB\n"
            "/mnt/d  10.0.0.5:/srv/data/imagenet  dataset  immutable    ro      UNREACHABLE\n");
}

TEST(RenderTest, StatsWithExperts) {
  v1::VolumeStatsResponse s;
  s.set_volume_id("v1");
  s.set_cache_bytes(1ull << 30);
  s.set_cache_capacity_bytes(4ull << 30);
  s.set_cache_hits(90);
  s.set_cache_misses(10);
  s.set_hub_read_bytes(10 << 20);
  s.set_hub_reachable(true);
  auto* e = s.add_experts();
  e->set_name("sequential");
  e->set_precision(0.95);
  e->set_coverage(0.4);
  e->set_predicted_blocks(100);
  e->set_used_blocks(95);
  e->set_wasted_blocks(5);
  e->set_budget_bytes(64 << 20);
  std::string out = RenderStats("/mnt/d", s);
  EXPECT_NE(out.find("cached             1.0 GiB of 4.0 GiB (node quota, 25.0%)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("hit ratio          90.0%"), std::string::npos) << out;
  EXPECT_NE(out.find("read from hub      10.0 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("EXPERT      PRECISION  COVERAGE  PREDICTED  USED  WASTED  BUDGET"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("sequential  95.0%      40.0%     100        95    5       64.0 MiB"),
            std::string::npos)
      << out;
  s.set_hub_reachable(false);
  s.set_last_hub_error("Command timed out");
  EXPECT_NE(RenderStats("", s).find("UNREACHABLE: Command timed out"), std::string::npos);
}

TEST(RenderTest, StatsWithTheAgentsMemoryBudget) {
  v1::VolumeStatsResponse s;
  s.set_volume_id("v1");
  s.set_hub_reachable(true);
  EXPECT_EQ(RenderStats("", s).find("agent memory"), std::string::npos) << "no budget, no line";
  s.set_hints_rejected(12);
  s.set_hints_unresolved(3);
  auto* m = s.mutable_memory();
  m->set_budget_bytes(64 << 20);
  m->set_used_bytes(40 << 20);
  m->set_peak_bytes(48 << 20);
  m->set_prefetch_bytes(30 << 20);
  m->set_store_queue_bytes(4 << 20);
  m->set_hints_bytes(6 << 20);
  m->set_refusals(7);
  std::string out = RenderStats("", s);
  EXPECT_NE(out.find("hints dropped      12 rejected, 3 unresolved"), std::string::npos) << out;
  EXPECT_NE(out.find("agent memory       40.0 MiB of 64.0 MiB budget (peak 48.0 MiB, 7 refusals)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("prefetch 30.0 MiB, store queue 4.0 MiB, demand 0 B, hints 6.0 MiB"),
            std::string::npos)
      << out;
}

TEST(RenderTest, StatsWithStagedPrefetchesAndDeclinedOnes) {
  v1::VolumeStatsResponse s;
  s.set_volume_id("v1");
  s.set_hub_reachable(true);
  std::string out = RenderStats("", s);
  EXPECT_EQ(out.find("staged"), std::string::npos) << "no staging, no line";
  EXPECT_EQ(out.find("prefetch declined"), std::string::npos) << out;
  s.set_admission_declined_blocks(42);
  auto* st = s.mutable_staging();
  st->set_staged(900);
  st->set_hits(850);
  st->set_dropped(10);
  st->set_evicted(2);
  st->set_blocks(38);
  st->set_bytes(38 << 20);
  s.mutable_memory()->set_budget_bytes(64 << 20);
  s.mutable_memory()->set_staged_bytes(38 << 20);
  out = RenderStats("", s);
  EXPECT_NE(out.find("prefetch declined  42 blocks"), std::string::npos) << out;
  EXPECT_NE(out.find("staged             900 blocks, 850 read, 10 dropped unread, 2 evicted; 38 "
                     "held (38.0 MiB)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("staged 38.0 MiB"), std::string::npos) << out;
}

TEST(RenderTest, ProgressBarAndPlainLine) {
  v1::WarmupProgress p;
  p.set_bytes_total(1000000000);
  p.set_bytes_done(250000000);
  p.set_files_total(100);
  p.set_files_done(25);
  p.set_bytes_from_hub(250000000);
  std::string tty = RenderProgress(p, 2.0, true, 20);
  EXPECT_EQ(tty.rfind("[#####---------------]  25%  238.4 MiB / 953.7 MiB  125.0 MB/s", 0), 0u)
      << tty;
  EXPECT_NE(tty.find("ETA 6s"), std::string::npos) << tty;
  EXPECT_EQ(tty.find('\n'), std::string::npos);
  std::string plain = RenderProgress(p, 2.0, false);
  EXPECT_EQ(plain.rfind("warmup  25%", 0), 0u) << plain;
  EXPECT_EQ(plain.back(), '\n');
  p.set_done(true);
  p.set_bytes_done(1000000000);
  EXPECT_EQ(RenderProgress(p, 8.0, false).rfind("done 100%", 0), 0u);
}

}  // namespace
}  // namespace spoke::cli
