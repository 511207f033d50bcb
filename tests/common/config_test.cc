// common/config.h: sizes, durations, and the ConfigReader's error paths.
#include "common/config.h"

#include <gtest/gtest.h>

namespace spoke {
namespace {

TEST(ParseSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64Ki"), 64u << 10);
  EXPECT_EQ(*ParseSize("1Mi"), 1u << 20);
  EXPECT_EQ(*ParseSize("200Gi"), 200ull << 30);
  EXPECT_EQ(*ParseSize("1G"), 1000000000u);
  for (std::string bad : {"", "Gi", "1.5Gi", "10XB", "-1", "99999999999999999999", "20000000Ti"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r) << bad;
  }
  EXPECT_NE(ParseSize("10XB").error().message().find("10XB"), std::string::npos);
}

TEST(ParseDurationTest, Units) {
  EXPECT_EQ(*ParseDurationSeconds("30"), 30);
  EXPECT_EQ(*ParseDurationSeconds("30s"), 30);
  EXPECT_EQ(*ParseDurationSeconds("500ms"), 0.5);
  EXPECT_EQ(*ParseDurationSeconds("2m"), 120);
  EXPECT_EQ(*ParseDurationSeconds("1h"), 3600);
  EXPECT_FALSE(ParseDurationSeconds("soon"));
  EXPECT_FALSE(ParseDurationSeconds("5d"));
  EXPECT_FALSE(ParseDurationSeconds("1.2.3"));
}

TEST(ParseIntTest, StrictRange) {
  EXPECT_EQ(*ParseInt("42", 0, 100), 42);
  EXPECT_FALSE(ParseInt("101", 0, 100));
  EXPECT_FALSE(ParseInt("4 2", 0, 100));
  EXPECT_FALSE(ParseInt("", 0, 100));
  EXPECT_FALSE(ParseInt("0x10", 0, 100));
}

TEST(ConfigReaderTest, ReadsValuesAndDefaults) {
  auto r = ConfigReader::LoadString(
      "name: a\nsize: 1Mi\ntimeout: 500ms\nflag: yes\nhub:\n  connections: 4\n", "t.yaml");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->String("name", "x"), "a");
  EXPECT_EQ(r->Size("size", 0, 0, 1ull << 40), 1u << 20);
  EXPECT_EQ(r->Seconds("timeout", 1, 0, 10), 0.5);
  EXPECT_TRUE(r->Bool("flag", false));
  EXPECT_EQ(r->Int("absent", 7, 0, 10), 7);
  auto hub = r->Child("hub");
  EXPECT_EQ(hub.Int("connections", 1, 1, 64), 4);
  ASSERT_TRUE(hub.Finish());
  EXPECT_TRUE(r->Finish());
}

TEST(ConfigReaderTest, UnknownKeyIsAnError) {
  auto r = ConfigReader::LoadString("name: a\nnmae: b\n", "t.yaml");
  ASSERT_TRUE(r);
  r->String("name", "");
  auto s = r->Finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("nmae"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("t.yaml"), std::string::npos);
}

TEST(ConfigReaderTest, BadSizeNamesKeyAndText) {
  auto r = ConfigReader::LoadString("cache:\n  size: 12XB\n", "agent.yaml");
  ASSERT_TRUE(r);
  auto cache = r->Child("cache");
  cache.Size("size", 1, 1, UINT64_MAX);
  cache.Finish();
  auto s = r->Finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("cache.size"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("12XB"), std::string::npos);
}

TEST(ConfigReaderTest, NestedErrorsNameThePath) {
  auto r = ConfigReader::LoadString("hub:\n  pool:\n    connections: 0\n    extra: 1\n", "a.yaml");
  ASSERT_TRUE(r);
  auto hub = r->Child("hub");
  auto pool = hub.Child("pool");
  pool.Int("connections", 1, 1, 64);
  auto s = pool.Finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("hub.pool.connections"), std::string::npos)
      << s.error().message();
  // The unknown nested key is reported with its path too (after the first error is fixed).
  auto r2 = ConfigReader::LoadString("hub:\n  pool:\n    extra: 1\n", "a.yaml");
  auto hub2 = r2->Child("hub");
  auto pool2 = hub2.Child("pool");
  auto s2 = pool2.Finish();
  ASSERT_FALSE(s2);
  EXPECT_NE(s2.error().message().find("hub.pool.extra"), std::string::npos) << s2.error().message();
}

TEST(ConfigReaderTest, WrongShapesAndSyntax) {
  auto list = ConfigReader::LoadString("name: [a, b]\n", "t.yaml");
  ASSERT_TRUE(list);
  list->String("name", "");
  EXPECT_FALSE(list->Finish());
  auto child = ConfigReader::LoadString("hub: 3\n", "t.yaml");
  ASSERT_TRUE(child);
  child->Child("hub");
  EXPECT_FALSE(child->Finish());
  auto syntax = ConfigReader::LoadString("a: [unclosed\n", "bad.yaml");
  ASSERT_FALSE(syntax);
  EXPECT_NE(syntax.error().message().find("bad.yaml"), std::string::npos);
  EXPECT_FALSE(ConfigReader::LoadString("- a\n- b\n", "t.yaml"));
  auto missing = ConfigReader::LoadFile("/nonexistent/spoke.yaml");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  auto e = ConfigReader::LoadString("mode: fast\n", "t.yaml");
  e->Enum("mode", "slow", {"slow", "safe"});
  auto s = e->Finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("mode"), std::string::npos);
}

// A list or map used as a key once ended in std::terminate (an uncaught YAML exception).
TEST(ConfigReaderTest, NonScalarKeyIsAnErrorNotACrash) {
  for (const char* yaml : {"[a, b]: 1\n", "{a: 1}: 2\n", "? [x]\n: y\n"}) {
    auto r = ConfigReader::LoadString(yaml, "t.yaml");
    ASSERT_TRUE(r) << yaml;
    auto s = r->Finish();
    ASSERT_FALSE(s) << yaml;
    EXPECT_NE(s.error().message().find("plain word"), std::string::npos) << s.error().message();
  }
}

TEST(ConfigReaderTest, StringList) {
  auto r = ConfigReader::LoadString("roots: [/a, /b]\nbad: [[x]]\none: /c\n", "t.yaml");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->StringList("roots", {}), (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(r->StringList("absent", {"/d"}), (std::vector<std::string>{"/d"}));
  r->StringList("bad", {});
  auto s = r->Finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("bad"), std::string::npos);
  auto one = ConfigReader::LoadString("one: /c\n", "t.yaml");
  one->StringList("one", {});
  EXPECT_FALSE(one->Finish());
}

}  // namespace
}  // namespace spoke
