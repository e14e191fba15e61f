#include "server/compile/cache_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

using ::testing::MatchesRegex;

constexpr char kIdentity[] = "nvrtc 13.0|libnvrtc.so.13.0.88|-std=c++17 -Xptxas=-v";

CompileRequest Fixed() {
  CompileRequest r;
  r.source = "template <int N> __global__ void k(float* p) { p[0] = N; }\n";
  r.source_name = "k.cu";
  r.name_expressions = {"k<1>", "k<2>"};
  r.options = {"--gpu-architecture=sm_90a", "-DKTUNE_MAX_THREADS=256", "-DKTUNE_MIN_BLOCKS=1"};
  return r;
}

TEST(CacheKeyTest, Golden) {
  // Every key in every cache and store depends on this format. If this fails, the format
  // changed: make sure that was meant, bump kCompileKeyVersion (old entries must not be
  // mistaken for new ones) and paste the new value here.
  EXPECT_EQ(kCompileKeyVersion, "ktune-compile-key-1");
  EXPECT_EQ(CompileCacheKey(Fixed(), kIdentity),
            "0bdeb1db262e3f6c7a20cd05ec489d9c7e7ef5406af3c5aa7af05131a58d5a4b")
      << "the compile key format changed; bump kCompileKeyVersion deliberately";
}

// One keyer's keys, in any order and repeated, are each request's own: the source's hashed
// prefix is copied, never consumed.
TEST(CacheKeyTest, AKeyerGivesEachRequestsKey) {
  const CompileRequest a = Fixed();
  CompileRequest b = Fixed();
  b.name_expressions = {"k<3>"};
  b.options.pop_back();
  const CompileCacheKeyer keyer(a.source_name, a.source);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(keyer.Key(b.name_expressions, b.options, kIdentity), CompileCacheKey(b, kIdentity));
    EXPECT_EQ(keyer.Key(a.name_expressions, a.options, kIdentity), CompileCacheKey(a, kIdentity));
  }
  EXPECT_EQ(keyer.Key(a.name_expressions, a.options, kIdentity),
            "0bdeb1db262e3f6c7a20cd05ec489d9c7e7ef5406af3c5aa7af05131a58d5a4b");  // Golden's
  EXPECT_NE(keyer.Key(a.name_expressions, a.options, "another compiler"),
            CompileCacheKey(a, kIdentity));
}

TEST(CacheKeyTest, IsLowercaseSha256Hex) {
  EXPECT_THAT(CompileCacheKey(Fixed(), kIdentity), MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(CompileCacheKey(Fixed(), kIdentity), CompileCacheKey(Fixed(), kIdentity));
}

// Each variant moves or changes one thing; all keys must differ from each other.
TEST(CacheKeyTest, EveryFieldAndBoundaryCounts) {
  std::vector<std::pair<std::string, std::string>> keys;  // what changed, key
  auto add = [&](const std::string& what, const CompileRequest& r,
                 const std::string& identity = kIdentity) {
    keys.push_back({what, CompileCacheKey(r, identity)});
  };
  add("fixed", Fixed());
  {
    CompileRequest r = Fixed();
    r.source += " ";
    add("source", r);
  }
  {
    CompileRequest r = Fixed();
    r.source_name = "other.cu";
    add("source name", r);
  }
  {
    // A character moved from the source's end to the name's start.
    CompileRequest r = Fixed();
    r.source_name = "k.cu\n";
    r.source.pop_back();
    add("character moved from source to source name", r);
  }
  {
    CompileRequest r = Fixed();
    r.source += "k";
    r.name_expressions[0] = "<1>";
    add("character moved from name expression to source", r);
  }
  {
    CompileRequest r = Fixed();
    r.name_expressions = {"k<1>k<2>"};
    add("two name expressions joined", r);
  }
  {
    CompileRequest r = Fixed();
    r.name_expressions = {"k<2>", "k<1>"};
    add("name expressions reordered", r);
  }
  {
    // The last name expression becomes the first option.
    CompileRequest r = Fixed();
    r.name_expressions = {"k<1>"};
    r.options.insert(r.options.begin(), "k<2>");
    add("name expression moved to the options", r);
  }
  {
    CompileRequest r = Fixed();
    r.options[1] = "-DKTUNE_MAX_THREADS=25";
    r.options[2] = "6-DKTUNE_MIN_BLOCKS=1";
    add("character moved between two options", r);
  }
  {
    CompileRequest r = Fixed();
    r.options[1] = absl::StrCat(r.options[1], r.options[2]);
    r.options.pop_back();
    add("two options joined", r);
  }
  {
    CompileRequest r = Fixed();
    std::swap(r.options[1], r.options[2]);
    add("options reordered", r);
  }
  {
    CompileRequest r = Fixed();
    r.options.push_back("--use_fast_math");
    add("option added", r);
  }
  {
    CompileRequest r = Fixed();
    r.options[0] = "--gpu-architecture=sm_90";
    add("target", r);
  }
  {
    CompileRequest r = Fixed();
    r.options.back() += "\n";
    add("trailing character of the last option moved to the identity", r,
        std::string(kIdentity).substr(1));
  }
  add("identity", Fixed(), "nvrtc 13.1|libnvrtc.so.13.1.0|-std=c++17 -Xptxas=-v");
  add("empty identity", Fixed(), "");
  add("empty request", CompileRequest{});

  std::set<std::string> distinct;
  for (const auto& [what, key] : keys) {
    EXPECT_TRUE(distinct.insert(key).second) << what << " gives a key seen before";
  }
}

}  // namespace
}  // namespace ktune
