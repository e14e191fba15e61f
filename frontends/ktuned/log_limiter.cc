#include "frontends/ktuned/log_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ktune {

LogLimiter::LogLimiter(absl::Duration interval, Sink sink, Clock clock)
    : interval_(interval), sink_(std::move(sink)), clock_(std::move(clock)) {}

void LogLimiter::Log(const std::string& kind, const std::string& line) {
  const absl::Time now = clock_();
  std::string out;
  {
    absl::MutexLock lock(&mu_);
    auto [it, first] = kinds_.try_emplace(kind);
    Seen& seen = it->second;
    if (!first && now - seen.last < interval_) {
      ++seen.held;
      return;
    }
    out = seen.held == 0
              ? line
              : absl::StrCat(line, " (and ", seen.held, " more like it in the last ",
                             absl::FormatDuration(absl::Trunc(now - seen.last, absl::Seconds(1))),
                             ", not logged)");
    seen.last = now;
    seen.held = 0;
  }
  // Outside the lock: a slow sink (a full pipe) holds up only this caller.
  sink_(out);
}

}  // namespace ktune
