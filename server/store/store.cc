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

std::optional<JobState> ParseJobState(absl::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed,
                     JobState::kAbandoned}) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

}  // namespace ktune::store
