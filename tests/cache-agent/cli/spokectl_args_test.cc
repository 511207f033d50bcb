#include "cache-agent/cli/spokectl_args.h"

#include <gtest/gtest.h>

namespace spoke::cli {
namespace {

Result<Command> P(std::vector<std::string> a) { return ParseArgs(a); }

std::string ErrorOf(std::vector<std::string> a) {
  auto c = P(a);
  EXPECT_FALSE(c.has_value());
  return c ? "" : c.error().message();
}

TEST(SpokectlArgsTest, Mount) {
  auto c = P({"--socket", "/tmp/a.sock", "mount", "nfs://h/srv/data?nfsport=20491", "/mnt/d",
              "--mode=scratch", "--consistency", "ttl", "--ttl", "5", "--prefetch", "off",
              "--hub-timeout", "3", "--read-only"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->verb, Verb::kMount);
  EXPECT_EQ(c->socket, "/tmp/a.sock");
  EXPECT_EQ(c->nfs_url, "nfs://h/srv/data?nfsport=20491");
  EXPECT_EQ(c->dir, "/mnt/d");
  EXPECT_TRUE(c->read_only);
  EXPECT_EQ(c->mount_options, (StringMap{{"mode", "scratch"},
                                         {"consistency", "ttl"},
                                         {"ttlSeconds", "5"},
                                         {"prefetch", "off"},
                                         {"hubTimeoutSeconds", "3"}}));
  // --allow-root: root callers stay root on the hub (volume option allowRoot).
  c = P({"mount", "nfs://h/srv/data", "/mnt/d", "--mode", "scratch", "--allow-root"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->mount_options, (StringMap{{"mode", "scratch"}, {"allowRoot", "true"}}));
  EXPECT_NE(ErrorOf({"unmount", "/d", "--allow-root"}).find("--allow-root"), std::string::npos);
}

TEST(SpokectlArgsTest, WarmupRateAndVerify) {
  auto c = P({"warmup", "--volume", "v1", "--rate", "50Mi", "--verify", "--json", "train"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->rate_bytes_per_second, 50u << 20);
  EXPECT_TRUE(c->verify);
  EXPECT_EQ(c->prefix, "train");
  c = P({"warmup", "/mnt/d", "--rate=200M/s"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->rate_bytes_per_second, 200'000'000u);
  EXPECT_FALSE(c->verify);
  c = P({"warmup", "/mnt/d"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->rate_bytes_per_second, 0u) << "no --rate: no limit";

  EXPECT_EQ(*ParseByteRate("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteRate("1Ki"), 1024u);
  EXPECT_EQ(*ParseByteRate("3Gi/s"), 3ull << 30);
  EXPECT_EQ(*ParseByteRate("5k"), 5000u);
  EXPECT_EQ(*ParseByteRate("1Ti"), 1ull << 40);
  for (const char* bad : {"", "0", "0Mi", "-5Mi", "+5Mi", "1.5Mi", "50MB", "50mi", "Mi", "50 Mi",
                          "2Ti", "99999999999999", "50Mi/h", "1e6"}) {
    auto r = ParseByteRate(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find("--rate"), std::string::npos) << r.error().message();
  }
  EXPECT_NE(ErrorOf({"warmup", "/mnt/d", "--rate", "fast"}).find("--rate: 'fast'"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"warmup", "/mnt/d", "--rate"}).find("--rate needs a value"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"evict", "/d", "--rate", "5Mi"}).find("--rate is not an option of evict"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"evict", "/d", "--verify"}).find("--verify is not an option of evict"),
            std::string::npos);
}

TEST(SpokectlArgsTest, OtherCommands) {
  auto c = P({"status"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kStatus);
  EXPECT_EQ(c->socket, "/run/spoke/agent.sock");
  c = P({"stats", "--volume", "v1"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kStats);
  EXPECT_EQ(c->volume_id, "v1");
  c = P({"stats"});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->dir.empty());
  c = P({"warmup", "/mnt/d", "train"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kWarmup);
  EXPECT_EQ(c->prefix, "train");
  c = P({"warmup", "--volume", "v1", "./train/", "--json"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kWarmup);
  EXPECT_EQ(c->volume_id, "v1");
  EXPECT_TRUE(c->dir.empty());
  EXPECT_EQ(c->prefix, "train");
  EXPECT_TRUE(c->json);
  c = P({"warmup", "--volume", "v1"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, "");
  EXPECT_FALSE(c->json);
  c = P({"evict", "/mnt/d"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kEvict);
  EXPECT_EQ(c->prefix, "");
  c = P({"hint", "/mnt/d", "-"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kHint);
  EXPECT_EQ(c->hint_file, "-");
  c = P({"unmount", "/mnt/d"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kUnmount);
  c = P({"--help"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kHelp);
}

// warmup/evict PREFIX: "." and "/" are the whole volume, "./sub" and "sub/" are "sub", a
// path under DIR is taken relative to it; ".." and paths outside DIR are refused.
TEST(SpokectlArgsTest, PrefixAsPeopleTypeIt) {
  const std::pair<std::string, std::string> ok[] = {
      {".", ""},
      {"/", ""},
      {"./", ""},
      {"sub", "sub"},
      {"./sub", "sub"},
      {"sub/", "sub"},
      {"./sub/x/", "sub/x"},
      {"sub//x", "sub/x"},
      {"/mnt/d", ""},
      {"/mnt/d/", ""},
      {"/mnt/d/train", "train"},
      {"/mnt/d/train/", "train"},
      {"/mnt/d//train/./cats", "train/cats"},
  };
  for (const char* verb : {"warmup", "evict"}) {
    for (const auto& [in, want] : ok) {
      auto c = P({verb, "/mnt/d", in});
      ASSERT_TRUE(c) << verb << " '" << in << "': " << c.error().message();
      EXPECT_EQ(c->prefix, want) << verb << " '" << in << "'";
      EXPECT_EQ(c->dir, "/mnt/d");
    }
    // DIR given with a trailing slash: the same.
    auto c = P({verb, "/mnt/d/", "/mnt/d/train"});
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(c->prefix, "train");
    for (const std::string bad : {"..", "../other", "sub/../..", "a/../b", "/etc", "/mnt/data",
                                  "/mnt", "/mnt/d/../e", "/mnt/d/.."}) {
      std::string err = ErrorOf({verb, "/mnt/d", bad});
      EXPECT_NE(err.find(std::string(verb) + ": "), std::string::npos) << bad << ": " << err;
      EXPECT_NE(err.find("PREFIX"), std::string::npos) << bad << ": " << err;
    }
    EXPECT_NE(ErrorOf({verb, "/mnt/d", "/etc"}).find("not under DIR /mnt/d"), std::string::npos);
  }
  EXPECT_EQ(PrefixInVolume("/", "/etc").value_or("<refused>"), "etc");
}

TEST(SpokectlArgsTest, UsageErrors) {
  EXPECT_NE(ErrorOf({}).find("no command"), std::string::npos);
  EXPECT_NE(ErrorOf({"frobnicate"}).find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_NE(ErrorOf({"mount", "nfs://h/x"}).find("mount: expected NFS-URL DIR"), std::string::npos);
  EXPECT_NE(ErrorOf({"status", "--bogus"}).find("unknown flag '--bogus'"), std::string::npos);
  EXPECT_NE(ErrorOf({"status", "--socket"}).find("--socket needs a value"), std::string::npos);
  EXPECT_NE(ErrorOf({"--socket", "rel.sock", "status"}).find("--socket: must be an absolute path"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"warmup", "/d", "--mode", "dataset"}).find("not an option of warmup"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"stats", "/d", "--volume", "v"}).find("not both"), std::string::npos);
  EXPECT_NE(ErrorOf({"hint", "/d"}).find("hint: expected DIR FILE|-"), std::string::npos);
  EXPECT_NE(ErrorOf({"unmount", "/d", "--read-only"}).find("--read-only"), std::string::npos);
}

TEST(SpokectlArgsTest, SocketAnywhereAliasesAndRepeats) {
  auto c = P({"unmount", "/mnt/d", "--socket=/tmp/b.sock"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->socket, "/tmp/b.sock");
  c = P({"umount", "/mnt/d"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->verb, Verb::kUnmount);
  EXPECT_EQ(c->dir, "/mnt/d");
  c = P({"mount", "nfs://h/x", "/m", "--mode", "dataset", "--mode", "scratch"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->mount_options.at("mode"), "scratch");  // the last one wins
  c = P({"hint", "/mnt/d", "-", "--socket", "/s"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->hint_file, "-");
  EXPECT_EQ(c->socket, "/s");
  c = P({"warmup", "/mnt/d", "--help"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kHelp);
  c = P({"help"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kHelp);
  c = P({"status", "--version"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, Verb::kVersion);
}

TEST(SpokectlArgsTest, MoreUsageErrors) {
  EXPECT_NE(ErrorOf({"status", "extra"}).find("status: expected no arguments"), std::string::npos);
  EXPECT_NE(ErrorOf({"warmup"}).find("warmup: expected DIR [PREFIX] or --volume ID"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"warmup", "--volume", "v1", "p", "q"}).find("with --volume, expected at most"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"evict", "/d", "--json"}).find("--json is not an option of evict"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"warmup", "/d", "p", "q"}).find("warmup: expected DIR [PREFIX]"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"evict", "/d", "--volume=v"}).find("--volume is not an option of evict"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"mount", "nfs://h/x", "/m", "--ttl"}).find("--ttl needs a value"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--socket", "/s"}).find("no command"), std::string::npos);
  EXPECT_NE(ErrorOf({"--bogus", "status"}).find("unknown flag '--bogus'"), std::string::npos);
}

TEST(SpokectlArgsTest, PlanMountBuildsIdAndContext) {
  auto c = P({"mount", "nfs://10.0.0.5/srv/data?nfsport=20491&mountport=20492", "/mnt/d"});
  ASSERT_TRUE(c);
  auto plan = PlanMount(*c);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->volume_id, "spoke1|dataset|retain|10.0.0.5|20491|20492|/srv/data|");
  EXPECT_TRUE(plan->read_only);  // datasets are read-only
  EXPECT_EQ(plan->volume_context.at("server"), "10.0.0.5");
  EXPECT_EQ(plan->volume_context.at("share"), "/srv/data");
  EXPECT_EQ(plan->volume_context.at("mode"), "dataset");
  EXPECT_EQ(plan->volume_context.at("consistency"), "immutable");  // defaults made explicit
  EXPECT_EQ(plan->volume_context.at("prefetch"), "auto");
  auto ctx = VolumeContext::FromMap(plan->volume_context);
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->hub.mount_port, 20492);

  c = P({"mount", "nfs://h/srv/s", "/mnt/s", "--mode", "scratch"});
  ASSERT_TRUE(c);
  plan = PlanMount(*c);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_FALSE(plan->read_only);
  EXPECT_EQ(plan->volume_id, "spoke1|scratch|retain|h|2049|0|/srv/s|");
  EXPECT_EQ(plan->volume_context.at("consistency"), "strict");
}

TEST(SpokectlArgsTest, PlanMountErrorsNameTheFlagOrUrl) {
  auto c = P({"mount", "http://h/x", "/mnt"});
  ASSERT_TRUE(c);
  auto plan = PlanMount(*c);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("bad NFS URL"), std::string::npos);
  c = P({"mount", "nfs://h/x", "/mnt", "--consistency", "eventual"});
  ASSERT_TRUE(c);
  plan = PlanMount(*c);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message().rfind("--consistency: ", 0), 0u) << plan.error().message();
  c = P({"mount", "nfs://h/x", "/mnt", "--mode", "both"});
  ASSERT_TRUE(c);
  plan = PlanMount(*c);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message().rfind("--mode: ", 0), 0u) << plan.error().message();
}

TEST(SpokectlArgsTest, AbsoluteDir) {
  EXPECT_EQ(AbsoluteDir("/a/b/../c/"), "/a/c");
  EXPECT_EQ(AbsoluteDir("/"), "/");
  EXPECT_EQ(AbsoluteDir("x").front(), '/');
}

}  // namespace
}  // namespace spoke::cli
