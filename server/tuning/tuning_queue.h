// The daemon's tuning queue: one worker thread per GPU runs RunTuning jobs one at a time,
// in submission order, from a bounded FIFO. A worker whose own FIFO is empty takes the oldest
// job waiting for another GPU of the same device model: entries are keyed by the model, so
// the job's winner is the same whichever of them measures it, and a burst of requests naming
// GPU 0 spreads over all of that model's GPUs. An identical request (same GPU, template, dtype,
// shape, strategy and budget) submitted while one is queued or running joins it: every
// joiner gets the same job handle and the same result.
//
// Thread-safe: Submit and Shutdown may be called from any thread; the job handles it gives
// out are tuning_job_handle.h's, with their own contract.
#ifndef KTUNE_SERVER_TUNING_TUNING_QUEUE_H_
#define KTUNE_SERVER_TUNING_TUNING_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/tuning/tuning_job.h"
#include "server/tuning/tuning_job_handle.h"

namespace ktune {

class FleetSync;

class TuningQueue {
 public:
  // `envs[i]` is GPU i's environment; each needs its own Gpu (the compiler, pool, registry
  // and store may be shared). They must outlive the queue. `capacity` bounds the jobs
  // waiting (not running) over all GPUs. With `fleet` (which must outlive the queue), each
  // job runs under its key's fleet-wide lease and its winner is published
  // (FleetSync::RunLeased).
  // `models[i]` is GPU i's device model key (DeviceModelKey); empty: no GPU takes another's
  // jobs.
  TuningQueue(std::vector<TuningEnv> envs, int capacity, FleetSync* fleet = nullptr,
              std::vector<std::string> models = {});
  // Shuts down (see Shutdown).
  ~TuningQueue();
  TuningQueue(const TuningQueue&) = delete;
  TuningQueue& operator=(const TuningQueue&) = delete;

  // Queues `request` on GPU `gpu`, or joins the identical job queued or running there.
  // kInvalidArgument for a GPU out of range; kResourceExhausted "tuning queue is full
  // (N jobs)"; kUnavailable after Shutdown.
  absl::StatusOr<std::shared_ptr<TuningJob>> Submit(const TuneRequest& request, int gpu);

  // Jobs queued (not running) now, over all GPUs.
  int queued() const;
  int gpus() const { return static_cast<int>(envs_.size()); }

  // Cancels the queued jobs (kCancelled), asks each running job to stop after its current
  // candidate (RunTuning leaves it resumable in the store), and joins the worker threads.
  // Idempotent.
  void Shutdown();

 private:
  void Work(int gpu);
  // The queue `gpu`'s worker takes its next job from: its own when it has one, else the
  // longest queue of another GPU of its model; -1 when none has a job.
  int SourceFor(int gpu) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::vector<TuningEnv> envs_;
  const std::vector<std::string> models_;
  const int capacity_;
  FleetSync* const fleet_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::deque<std::shared_ptr<TuningJob>>> queues_ ABSL_GUARDED_BY(mu_);
  // GPUs that found themselves unusable running another GPU's job: they take only their
  // own until one of those succeeds, so a sick GPU cannot fail its healthy peers' jobs.
  std::vector<bool> takes_none_ ABSL_GUARDED_BY(mu_);
  // Queued or running jobs by dedup key.
  std::map<std::string, std::shared_ptr<TuningJob>> active_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_TUNING_QUEUE_H_
