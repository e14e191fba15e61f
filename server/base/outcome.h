// What happened to one candidate (a trial's outcome) and its stored name.
//
// An enum and pure functions; thread-safe.
#ifndef KTUNE_SERVER_BASE_OUTCOME_H_
#define KTUNE_SERVER_BASE_OUTCOME_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace ktune {

// What happened to one candidate. A failing candidate is a result, not an error.
enum class Outcome {
  kOk,
  kCompileFailed,
  kResourceLimit,  // compiled, but the launch needs more registers/shared memory/threads
  kLaunchFailed,
  kWrongResult,
  kTimedOut,
  kCrashed,
};
// "ok", "compile_failed", "resource_limit", "launch_failed", "wrong_result", "timed_out",
// "crashed".
absl::string_view OutcomeName(Outcome o);
std::optional<Outcome> ParseOutcome(absl::string_view name);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_OUTCOME_H_
