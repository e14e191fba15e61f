#include "server/base/candidate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ktune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Config MakeConfig() {
  Config c;
  c.params = {{"VEC", 4}, {"BLOCK", 256}, {"UNROLL", 2}};
  c.knobs.maxrregcount = 64;
  c.knobs.min_blocks = 2;
  c.knobs.fast_math = true;
  c.knobs.target = "sm_90a";
  return c;
}

TEST(ConfigStringTest, Golden) {
  Config c;
  c.params = {{"VEC", 4}, {"BLOCK", 256}};
  c.knobs.target = "sm_90a";
  EXPECT_EQ(ConfigString(c), "BLOCK=256,VEC=4 maxrreg=0 minb=1 fastmath=0 sm_90a");
  EXPECT_EQ(ConfigString(MakeConfig()),
            "BLOCK=256,UNROLL=2,VEC=4 maxrreg=64 minb=2 fastmath=1 sm_90a");
  Config negative;
  negative.params = {{"A", -1}};
  EXPECT_EQ(ConfigString(negative), "A=-1 maxrreg=0 minb=1 fastmath=0 sm_90");
  // A template without params: the knobs alone, after a separating space.
  EXPECT_EQ(ConfigString(Config{}), " maxrreg=0 minb=1 fastmath=0 sm_90");
}

TEST(ConfigStringTest, ParamsPrintInNameOrder) {
  Config a, b;
  a.params["Z"] = 1;
  a.params["A"] = 2;
  b.params["A"] = 2;
  b.params["Z"] = 1;
  EXPECT_EQ(ConfigString(a), ConfigString(b));
  EXPECT_EQ(a, b);
}

TEST(ConfigTest, Ordering) {
  Config a = MakeConfig();
  Config b = a;
  EXPECT_FALSE(a < b);
  EXPECT_FALSE(b < a);
  b.params["VEC"] = 8;
  EXPECT_TRUE(a < b);
  b = a;
  b.knobs.target = "sm_90b";
  EXPECT_TRUE(a < b);
  EXPECT_FALSE(a == b);
}

TEST(ConfigJsonTest, RoundTrip) {
  for (Config c : {MakeConfig(), Config{}}) {
    std::string error;
    std::optional<Config> back = ConfigFromJson(ConfigToJson(c), &error);
    ASSERT_TRUE(back.has_value()) << error;
    EXPECT_EQ(*back, c);
    EXPECT_EQ(ConfigString(*back), ConfigString(c));
  }
  Config extremes;
  extremes.params = {{"MIN", std::numeric_limits<int64_t>::min()},
                     {"MAX", std::numeric_limits<int64_t>::max()},
                     {"ZERO", 0}};
  std::optional<Config> back = ConfigFromJson(ConfigToJson(extremes), nullptr);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, extremes);
}

TEST(ConfigJsonTest, Golden) {
  Config c;
  c.params = {{"BLOCK", 256}};
  EXPECT_EQ(ConfigToJson(c),
            R"({"knobs":{"fast_math":false,"maxrregcount":0,"min_blocks":1,"target":"sm_90"},)"
            R"("params":{"BLOCK":256}})");
}

TEST(ConfigJsonTest, NonUtf8DoesNotThrow) {
  Config c;
  c.params["bad\xff"] = 1;
  c.knobs.target = "sm_\xfe";
  std::string json;
  EXPECT_NO_THROW(json = ConfigToJson(c));
  EXPECT_TRUE(ConfigFromJson(json, nullptr).has_value());
}

struct BadJson {
  const char* json;
  const char* error;
};
void PrintTo(const BadJson& b, std::ostream* os) { *os << b.json; }

class ConfigFromJsonErrorTest : public ::testing::TestWithParam<BadJson> {};

TEST_P(ConfigFromJsonErrorTest, Fails) {
  std::string error;
  EXPECT_EQ(ConfigFromJson(GetParam().json, &error), std::nullopt);
  EXPECT_THAT(error, HasSubstr(GetParam().error));
  EXPECT_THAT(error, HasSubstr("config json: "));
  // A null error pointer is allowed.
  EXPECT_EQ(ConfigFromJson(GetParam().json, nullptr), std::nullopt);
}

// Valid knobs, so each case below is wrong in one place only.
#define KTUNE_KNOBS \
  R"("knobs":{"maxrregcount":0,"min_blocks":1,"fast_math":false,"target":"sm_90"})"

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigFromJsonErrorTest,
    ::testing::Values(
        BadJson{"", "not a JSON object"}, BadJson{"{", "not a JSON object"},
        BadJson{"[]", "not a JSON object"}, BadJson{"42", "not a JSON object"},
        BadJson{R"({"knobs":{}})", "missing object 'params'"},
        BadJson{R"({"params":[],"knobs":{}})", "missing object 'params'"},
        BadJson{R"({"params":{"A":1.5},)" KTUNE_KNOBS "}", "param A is not an int64 integer"},
        BadJson{R"({"params":{"A":"1"},)" KTUNE_KNOBS "}", "param A is not an int64 integer"},
        BadJson{R"({"params":{"A":true},)" KTUNE_KNOBS "}", "param A is not an int64 integer"},
        BadJson{R"({"params":{"A":null},)" KTUNE_KNOBS "}", "param A is not an int64 integer"},
        // Would wrap to -1 if read with get<int64_t>().
        BadJson{R"({"params":{"A":18446744073709551615},)" KTUNE_KNOBS "}",
                "param A is not an int64 integer"},
        BadJson{R"({"params":{"A":9223372036854775808},)" KTUNE_KNOBS "}",
                "param A is not an int64 integer"},
        BadJson{R"({"params":{}})", "missing object 'knobs'"},
        BadJson{R"({"params":{},"knobs":3})", "missing object 'knobs'"},
        BadJson{R"({"params":{},"knobs":{"min_blocks":1,"fast_math":false,"target":"sm_90"}})",
                "knobs.maxrregcount is missing or not an int64 integer"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":-1.0,"min_blocks":1,"fast_math":false,)"
                R"("target":"sm_90"}})",
                "knobs.maxrregcount is missing"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"fast_math":false,"target":"sm_90"}})",
                "knobs.min_blocks is missing or not an int64 integer"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"min_blocks":"1","fast_math":false,)"
                R"("target":"sm_90"}})",
                "knobs.min_blocks is missing"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"min_blocks":1,"target":"sm_90"}})",
                "knobs.fast_math is missing or not a boolean"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"min_blocks":1,"fast_math":0,)"
                R"("target":"sm_90"}})",
                "knobs.fast_math is missing or not a boolean"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"min_blocks":1,"fast_math":false}})",
                "knobs.target is missing or not a string"},
        BadJson{R"({"params":{},"knobs":{"maxrregcount":0,"min_blocks":1,"fast_math":false,)"
                R"("target":90}})",
                "knobs.target is missing or not a string"}));

