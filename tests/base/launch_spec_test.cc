#include "server/base/launch_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ktune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct BadJson {
  const char* json;
  const char* error;
};
void PrintTo(const BadJson& b, std::ostream* os) { *os << b.json; }

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
  b.programmatic = true;
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
                "args holds a non-string"},
        BadJson{R"([{"lowered_name":"k","grid":[1,1,1],"block":[1,1,1],"shared_bytes":0,)"
                R"("args":[],"programmatic":1}])",
                "launch 0: programmatic is not a boolean"}));

TEST(LaunchesJsonTest, GoodLaunchParses) {
  auto l = LaunchesFromJson("[" KTUNE_GOOD_LAUNCH "]", nullptr);
  ASSERT_TRUE(l.has_value());
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].lowered_name, "k");
  EXPECT_THAT((*l)[0].args, IsEmpty());
  EXPECT_THAT((*l)[0].grid, ElementsAre(1u, 1u, 1u));
  // Stores written before launches could be programmatic have no such field: plain.
  EXPECT_FALSE((*l)[0].programmatic);
}

TEST(LaunchesJsonTest, ProgrammaticIsWrittenOnlyWhenSet) {
  LaunchSpec l;
  l.lowered_name = "k";
  l.programmatic = true;
  EXPECT_EQ(LaunchesToJson({l}),
            R"([{"args":[],"block":[1,1,1],"grid":[1,1,1],"lowered_name":"k",)"
            R"("programmatic":true,"shared_bytes":0}])");
}

}  // namespace
}  // namespace ktune
