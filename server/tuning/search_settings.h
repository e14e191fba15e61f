// How a tuning job searches and when it stops: the strategy, its budget, the time limit
// and the stop rules, as `ktune tune`, the Tune RPC and a tuning spec give them.
//
// A plain value and pure functions; thread-compatible.
#ifndef KTUNE_SERVER_TUNING_SEARCH_SETTINGS_H_
#define KTUNE_SERVER_TUNING_SEARCH_SETTINGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ktune {

struct SearchSettings {
  std::string strategy = "guided";  // "guided", "exhaustive" or "random" (search_strategy.h)
  int64_t budget = 0;       // most candidates to measure; 0 = the strategy's own default
  double time_limit_s = 0;  // stop starting new candidates after this; 0 = none
  // Guided: stop once the next batch is expected to gain less than this fraction.
  double min_gain = 0.01;
  // Guided and random: a candidate at this fraction of the key's roofline bound (its
  // reference's bytes over the device's measured copy ceiling) ends the search, since no
  // other can beat it by more than the noise. 0 = off; exhaustive never stops early.
  // The bound is a plain copy's and tuned kernels beat it: on the H100 (2026-12-07) 26 of
  // the Llama spec's 120 memory-bound keys had an exhaustive winner at 1.02-1.10 of it, so a
  // stop at 0.97 ended searches 5-13 % short of what was there (add_rmsnorm 1024 x 4096 on
  // its 8th candidate, 2.7 % behind the best). At 1.0, replayed over four exhaustive H100
  // stores: 115.0 keys of 120 within 2 % where 0.97 gave 114.4, measuring 19.1 % against
  // 18.9 %.
  double roofline_stop = 1.0;
  // Guided: start from the winners and leaders of neighbouring stored keys (warm_start.h).
  bool warm_start = true;

  friend bool operator==(const SearchSettings& a, const SearchSettings& b) {
    return a.strategy == b.strategy && a.budget == b.budget &&
           a.time_limit_s == b.time_limit_s && a.min_gain == b.min_gain &&
           a.roofline_stop == b.roofline_stop && a.warm_start == b.warm_start;
  }
};

// kInvalidArgument naming the field: an unknown strategy, a negative budget or time limit,
// min gain outside [0, 1), roofline stop outside [0, 1].
absl::Status CheckSearchSettings(const SearchSettings& s);

// "guided budget=0 time=0 min_gain=0.01 roofline=1 warm": one line, for job keys and logs.
std::string SearchSettingsString(const SearchSettings& s);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_SEARCH_SETTINGS_H_
