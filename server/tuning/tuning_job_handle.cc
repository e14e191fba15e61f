#include "server/tuning/tuning_job_handle.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ktune {

int64_t TuningJob::Subscribe(Listener listener) {
  absl::MutexLock lock(&mu_);
  const int64_t token = next_token_++;
  if (!result_) listeners_.emplace(token, std::move(listener));
  return token;
}

void TuningJob::Unsubscribe(int64_t token) {
  absl::MutexLock publishing(&publish_mu_);
  absl::MutexLock lock(&mu_);
  listeners_.erase(token);
}

void TuningJob::OnDone(DoneCallback done) {
  std::optional<absl::StatusOr<TuneResult>> result;
  {
    absl::MutexLock lock(&mu_);
    if (!result_) {
      done_callbacks_.push_back(std::move(done));
      return;
    }
    result = result_;
  }
  done(*result);
}

absl::StatusOr<TuneResult> TuningJob::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return result_.has_value(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("tuning job ", id_, " did not finish before the deadline; it goes on"));
  }
  return *result_;
}

bool TuningJob::finished() const {
  absl::MutexLock lock(&mu_);
  return result_.has_value();
}

void TuningJob::Publish(const JobProgress& event) {
  absl::MutexLock publishing(&publish_mu_);
  std::vector<Listener> listeners;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [token, l] : listeners_) listeners.push_back(l);
  }
  for (Listener& l : listeners) l(event);
}

void TuningJob::Finish(absl::StatusOr<TuneResult> result) {
  std::vector<DoneCallback> callbacks;
  {
    absl::MutexLock publishing(&publish_mu_);
    absl::MutexLock lock(&mu_);
    result_ = std::move(result);
    listeners_.clear();
    callbacks.swap(done_callbacks_);
  }
  for (DoneCallback& cb : callbacks) cb(*result_);  // result_ is immutable once set
}

}  // namespace ktune
