// What was measured or derived for one trial: time, resources, occupancy, roofline.
//
// A plain value type; thread-compatible.
#ifndef KTUNE_SERVER_BASE_TRIAL_METRICS_H_
#define KTUNE_SERVER_BASE_TRIAL_METRICS_H_

#include <cstdint>

namespace ktune {

// Everything measured or derived for one trial. Zero where not measured (e.g. a trial that
// failed to compile has only compile-side figures).
struct TrialMetrics {
  double time_ns = 0;         // median kernel time of one run, nanoseconds
  double spread_ns = 0;       // interquartile range of the timed runs, nanoseconds
  int64_t repeats = 0;        // timed runs behind the median
  int64_t registers = 0;      // per thread, from ptxas
  int64_t spill_bytes = 0;    // spill stores + loads, from ptxas
  int64_t static_smem = 0;    // bytes per block
  int64_t dynamic_smem = 0;   // bytes per block
  double occupancy = 0;       // theoretical, active warps / max warps per SM, 0..1
  double waves = 0;           // blocks / (SMs x blocks per SM)
  double last_wave = 0;       // fraction of the last wave's SM slots that are busy, 0..1
  double gbps = 0;            // achieved, from the cost model
  double gflops = 0;          // achieved, from the cost model
  double ceiling_fraction = 0;  // gbps / measured copy bandwidth
  // How it was measured, kept with the result so two timings can be compared fairly.
  // Runs per timed sample (1, or more for kernels too short for the event timer).
  int64_t batch = 0;
  bool l2_flushed = false;  // L2 flushed before every timed sample
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_TRIAL_METRICS_H_
