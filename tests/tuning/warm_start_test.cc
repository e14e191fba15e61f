#include "server/tuning/warm_start.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/store/store_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using store::testing::MakeConfig;
using store::testing::MakeEntry;
using store::testing::MakeJob;
using store::testing::MakeKey;
using store::testing::MakeTrials;
using ::testing::ElementsAre;

constexpr char kDevice[] = "NVIDIA H200|sm_90|132sm|6144bit";

class WarmStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, store::OpenSqliteStore(":memory:"));
  }

  // Stores a winner for `key` (config MakeConfig(128 + seed)) whose job has `trials` trials
  // (configs MakeConfig(64 * (i + 1)), fastest first).
  void Put(const store::EntryKey& key, int64_t seed, int trials) {
    ASSERT_OK_AND_ASSIGN(int64_t job, store_->CreateJob(MakeJob(key)));
    ASSERT_OK(store_->CommitWinner(MakeEntry(key, job, seed), MakeTrials(job, trials)).status());
  }

  std::unique_ptr<store::Store> store_;
};

TEST_F(WarmStartTest, SameShapeOtherDtypeFirstThenNearestShapesWithTheirLeaders) {
  Put(MakeKey("hidden=4096,tokens=64", "f16"), 2, 0);
  Put(MakeKey("hidden=4096,tokens=32", "bf16"), 3, 3);
  Put(MakeKey("hidden=4096,tokens=4096", "f16"), 4, 0);  // far: a 5th neighbour
  Put(MakeKey("hidden=4096,tokens=8", "f16"), 5, 0);
  Put(MakeKey("hidden=4096,tokens=2", "f16"), 6, 0);
  Put(MakeKey("hidden=4096,tokens=32", "f16", "rmsnorm", "other GPU"), 7, 0);
  Put(MakeKey("hidden=4096,tokens=32", "f16", "layernorm"), 8, 0);
  Put(MakeKey("hidden=4096,tokens=32", "f16"), 9, 0);  // the key itself: a re-tune

  WarmStartOptions o;
  o.leaders = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<Config> got,
                       WarmStartConfigs(*store_, kDevice, "rmsnorm", DType::kF16,
                                        {{"hidden", 4096}, {"tokens", 32}}, o));
  EXPECT_THAT(got, ElementsAre(MakeConfig(131), MakeConfig(64), MakeConfig(128),  // bf16, 32
                               MakeConfig(130),                                   // 64
                               MakeConfig(133),                                   // 8
                               MakeConfig(134)));                                 // 2
}

TEST_F(WarmStartTest, NothingStoredIsNoWarmStart) {
  ASSERT_OK_AND_ASSIGN(std::vector<Config> got,
                       WarmStartConfigs(*store_, kDevice, "rmsnorm", DType::kF16,
                                        {{"hidden", 4096}, {"tokens", 32}}));
  EXPECT_TRUE(got.empty());
}

}  // namespace
}  // namespace ktune
