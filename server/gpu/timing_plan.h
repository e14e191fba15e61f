// How one candidate is timed: worker.proto's TimingOptions with every 0 ("use the
// default") replaced by its default. The defaults are written here and nowhere else: the
// worker times by the plan, and its parent sizes the worker's deadline from the same plan.
//
// A plain value type and pure functions; thread-safe.
#ifndef KTUNE_SERVER_GPU_TIMING_PLAN_H_
#define KTUNE_SERVER_GPU_TIMING_PLAN_H_

#include <cstdint>

#include "ktune/v1/worker.pb.h"

namespace ktune {

// The defaults of TimingOptions' fields, in the units of the plan's fields below.
inline constexpr int64_t kDefaultWarmup = 3;
inline constexpr int64_t kDefaultMinRepeats = 10;
inline constexpr int64_t kDefaultMaxRepeats = 200;
inline constexpr double kDefaultTargetRelSpread = 0.02;
inline constexpr double kDefaultTimeCapMs = 2000;
inline constexpr double kDefaultMinSampleUs = 20;
// Runs per timed sample at the most.
inline constexpr int64_t kMaxBatch = 1000;
// A requested batch holds while a sample of it takes at most this many x min_sample: past
// that the candidate is far slower than the one the batch was sized for, and cannot be one
// of the near-equal candidates a common batch is for.
inline constexpr double kMaxFixedSampleFactor = 4;

struct TimingPlan {
  int64_t warmup = kDefaultWarmup;          // runs timed one by one before the samples
  int64_t min_repeats = kDefaultMinRepeats;  // samples before the spread may stop; <= max
  int64_t max_repeats = kDefaultMaxRepeats;  // samples at the most
  double target_rel_spread = kDefaultTargetRelSpread;  // stop below this IQR / median
  double time_cap_ms = kDefaultTimeCapMs;    // stop sampling past this much timing
  double min_sample_ms = kDefaultMinSampleUs * 1e-3;  // shorter runs are timed in batches
  bool flush_l2 = true;                      // flush L2 before every timed sample
  int64_t batch = 0;  // runs per sample for every candidate alike, up to kMaxBatch; 0: its own
};

// The plan `options` asks for: each field that is 0 (or negative, or NaN) takes its
// default, and min_repeats never exceeds max_repeats.
TimingPlan ResolveTiming(const v1::TimingOptions& options);

// Runs per timed sample for a candidate whose single runs take `per_run_ms`: the plan's batch
// where it has one and a sample of it stays within kMaxFixedSampleFactor x min_sample_ms;
// else 1, or enough back-to-back runs to fill min_sample_ms (at most kMaxBatch).
int64_t SampleBatch(const TimingPlan& plan, double per_run_ms);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_TIMING_PLAN_H_
