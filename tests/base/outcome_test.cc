#include "server/base/outcome.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ktune {
namespace {


TEST(OutcomeTest, NamesRoundTrip) {
  const std::vector<std::pair<Outcome, std::string>> all = {
      {Outcome::kOk, "ok"},
      {Outcome::kCompileFailed, "compile_failed"},
      {Outcome::kResourceLimit, "resource_limit"},
      {Outcome::kLaunchFailed, "launch_failed"},
      {Outcome::kWrongResult, "wrong_result"},
      {Outcome::kTimedOut, "timed_out"},
      {Outcome::kCrashed, "crashed"},
  };
  for (const auto& [o, name] : all) {
    EXPECT_EQ(OutcomeName(o), name);
    EXPECT_EQ(ParseOutcome(name), o) << name;
  }
}

TEST(OutcomeTest, UnknownName) {
  EXPECT_EQ(ParseOutcome(""), std::nullopt);
  EXPECT_EQ(ParseOutcome("OK"), std::nullopt);
  EXPECT_EQ(ParseOutcome("failed"), std::nullopt);
  EXPECT_EQ(ParseOutcome("ok "), std::nullopt);
}

}  // namespace
}  // namespace ktune
