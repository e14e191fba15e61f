#include "server/base/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>

namespace ktune {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace ktune
