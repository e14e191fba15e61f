#include "server/gpu/timing_plan.h"

#include <algorithm>

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
  return plan;
}

}  // namespace ktune
