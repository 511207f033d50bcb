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
  for (std::string bad : {"", "Gi", "10XB", "-1", "99999999999999999999", "20000000Ti"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r) << bad;
  }
  EXPECT_NE(ParseSize("10XB").error().message().find("10XB"), std::string::npos);
}

// The single letters keep their meaning (powers of ten, as Kubernetes' k/M/G/T); the
// ...iB/...i forms are powers of two, the ...B forms powers of ten.
TEST(ParseSizeTest, EveryUnitPeopleWrite) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"0", 0},
      {"4096B", 4096},
      {"1k", 1000},
      {"1K", 1000},
      {"1KB", 1000},
      {"1Ki", 1024},
      {"1KiB", 1024},
      {"98M", 98'000'000},
      {"98MB", 98'000'000},
      {"98Mi", 98ull << 20},
      {"98MiB", 98ull << 20},
      {"1G", 1'000'000'000},
      {"1GB", 1'000'000'000},
      {"1Gi", 1ull << 30},
      {"1GiB", 1ull << 30},
      {"2T", 2'000'000'000'000},
      {"2TB", 2'000'000'000'000},
      {"2Ti", 2ull << 40},
      {"2TiB", 2ull << 40},
      {"1P", 1'000'000'000'000'000},
      {"1PiB", 1ull << 50},
      // Case does not matter: a size is always bytes.
      {"98mb", 98'000'000},
      {"98m", 98'000'000},
      {"1gib", 1ull << 30},
      {"1GIB", 1ull << 30},
      {"64kib", 64ull << 10},
      {"1gb", 1'000'000'000},
      {"10b", 10},
      // Blanks around the number and between number and unit.
      {"1 GiB", 1ull << 30},
      {" 64 Mi ", 64ull << 20},
      {"1\tGB", 1'000'000'000},
      // Decimals, rounded up to a whole byte.
      {"1.5GiB", 3ull << 29},
      {"1.5Gi", 3ull << 29},
      {"0.5T", 500'000'000'000},
      {"1.25MB", 1'250'000},
      {"0.1KiB", 103},  // 102.4
      {"1.000000000000000000001KiB", 1025},
      {"16383.5Pi", 18446181123756130304ull},
  };
  for (const Case& c : cases) {
    auto r = ParseSize(c.text);
    ASSERT_TRUE(r) << c.text << ": " << r.error().message();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
  EXPECT_EQ(*ParseSize("18446744073709551615"), UINT64_MAX);
}

TEST(ParseSizeTest, RefusalsSayWhatIsAccepted) {
  for (const char* bad :
       {"1.5",           "1.5B",    "1.",  ".5G", "1..5G",   "1e9",   "1 G B",
        "1GiBs",         "1Gb/s",   "1Bi", "1iB", "1.5.GiB", "16EiB", "18446744073709551616",
        "17179869184Gi", "16384Pi", "GiB", "-1G", "+1G",     "1,5G",  "lots"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r) << bad << " = " << *r;
    if (r) continue;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.error().message().find(std::string("'") + bad + "'"), std::string::npos)
        << bad << ": " << r.error().message();
  }
  const std::string unit = ParseSize("10XB").error().message();
  for (const char* accepted :
       {"KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "1000^n", "1024^n"}) {
    EXPECT_NE(unit.find(accepted), std::string::npos) << unit;
  }
  EXPECT_NE(ParseSize("1.5").error().message().find("needs a unit"), std::string::npos);
}

TEST(FormatSizeTest, BytesAndTheExactBinaryUnit) {
  EXPECT_EQ(FormatSize(1), "1 byte");
  EXPECT_EQ(FormatSize(1000), "1000 bytes");
  EXPECT_EQ(FormatSize(64ull << 20), "67108864 bytes (64 MiB)");
  EXPECT_EQ(FormatSize(1536), "1536 bytes");
  EXPECT_EQ(FormatSize(3ull << 29), "1610612736 bytes (1536 MiB)");
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
