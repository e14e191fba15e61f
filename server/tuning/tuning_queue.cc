#include "server/tuning/tuning_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/outcome.h"
#include "server/tuning/fleet_sync.h"

namespace ktune {
namespace {

// Everything that makes two requests the same job (TuneRequest's other fields are the
// daemon's, never the caller's).
std::string DedupKey(const TuneRequest& r, int gpu) {
  return absl::StrCat(gpu, "|", r.template_name, "|", DTypeName(r.dtype), "|",
                      ShapeString(r.shape), "|", SearchSettingsString(r.search), "|",
                      r.yield_to_lease);
}

JobProgress CopyProgress(int64_t job_id, const TuneProgress& p) {
  JobProgress e;
  e.job_id = job_id;
  e.done = p.done;
  e.total = p.total;
  e.elapsed_s = p.elapsed_s;
  e.eta_s = p.eta_s;
  if (p.best != nullptr) {
    e.best_params = p.best->config.params;
    e.best_time_ns = p.best->metrics.time_ns;
  }
  if (p.last != nullptr) e.last_outcome = std::string(OutcomeName(p.last->outcome));
  return e;
}

}  // namespace

TuningQueue::TuningQueue(std::vector<TuningEnv> envs, int capacity, FleetSync* fleet,
                         std::vector<std::string> models)
    : envs_(std::move(envs)),
      models_(std::move(models)),
      capacity_(capacity),
      fleet_(fleet),
      queues_(envs_.size()),
      takes_none_(envs_.size(), false) {
  for (int i = 0; i < static_cast<int>(envs_.size()); ++i) {
    workers_.emplace_back([this, i] { Work(i); });
  }
}

TuningQueue::~TuningQueue() { Shutdown(); }

absl::StatusOr<std::shared_ptr<TuningJob>> TuningQueue::Submit(const TuneRequest& request,
                                                               int gpu) {
  if (gpu < 0 || gpu >= gpus()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu: ordinal ", gpu, " out of range; this daemon has ", gpus(), " GPU",
                     gpus() == 1 ? "" : "s"));
  }
  const std::string key = DedupKey(request, gpu);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the tuning queue is shutting down");
  if (auto it = active_.find(key); it != active_.end()) return it->second;
  int waiting = 0;
  for (const auto& q : queues_) waiting += static_cast<int>(q.size());
  if (waiting >= capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("tuning queue is full (", waiting, " jobs)"));
  }
  std::shared_ptr<TuningJob> job(new TuningJob(next_id_++, gpu, request, key));
  active_.emplace(key, job);
  queues_[gpu].push_back(job);
  return job;
}

int TuningQueue::queued() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& q : queues_) n += static_cast<int>(q.size());
  return n;
}

int TuningQueue::SourceFor(int gpu) const {
  if (!queues_[gpu].empty()) return gpu;
  if (models_.size() != queues_.size() || takes_none_[gpu]) return -1;
  int source = -1;
  for (int g = 0; g < static_cast<int>(queues_.size()); ++g) {
    if (g == gpu || models_[g] != models_[gpu] || queues_[g].empty()) continue;
    if (source < 0 || queues_[g].size() > queues_[source].size()) source = g;
  }
  return source;
}

void TuningQueue::Work(int gpu) {
  for (;;) {
    std::shared_ptr<TuningJob> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, gpu]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || SourceFor(gpu) >= 0;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      const int source = SourceFor(gpu);
      job = queues_[source].front();
      queues_[source].pop_front();
    }
    auto progress = [this, &job](const TuneProgress& p) {
      job->Publish(CopyProgress(job->id(), p));
      absl::MutexLock lock(&mu_);
      return !stopping_;  // false cancels: the job stops and stays resumable
    };
    auto run = [&] { return RunTuning(job->request(), envs_[gpu], progress); };
    auto stopping = [this] {
      absl::MutexLock lock(&mu_);
      return stopping_;
    };
    absl::StatusOr<TuneResult> result =
        fleet_ == nullptr ? run() : fleet_->RunLeased(job->request(), envs_[gpu], run, stopping);
    {
      absl::MutexLock lock(&mu_);
      if (job->gpu() != gpu && result.status().code() == absl::StatusCode::kUnavailable &&
          !stopping_) {
        // This GPU cannot run jobs now: the one it took goes back, first in its own GPU's
        // line (its trials so far are in the store: it resumes there).
        takes_none_[gpu] = true;
        queues_[job->gpu()].push_front(job);
        continue;
      }
      if (job->gpu() == gpu && result.ok()) takes_none_[gpu] = false;
    }
    {
      // Off the active list first, so a request arriving after the result starts afresh
      // (and finds the stored entry) rather than joining a finished job.
      absl::MutexLock lock(&mu_);
      active_.erase(job->key_);
    }
    job->Finish(std::move(result));
  }
}

void TuningQueue::Shutdown() {
  std::vector<std::shared_ptr<TuningJob>> cancelled;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    for (auto& q : queues_) {
      for (auto& job : q) {
        active_.erase(job->key_);
        cancelled.push_back(job);
      }
      q.clear();
    }
  }
  for (auto& job : cancelled) {
    job->Finish(absl::CancelledError(
        absl::StrCat("tuning job ", job->id(), " cancelled: the daemon is shutting down")));
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  absl::MutexLock lock(&mu_);
  workers_.clear();
}

}  // namespace ktune
