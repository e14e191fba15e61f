#include "server/tuning/spec_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace ktune {
namespace {

using ::testing::Eq;
using ::testing::Optional;

SpecKey Key(int line, const std::string& tmpl, Shape shape, DType dtype = DType::kBF16) {
  SpecKey k;
  k.template_name = tmpl;
  k.dtype = dtype;
  k.shape = std::move(shape);
  k.line = line;
  return k;
}

TEST(SpecKeySizeTest, ProductOfDimsWithFlagsCountedAsOne) {
  EXPECT_EQ(SpecKeySize(Key(1, "gemm", {{"m", 16}, {"n", 4096}, {"k", 4096}})), 16.0 * 4096 * 4096);
  EXPECT_EQ(SpecKeySize(Key(1, "layernorm", {{"tokens", 8}, {"hidden", 4096}, {"with_bias", 0}})),
            8.0 * 4096);
}

// Spec order: rmsnorm's entry first, then gemm's. The gemm chain is the larger, so the first
// GPU takes it, largest m first; the second takes rmsnorm from its largest shape; when the
// first runs out of its chain it takes rmsnorm's smallest keys, from the other end.
TEST(SpecScheduleTest, ChainsLargestFirstThenTheirSmallestKeysFromTheOtherEnd) {
  const std::vector<SpecKey> keys = {
      Key(10, "rmsnorm", {{"tokens", 1}, {"hidden", 4096}}),   // 0
      Key(10, "rmsnorm", {{"tokens", 2}, {"hidden", 4096}}),   // 1
      Key(10, "rmsnorm", {{"tokens", 4}, {"hidden", 4096}}),   // 2
      Key(10, "rmsnorm", {{"tokens", 8}, {"hidden", 4096}}),   // 3
      Key(20, "gemm", {{"m", 16}, {"n", 6144}, {"k", 4096}}),  // 4
      Key(20, "gemm", {{"m", 32}, {"n", 6144}, {"k", 4096}}),  // 5
      Key(20, "gemm", {{"m", 64}, {"n", 6144}, {"k", 4096}}),  // 6
  };
  SpecSchedule s(keys);
  EXPECT_THAT(s.Next(0), Optional(Eq(6u)));
  EXPECT_THAT(s.Next(1), Optional(Eq(3u)));
  EXPECT_THAT(s.Next(0), Optional(Eq(5u)));
  EXPECT_THAT(s.Next(0), Optional(Eq(4u)));
  EXPECT_THAT(s.Next(0), Optional(Eq(0u)));  // gemm done: rmsnorm's smallest
  EXPECT_THAT(s.Next(1), Optional(Eq(2u)));  // its owner goes on from the top
  EXPECT_THAT(s.Next(0), Optional(Eq(1u)));
  EXPECT_EQ(s.Next(1), std::nullopt);
  EXPECT_EQ(s.Next(0), std::nullopt);
}

// One entry's dtypes, and two entries of one template (two projections), are chains apart:
// two GPUs each take one instead of walking the same chain side by side.
TEST(SpecScheduleTest, EntriesAndDtypesAreSeparateChains) {
  const std::vector<SpecKey> keys = {
      Key(10, "gemm", {{"m", 16}, {"n", 4096}, {"k", 4096}}),                   // 0
      Key(10, "gemm", {{"m", 32}, {"n", 4096}, {"k", 4096}}),                   // 1
      Key(10, "gemm", {{"m", 16}, {"n", 4096}, {"k", 4096}}, DType::kF8E4M3),  // 2
      Key(10, "gemm", {{"m", 32}, {"n", 4096}, {"k", 4096}}, DType::kF8E4M3),  // 3
      Key(20, "gemm", {{"m", 16}, {"n", 6144}, {"k", 4096}}),                   // 4
      Key(20, "gemm", {{"m", 32}, {"n", 6144}, {"k", 4096}}),                   // 5
  };
  SpecSchedule s(keys);
  // The n = 6144 chain is the largest; the two n = 4096 chains tie and keep spec order.
  EXPECT_THAT(s.Next(0), Optional(Eq(5u)));
  EXPECT_THAT(s.Next(1), Optional(Eq(1u)));
  EXPECT_THAT(s.Next(2), Optional(Eq(3u)));
  EXPECT_THAT(s.Next(1), Optional(Eq(0u)));
  // Its chain done: the others have one key left each, and the first chain's goes first.
  EXPECT_THAT(s.Next(1), Optional(Eq(4u)));
  EXPECT_THAT(s.Next(0), Optional(Eq(2u)));
  EXPECT_EQ(s.Next(2), std::nullopt);
}

// Whatever order the GPUs ask in, every key is handed out exactly once.
TEST(SpecScheduleTest, EveryKeyOnceWhateverTheOrderOfAsking) {
  std::vector<SpecKey> keys;
  const std::vector<std::string> templates = {"rmsnorm", "rope", "gemm", "softmax", "gemv"};
  for (size_t t = 0; t < templates.size(); ++t) {
    for (int64_t v = 1; v <= (int64_t{1} << (t + 2)); v *= 2) {
      keys.push_back(Key(static_cast<int>(10 * t), templates[t], {{"n", v}, {"k", 4096}}));
    }
  }
  for (int workers : {1, 2, 3, 8}) {
    std::mt19937 rng(workers);
    SpecSchedule s(keys);
    std::multiset<size_t> seen;
    std::set<int> done;
    while (static_cast<int>(done.size()) < workers) {
      const int w = std::uniform_int_distribution<int>(0, workers - 1)(rng);
      std::optional<size_t> i = s.Next(w);
      if (i) {
        seen.insert(*i);
      } else {
        done.insert(w);
      }
    }
    ASSERT_EQ(seen.size(), keys.size()) << workers << " workers";
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
}

TEST(SpecScheduleTest, NoKeys) {
  SpecSchedule s({});
  EXPECT_EQ(s.Next(0), std::nullopt);
}

}  // namespace
}  // namespace ktune
