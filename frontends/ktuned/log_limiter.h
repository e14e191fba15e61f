// A log that keeps a noisy kind of line down to one per interval: a caller that repeats a
// bad call a thousand times a second must not flood the daemon's log (or its disk), while
// the first such call of a while still shows, with how many were held back before it.
//
// Thread-safe.
#ifndef KTUNE_SERVER_SERVICE_LOG_LIMITER_H_
#define KTUNE_SERVER_SERVICE_LOG_LIMITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ktune {

class LogLimiter {
 public:
  using Sink = std::function<void(const std::string& line)>;
  using Clock = std::function<absl::Time()>;

  // `sink` writes a line (without its newline); `clock` is the time now (tests step one).
  LogLimiter(absl::Duration interval, Sink sink, Clock clock = absl::Now);

  // Hands `line` to the sink unless a line of the same `kind` went there less than
  // `interval` ago; then it is only counted, and the next line of that kind that goes ends
  // "(and N more like it in the last 12s, not logged)". Kinds are few (the daemon's
  // methods, say): each is remembered for good.
  void Log(const std::string& kind, const std::string& line);

 private:
  struct Seen {
    absl::Time last;   // when a line of this kind last went to the sink
    int64_t held = 0;  // lines of this kind held back since then
  };

  const absl::Duration interval_;
  const Sink sink_;
  const Clock clock_;
  absl::Mutex mu_;
  std::map<std::string, Seen> kinds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_LOG_LIMITER_H_