TEST(ConfigJsonTest, KnobsStringIsWellFormed) {
  // The error cases above differ from this valid document in one field each.
  std::string error;
  EXPECT_TRUE(ConfigFromJson(R"({"params":{"A":-5},)" KTUNE_KNOBS "}", &error).has_value())
      << error;
}

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

std::vector<LaunchSpec> MakeLaunches() {
  LaunchSpec a;
  a.lowered_name = "_Z3rmsI13__nv_bfloat16Li256ELi4EEvPKT_S3_PS1_if";
  a.grid = {4096, 1, 1};
  a.block = {256, 1, 1};
  a.shared_bytes = 0;
  a.args = {"x", "w", "y", "hidden", "eps"};
  LaunchSpec b;
  b.lowered_name = "_Z6reducev";
  b.grid = {std::numeric_limits<uint32_t>::max(), 2, 3};
  b.block = {32, 4, 2};
  b.shared_bytes = 49152;
  return {a, b};
}

TEST(LaunchesJsonTest, RoundTrip) {
  for (const std::vector<LaunchSpec>& launches : {MakeLaunches(), std::vector<LaunchSpec>{}}) {
    std::string error;
    auto back = LaunchesFromJson(LaunchesToJson(launches), &error);
    ASSERT_TRUE(back.has_value()) << error;
    EXPECT_EQ(*back, launches);
  }
}

TEST(LaunchesJsonTest, Golden) {
  LaunchSpec l;
  l.lowered_name = "k";
  l.grid = {2, 1, 1};
  l.args = {"x"};
  EXPECT_EQ(LaunchesToJson({l}),
            R"([{"args":["x"],"block":[1,1,1],"grid":[2,1,1],"lowered_name":"k",)"
            R"("shared_bytes":0}])");
  EXPECT_EQ(LaunchesToJson({}), "[]");
}

class LaunchesFromJsonErrorTest : public ::testing::TestWithParam<BadJson> {};

TEST_P(LaunchesFromJsonErrorTest, Fails) {
  std::string error;
  EXPECT_EQ(LaunchesFromJson(GetParam().json, &error), std::nullopt);
  EXPECT_THAT(error, HasSubstr("launches json: "));
  EXPECT_THAT(error, HasSubstr(GetParam().error));
  EXPECT_EQ(LaunchesFromJson(GetParam().json, nullptr), std::nullopt);
}

#define KTUNE_GOOD_LAUNCH \
  R"({"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,"args":[]})"

INSTANTIATE_TEST_SUITE_P(
    Cases, LaunchesFromJsonErrorTest,
    ::testing::Values(
        BadJson{"", "not an array"}, BadJson{"{}", "not an array"}, BadJson{"[", "not an array"},
        BadJson{"[" KTUNE_GOOD_LAUNCH ",3]", "launch 1: not an object"},
        BadJson{R"([{"grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,"args":[]}])",
                "launch 0: lowered_name is missing"},
        BadJson{R"([{"lowered_name":7,"grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "launch 0: lowered_name is missing or not a string"},
        BadJson{R"([{"lowered_name":"k","block":[1,1,1],"shared_bytes":0,"args":[]}])",
                "launch 0: grid is missing"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "grid is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "grid is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,-1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "grid is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,4294967296],"block":[1,1,1],)"
                R"("shared_bytes":0,"args":[]}])",
                "grid is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,true,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "block is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1.5,1],"shared_bytes":0,)"
                R"("args":[]}])",
                "block is missing or not 3 uint32 integers"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"args":[]}])",
                "shared_bytes is missing or not a uint32 integer"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":-1,)"
                R"("args":[]}])",
                "shared_bytes is missing or not a uint32 integer"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":true,)"
                R"("args":[]}])",
                "shared_bytes is missing or not a uint32 integer"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":0}])",
                "args is missing or not an array"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":"x"}])",
                "args is missing or not an array"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":["x",1]}])",
                "args holds a non-string"}));

TEST(LaunchesJsonTest, GoodLaunchParses) {
  auto l = LaunchesFromJson("[" KTUNE_GOOD_LAUNCH "]", nullptr);
  ASSERT_TRUE(l.has_value());
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].lowered_name, "k");
  EXPECT_THAT((*l)[0].args, IsEmpty());
  EXPECT_THAT((*l)[0].grid, ElementsAre(1u, 1u, 1u));
}

}  // namespace
}  // namespace ktune
