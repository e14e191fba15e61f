#include "server/gpu/timing_plan.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ktune {
namespace {

TEST(ResolveTimingTest, EmptyOptionsTakeTheDefaults) {
  const TimingPlan plan = ResolveTiming(v1::TimingOptions());
  EXPECT_EQ(plan.warmup, 3);
  EXPECT_EQ(plan.min_repeats, 10);
  EXPECT_EQ(plan.max_repeats, 200);
  EXPECT_DOUBLE_EQ(plan.target_rel_spread, 0.02);
  EXPECT_DOUBLE_EQ(plan.time_cap_ms, 2000);
  EXPECT_DOUBLE_EQ(plan.min_sample_ms, 0.02);
  EXPECT_TRUE(plan.flush_l2);
}

TEST(ResolveTimingTest, SetFieldsWin) {
  v1::TimingOptions t;
  t.set_warmup(5);
  t.set_min_repeats(4);
  t.set_max_repeats(20);
  t.set_target_rel_spread(0.1);
  t.set_time_cap_ms(1);
  t.set_min_sample_us(50);
  t.set_no_l2_flush(true);
  const TimingPlan plan = ResolveTiming(t);
  EXPECT_EQ(plan.warmup, 5);
  EXPECT_EQ(plan.min_repeats, 4);
  EXPECT_EQ(plan.max_repeats, 20);
  EXPECT_DOUBLE_EQ(plan.target_rel_spread, 0.1);
  EXPECT_DOUBLE_EQ(plan.time_cap_ms, 1);
  EXPECT_DOUBLE_EQ(plan.min_sample_ms, 0.05);
  EXPECT_FALSE(plan.flush_l2);
}

TEST(ResolveTimingTest, NegativeAndNanTakeTheDefaults) {
  v1::TimingOptions t;
  t.set_warmup(-1);
  t.set_max_repeats(-7);
  t.set_time_cap_ms(std::nan(""));
  const TimingPlan plan = ResolveTiming(t);
  EXPECT_EQ(plan.warmup, kDefaultWarmup);
  EXPECT_EQ(plan.max_repeats, kDefaultMaxRepeats);
  EXPECT_DOUBLE_EQ(plan.time_cap_ms, kDefaultTimeCapMs);
}

TEST(ResolveTimingTest, MinRepeatsNeverExceedsMax) {
  v1::TimingOptions t;
  t.set_max_repeats(4);  // below the default min_repeats of 10
  EXPECT_EQ(ResolveTiming(t).min_repeats, 4);
}

}  // namespace
}  // namespace ktune
