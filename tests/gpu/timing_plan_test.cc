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

TEST(ResolveTimingTest, BatchIsKeptInRange) {
  v1::TimingOptions t;
  EXPECT_EQ(ResolveTiming(t).batch, 0);
  t.set_batch(7);
  EXPECT_EQ(ResolveTiming(t).batch, 7);
  t.set_batch(-3);
  EXPECT_EQ(ResolveTiming(t).batch, 0);
  t.set_batch(kMaxBatch + 1);
  EXPECT_EQ(ResolveTiming(t).batch, kMaxBatch);
}

// Without a batch of its own, a run shorter than the minimum sample (20 us) is batched to
// fill it; longer runs are timed one by one.
TEST(SampleBatchTest, OwnBatchFillsTheMinimumSample) {
  const TimingPlan plan = ResolveTiming(v1::TimingOptions());
  EXPECT_EQ(SampleBatch(plan, 0.003), 7);  // 3 us: 7 runs, 21 us
  EXPECT_EQ(SampleBatch(plan, 0.0035), 6);
  EXPECT_EQ(SampleBatch(plan, 0.020), 1);
  EXPECT_EQ(SampleBatch(plan, 0.5), 1);
  EXPECT_EQ(SampleBatch(plan, 0), kMaxBatch);  // too short to measure: as many as allowed
  EXPECT_EQ(SampleBatch(plan, 1e-9), kMaxBatch);
  EXPECT_EQ(SampleBatch(plan, std::nan("")), 1);
}

// A requested batch is every candidate's, faster or slower than the one it was sized for,
// until a sample of it would pass 4 x the minimum sample (80 us): such a candidate is too
// slow to be a near-tie, and gets its own.
TEST(SampleBatchTest, RequestedBatchHoldsUntilTheSampleGrowsTooLong) {
  v1::TimingOptions t;
  t.set_batch(7);
  const TimingPlan plan = ResolveTiming(t);
  EXPECT_EQ(SampleBatch(plan, 0.0035), 7);  // its own would be 6
  EXPECT_EQ(SampleBatch(plan, 0.001), 7);   // its own would be 20
  EXPECT_EQ(SampleBatch(plan, 0.080 / 7), 7);
  EXPECT_EQ(SampleBatch(plan, 0.012), 2);  // 7 x 12 us = 84 us
  EXPECT_EQ(SampleBatch(plan, 0.5), 1);
}

}  // namespace
}  // namespace ktune
