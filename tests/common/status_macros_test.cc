// SPOKE_TRY / SPOKE_RETURN_IF_ERROR (common/status.h): values pass through, errors return
// early with their code, contexts are prepended and only built on the error path.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace spoke {
namespace {

Result<int> Parse(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    return Fail(Code::kInvalidArgument, "not a number: '" + s + "'");
  }
  return std::stoi(s);
}

Status Check(bool ok) {
  if (!ok) return Fail(Code::kNotFound, "missing");
  return Ok();
}

Result<int> Sum(const std::string& a, const std::string& b) {
  SPOKE_TRY(int x, Parse(a));
  SPOKE_TRY(const auto y, Parse(b));
  return x + y;
}

Result<int> SumWrapped(const std::string& a, int* context_builds) {
  auto context = [&] {
    ++*context_builds;
    return std::string("first operand");
  };
  SPOKE_TRY_WRAP(int x, Parse(a), context());
  return x + 1;
}

TEST(StatusMacrosTest, TryPassesValuesAndReturnsErrors) {
  auto ok = Sum("2", "40");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(*ok, 42);
  auto bad = Sum("2", "x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.error().message(), "not a number: 'x'");
}

TEST(StatusMacrosTest, TryWrapBuildsContextOnlyOnError) {
  int builds = 0;
  auto ok = SumWrapped("7", &builds);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 8);
  EXPECT_EQ(builds, 0);
  auto bad = SumWrapped("seven", &builds);
  ASSERT_FALSE(bad);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.error().message(), "first operand: not a number: 'seven'");
}

TEST(StatusMacrosTest, TryAssignsExistingLvaluesAndMovesMoveOnlyValues) {
  auto make = [](bool ok) -> Result<std::unique_ptr<int>> {
    if (!ok) return Fail(Code::kNoSpace, "full");
    return std::make_unique<int>(5);
  };
  auto run = [&](bool ok) -> Result<int> {
    std::unique_ptr<int> p;
    SPOKE_TRY(p, make(ok));
    return *p;
  };
  EXPECT_EQ(run(true).value(), 5);
  ASSERT_FALSE(run(false));
  EXPECT_EQ(run(false).error().code(), Code::kNoSpace);
}

TEST(StatusMacrosTest, ReturnIfErrorFromStatusAndResult) {
  int calls = 0;
  auto counted = [&](bool ok) {
    ++calls;
    return Check(ok);
  };
  auto run = [&](bool first, const std::string& number) -> Status {
    SPOKE_RETURN_IF_ERROR(counted(first));
    SPOKE_RETURN_IF_ERROR(Parse(number));  // a Result<int>: only its error matters
    return Ok();
  };
  EXPECT_TRUE(run(true, "1"));
  EXPECT_EQ(calls, 1);  // evaluated once
  auto missing = run(false, "1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  auto nan = run(true, "one");
  ASSERT_FALSE(nan);
  EXPECT_EQ(nan.error().code(), Code::kInvalidArgument);
}

TEST(StatusMacrosTest, ReturnIfErrorWrapPrependsContext) {
  auto run = [](bool ok) -> Result<std::string> {
    SPOKE_RETURN_IF_ERROR_WRAP(Check(ok), std::string("deleting ") + "/srv/v1");
    return std::string("done");
  };
  EXPECT_EQ(run(true).value(), "done");
  auto bad = run(false);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kNotFound);
  EXPECT_EQ(bad.error().message(), "deleting /srv/v1: missing");
}

}  // namespace
}  // namespace spoke
