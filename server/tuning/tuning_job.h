// A tuning job: find the fastest correct candidate of one template for one dtype, shape
// and GPU, record every trial, and store the winner.
//
// The job sees the compiler, the GPU and the store only through their interfaces, so CI
// runs it with fakes (tests/testing/fakes.h). Compiling the next batch overlaps
// measuring this one; only this job touches `gpu` while it runs. RunTuning is
// thread-compatible: concurrent jobs need their own Gpu each.
#ifndef KTUNE_SERVER_TUNING_TUNING_JOB_H_
#define KTUNE_SERVER_TUNING_TUNING_JOB_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/base/dtype.h"
#include "server/base/idle_pool.h"
#include "server/compile/compile_pool.h"
#include "server/gpu/gpu.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/templates/shape.h"
#include "server/tuning/search_settings.h"

namespace ktune {

struct TuneRequest {
  std::string template_name;
  DType dtype = DType::kF32;
  Shape shape;
  SearchSettings search;
  uint64_t seed = 1;  // the guided and random strategies, and the problem's inputs
  int batch_size = 0;                   // candidates compiled together; 0 = 2 x pool threads
  v1::TimingOptions timing;
  // The final round: the fastest `finalists` candidates are measured `final_rounds` more
  // times each, interleaved, and the winner is the lowest median of those. One lucky
  // sample (clock boost, a quiet neighbour) then cannot crown a candidate, so repeated
  // tunes agree. 0 turns it off.
  int finalists = 3;
  int final_rounds = 3;
  // Timing in rounds (successive halving), for the guided and random strategies: every
  // candidate is first timed briefly (at most 10 samples, 100 ms), then the fastest third
  // of them (at least 2 x finalists, at most 24) again with `timing`, and the final round
  // picks among those. A short screening costs most where the adaptive timing would run
  // to its 200 samples: noisy few-microsecond kernels. Exhaustive times every candidate
  // with `timing` (it is the reference the others are held to).
  bool timing_rounds = true;
  // The sample length of the runs that decide the winner (promotion and the final round),
  // in us; 0 = timing's. Kernels of a few us timed in samples of 20 us (a batch of 4-7 runs
  // after one L2 flush) carry a state of about 1 us per sample that differs between module
  // loads and processes: longer samples share it among more runs.
  double decision_min_sample_us = 0;
  // With a fleet tier (fleet_sync.h): when another host holds the key's lease, end at once
  // with kAborted instead of waiting for its winner (`ktune tune --spec` then tunes other
  // keys and comes back to this one).
  bool yield_to_lease = false;
};

struct TuneProgress {
  int64_t done = 0;   // candidates finished, those of an earlier run of a resumed job included
  int64_t total = 0;  // candidates planned
  double elapsed_s = 0;
  double eta_s = 0;   // from this run's pace; 0 until one candidate is done
  const store::Trial* last = nullptr;  // the trial just finished
  const store::Trial* best = nullptr;  // fastest ok trial so far, or null
};

// Where one run's wall time went, in seconds. The search's compile waits, measurements,
// store writes and strategy calls are summed per candidate; what the phases leave of
// `TuneResult::seconds` is the binding of candidates, the trials read back after the
// search and the progress callback.
struct TunePhases {
  double prepare = 0;       // template, device, space, features, warm start, the job's row
  double reference = 0;     // the reference compiled and run on the GPU (SetProblem)
  double compile_wait = 0;  // the search waiting for the compile pool's candidates
  double measure = 0;       // the search's measurements (screening, under timing rounds)
  double store = 0;         // the search's trial and progress writes
  double strategy = 0;      // the strategy choosing batches and taking in results
  double promote = 0;       // timing rounds: the leaders timed again in full
  double final_round = 0;   // the finalists compiled again (a cache read) and re-timed
  double commit = 0;        // the winner's entry stored
};

// The phases as (name, seconds) in the order a run goes through them, the names as
// `ktune tune` prints them; empty when none was timed (a result through a daemon).
std::vector<std::pair<std::string, double>> PhaseList(const TunePhases& phases);

struct TuneResult {
  store::Entry entry;               // the winner as stored
  std::vector<store::Trial> trials;  // every trial of the job, fastest ok first
  int64_t resumed_trials = 0;       // trials found from an earlier, interrupted run
  double seconds = 0;               // this run's wall time
  std::string strategy;             // the strategy's name, as the job records it
  std::string stop_reason;          // why the search ended, as the job records it
  int64_t space_size = 0;           // the key's valid candidates
  TunePhases phases;                // this run's, where it ran here (a daemon reports none)
};

struct TuningEnv {
  const TemplateRegistry* registry = nullptr;
  Compiler* compiler = nullptr;  // for the reference and the winner's re-compile
  CompilePool* pool = nullptr;   // over the same compiler
  Gpu* gpu = nullptr;
  store::Store* store = nullptr;
  // Where a guided or random job queues the compiles of the candidates it has not asked
  // for yet (into the compiler's cache, on otherwise idle cores); null: none. One owner
  // per `gpu`.
  IdlePool* idle = nullptr;
};

// Returns false to cancel the job: it stops after the current candidate, leaves its
// trials (a later RunTuning of the same key resumes from them) and returns kCancelled.
using ProgressCallback = std::function<bool(const TuneProgress&)>;

// Runs (or resumes) the job. kInvalidArgument for a bad request (naming the field),
// kUnavailable when the GPU cannot be used, kFailedPrecondition when no candidate passed
// (the trials are kept) or the template's reference does not compile.
absl::StatusOr<TuneResult> RunTuning(const TuneRequest& request, const TuningEnv& env,
                                     const ProgressCallback& on_progress = nullptr);

// Derives a trial's metrics from what the compiler and the GPU reported and the cost model
// (bytes and flops of one run) against the device's copy ceiling (GB/s).
TrialMetrics DeriveMetrics(const CompileResult& compiled, int64_t dynamic_smem,
                           const v1::Measurement& m, int64_t bytes, int64_t flops,
                           double copy_gbps);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_TUNING_JOB_H_
