#include "server/store/store.h"

namespace ktune::store {

absl::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
    case JobState::kAbandoned:
      return "abandoned";
  }
  return "?";
}

}  // namespace ktune::store
