// The global knobs: compiler and launch-bound settings that apply to every template's
// candidates, beside the template's own params.
//
// A plain value type; thread-compatible.
#ifndef KTUNE_SERVER_BASE_KNOBS_H_
#define KTUNE_SERVER_BASE_KNOBS_H_

#include <cstdint>
#include <string>

namespace ktune {

// The global knobs, applied to every candidate of every template.
struct Knobs {
  // --maxrregcount; 0 means no limit.
  int64_t maxrregcount = 0;
  // Second argument of __launch_bounds__(KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS).
  int64_t min_blocks = 1;
  // --use_fast_math.
  bool fast_math = false;
  // "sm_90" or "sm_90a": always a real architecture, so NVRTC emits a cubin.
  std::string target = "sm_90";

  friend bool operator==(const Knobs& a, const Knobs& b) {
    return a.maxrregcount == b.maxrregcount && a.min_blocks == b.min_blocks &&
           a.fast_math == b.fast_math && a.target == b.target;
  }
  friend bool operator<(const Knobs& a, const Knobs& b);
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_KNOBS_H_
