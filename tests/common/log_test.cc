// common/log.h: logfmt lines.
#include "common/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace spoke::log {
namespace {

TEST(LogFormatTest, LogfmtLine) {
  std::string line = Format(Level::kWarn, "hub down", {{"server", "10.0.0.1"}, {"port", 2049}});
  EXPECT_TRUE(std::regex_match(
      line, std::regex(R"(ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=warn msg="hub down" )"
                       R"(server=10\.0\.0\.1 port=2049\n)")))
      << line;
}

TEST(LogFormatTest, QuotesAndEscapes) {
  std::string line = Format(Level::kInfo, "m",
                            {{"a", "x y"},
                             {"b", "say \"hi\""},
                             {"c", "k=v"},
                             {"d", ""},
                             {"e", "two\nlines"},
                             {"f", true}});
  EXPECT_NE(line.find(R"(a="x y")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"(b="say \"hi\"")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"(c="k=v")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"(d="")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"(e="two\nlines")"), std::string::npos) << line;
  EXPECT_NE(line.find("f=true"), std::string::npos) << line;
  // One event, one line: no raw newline before the end.
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(LogLevelTest, ParseAndFilter) {
  EXPECT_EQ(ParseLevel("debug"), Level::kDebug);
  EXPECT_EQ(ParseLevel("warning"), Level::kWarn);
  EXPECT_FALSE(ParseLevel("loud"));
  Level saved = GetLevel();
  SetLevel(Level::kWarn);
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kError));
  SetLevel(saved);
}

}  // namespace
}  // namespace spoke::log
