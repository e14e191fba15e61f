// Where `ktune tune` looks keys up and tunes them, for one key and for a spec alike: in this
// process on the engine (server/engine/engine.h) and the local GPU, or through a running
// ktuned (--daemon TARGET). Both answer in the engine's terms (store::Entry, TuneResult),
// so the front end prints the same way whichever tuned.
//
// Not thread-safe; one `ktune tune` drives one.
#ifndef KTUNE_CLIENT_CLI_TUNE_BACKEND_H_
#define KTUNE_CLIENT_CLI_TUNE_BACKEND_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frontends/ktune/local_tuning.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/tuning_job.h"
#include "server/tuning/tuning_spec.h"

namespace ktune::cli {

// A job's progress, as both backends report it.
struct JobProgress {
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;
  double eta_s = 0;
  bool has_best = false;    // some candidate passed
  double best_time_ns = 0;  // 0: none passed yet
  std::string best_params;
  std::string last_outcome;  // of the candidate just finished; "" when not known
};
using JobProgressFn = std::function<void(const JobProgress&)>;

class TuneBackend {
 public:
  virtual ~TuneBackend() = default;
  // "local", or the daemon's target.
  virtual std::string where() const = 0;
  // Where winners are stored: the store file, or "the ktuned at TARGET".
  virtual std::string stored_in() const = 0;
  // Names the device model keys are looked up under (the local GPU's Info(); nothing to do
  // through a daemon). REQUIRES: called once before Fresh.
  virtual absl::Status Prepare() = 0;
  // The key's entry when it exists and is fresh (same template source and NVRTC version);
  // nullopt when it must be tuned.
  virtual absl::StatusOr<std::optional<store::Entry>> Fresh(const SpecKey& key) = 0;
  // Tunes the key (a daemon re-tunes even a fresh one). Through a daemon the result holds
  // the winner only: no trials, no resumed count; seconds is the wall time of the call.
  // `yield_to_lease`: a daemon with a fleet tier ends with kAborted at once when another
  // host is tuning the key (the local backend has no fleet tier and ignores it).
  virtual absl::StatusOr<TuneResult> Tune(const SpecKey& key, const JobProgressFn& progress,
                                          bool yield_to_lease) = 0;
  // How many keys may be tuned at once (the local engine over --gpus: one per GPU); above 1,
  // Tune is thread-safe.
  virtual int Parallelism() const { return 1; }
};

// kInvalidArgument naming --time or --min-sample-us when given with a daemon, whose Tune
// takes neither.
absl::Status CheckDaemonFlags(const std::string& daemon, const TuneJobFlags& job);

// `daemon` empty: the engine over `registry` and the job flags' store, cache, worker and GPU
// (OpenLocalTuning). Otherwise a client of the ktuned at `daemon` (bearer `token`), checked
// by one ListTemplates so that a missing daemon fails here, naming the target.
absl::StatusOr<std::unique_ptr<TuneBackend>> OpenTuneBackend(
    const std::string& daemon, const std::string& token, const TuneJobFlags& job,
    std::unique_ptr<TemplateRegistry> registry);

// The exit status for a backend that did not open: Fail(status) for the local engine; an
// unreachable daemon is a failure to do the work, not bad input (kExitFailure).
int FailOpen(const std::string& daemon, const absl::Status& status);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_TUNE_BACKEND_H_
