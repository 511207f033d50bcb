#include "csi-controller/controller_config.h"

#include <gtest/gtest.h>

namespace spoke::controller {
namespace {

Result<ControllerConfig> Parse(const std::string& yaml) {
  SPOKE_TRY(auto reader, ConfigReader::LoadString(yaml, "controller.yaml"));
  return ControllerConfig::Read(reader);
}

TEST(ControllerConfigTest, DefaultsAndValues) {
  auto d = Parse("");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->hub_timeout_seconds, 10);
  EXPECT_EQ(d->archive_prefix, "archived-");
  EXPECT_EQ(d->scratch_dir_mode, 0777u);
  auto c = Parse(
      "hubTimeoutSeconds: 30s\narchivePrefix: old.\nscratchDirMode: \"0770\"\n"
      "logLevel: debug\n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->hub_timeout_seconds, 30);
  EXPECT_EQ(c->archive_prefix, "old.");
  EXPECT_EQ(c->scratch_dir_mode, 0770u);
  EXPECT_EQ(c->log_level, "debug");
}

TEST(ControllerConfigTest, ErrorsNameTheKey) {
  for (auto [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"hubTimeoutSeconds: 0", "hubTimeoutSeconds"},
           {"hubTimeoutSeconds: soon", "hubTimeoutSeconds"},
           {"archivePrefix: a/b", "archivePrefix"},
           {"archivePrefix: \"\"", "archivePrefix"},
           {"scratchDirMode: 999", "scratchDirMode"},
           {"logLevel: loud", "logLevel"},
           {"hubTimeout: 3", "hubTimeout"}}) {
    auto c = Parse(yaml);
    ASSERT_FALSE(c) << yaml;
    EXPECT_NE(c.error().message().find(key), std::string::npos) << c.error().message();
  }
}

}  // namespace
}  // namespace spoke::controller
