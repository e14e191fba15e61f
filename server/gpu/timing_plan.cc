#include "server/gpu/timing_plan.h"

#include <algorithm>
#include <cmath>

namespace ktune {

TimingPlan ResolveTiming(const v1::TimingOptions& t) {
  TimingPlan plan;
  plan.warmup = t.warmup() > 0 ? t.warmup() : kDefaultWarmup;
  plan.max_repeats = t.max_repeats() > 0 ? t.max_repeats() : kDefaultMaxRepeats;
  plan.min_repeats = std::min<int64_t>(t.min_repeats() > 0 ? t.min_repeats() : kDefaultMinRepeats,
                                       plan.max_repeats);
  plan.target_rel_spread =
      t.target_rel_spread() > 0 ? t.target_rel_spread() : kDefaultTargetRelSpread;
  plan.time_cap_ms = t.time_cap_ms() > 0 ? t.time_cap_ms() : kDefaultTimeCapMs;
  plan.min_sample_ms = (t.min_sample_us() > 0 ? t.min_sample_us() : kDefaultMinSampleUs) * 1e-3;
  plan.flush_l2 = !t.no_l2_flush();
  plan.batch = std::clamp<int64_t>(t.batch(), 0, kMaxBatch);
  return plan;
}

int64_t SampleBatch(const TimingPlan& plan, double per_run_ms) {
  if (plan.batch > 0 &&
      static_cast<double>(plan.batch) * per_run_ms <= kMaxFixedSampleFactor * plan.min_sample_ms) {
    return plan.batch;
  }
  if (!(per_run_ms < plan.min_sample_ms)) return 1;
  if (per_run_ms <= 0) return kMaxBatch;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(plan.min_sample_ms / per_run_ms)), 1,
                             kMaxBatch);
}

}  // namespace ktune
