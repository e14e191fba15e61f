// TuningJob: the handle on one queued or running tuning job, shared by every caller that
// asked for it (the tuning queue deduplicates identical requests). Callers follow its
// progress, wait for it or get called back with its result; the queue's worker thread
// publishes the progress and finishes it.
//
// Thread-safe: every method may be called from any thread. Listeners and completion
// callbacks run on the GPU's worker thread (or, for a job that is already finished or
// cancelled, on the caller's thread) and must not block.
#ifndef KTUNE_SERVER_TUNING_TUNING_JOB_HANDLE_H_
#define KTUNE_SERVER_TUNING_TUNING_JOB_HANDLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/tuning/tuning_job.h"

namespace ktune {

// A copy of one TuneProgress, valid after the callback returned.
struct JobProgress {
  int64_t job_id = 0;
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;
  double eta_s = 0;
  std::map<std::string, int64_t> best_params;  // empty until a candidate passed
  double best_time_ns = 0;
  std::string last_outcome;  // "ok", "wrong_result", ...; empty if none
};

class TuningJob {
 public:
  using Listener = std::function<void(const JobProgress&)>;
  using DoneCallback = std::function<void(const absl::StatusOr<TuneResult>&)>;

  // The queue's id of this job (not the store's), unique within the process, from 1.
  int64_t id() const { return id_; }
  int gpu() const { return gpu_; }
  const TuneRequest& request() const { return request_; }

  // Calls `listener` with every progress event from now on. Returns a token for
  // Unsubscribe. A listener added after the job finished is never called.
  int64_t Subscribe(Listener listener);
  // After it returns, the listener is not running and will not be called again.
  // REQUIRES: not called from within a listener.
  void Unsubscribe(int64_t token);

  // Calls `done` once with the job's result: at once (on this thread) if it is finished,
  // otherwise when it finishes.
  void OnDone(DoneCallback done);

  // The result, shared by every joiner. kDeadlineExceeded when `deadline` passes first (the
  // job goes on); kCancelled when the queue shut down before or during the job.
  absl::StatusOr<TuneResult> Wait(absl::Time deadline = absl::InfiniteFuture());
  bool finished() const;

 private:
  friend class TuningQueue;
  TuningJob(int64_t id, int gpu, TuneRequest request, std::string key)
      : id_(id), gpu_(gpu), request_(std::move(request)), key_(std::move(key)) {}
  void Publish(const JobProgress& event);
  void Finish(absl::StatusOr<TuneResult> result);

  const int64_t id_;
  const int gpu_;
  const TuneRequest request_;
  const std::string key_;  // the dedup key

  mutable absl::Mutex mu_;
  // Serializes listener calls with Unsubscribe, so an unsubscribed listener is not running.
  absl::Mutex publish_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, Listener> listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<DoneCallback> done_callbacks_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<TuneResult>> result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_TUNING_JOB_HANDLE_H_
