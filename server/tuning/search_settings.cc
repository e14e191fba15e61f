#include "server/tuning/search_settings.h"

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/tuning/search_strategy.h"

namespace ktune {

absl::Status CheckSearchSettings(const SearchSettings& s) {
  KTUNE_RETURN_IF_ERROR(CheckStrategyName(s.strategy));
  if (s.budget < 0) return absl::InvalidArgumentError("budget: must be >= 0");
  if (!(s.time_limit_s >= 0)) return absl::InvalidArgumentError("time limit: must be >= 0");
  if (!(s.min_gain >= 0 && s.min_gain < 1)) {
    return absl::InvalidArgumentError("min gain: must be in [0, 1)");
  }
  if (!(s.roofline_stop >= 0 && s.roofline_stop <= 1)) {
    return absl::InvalidArgumentError("roofline stop: must be in [0, 1]");
  }
  return absl::OkStatus();
}

std::string SearchSettingsString(const SearchSettings& s) {
  return absl::StrCat(s.strategy.empty() ? "guided" : s.strategy, " budget=", s.budget,
                      " time=", s.time_limit_s, " min_gain=", s.min_gain,
                      " roofline=", s.roofline_stop, s.warm_start ? " warm" : " cold");
}

}  // namespace ktune
