#include "server/base/outcome.h"

namespace ktune {

absl::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kCompileFailed: return "compile_failed";
    case Outcome::kResourceLimit: return "resource_limit";
    case Outcome::kLaunchFailed: return "launch_failed";
    case Outcome::kWrongResult: return "wrong_result";
    case Outcome::kTimedOut: return "timed_out";
    case Outcome::kCrashed: return "crashed";
  }
  return "?";
}

std::optional<Outcome> ParseOutcome(absl::string_view name) {
  for (Outcome o : {Outcome::kOk, Outcome::kCompileFailed, Outcome::kResourceLimit,
                    Outcome::kLaunchFailed, Outcome::kWrongResult, Outcome::kTimedOut,
                    Outcome::kCrashed}) {
    if (OutcomeName(o) == name) return o;
  }
  return std::nullopt;
}

}  // namespace ktune
