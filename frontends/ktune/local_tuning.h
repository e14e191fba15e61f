// What `ktune tune` tunes with in this process, for one key or a spec's keys: the flags of a
// tuning job, and the engine and ktune-worker child they open.
#ifndef KTUNE_CLIENT_CLI_LOCAL_TUNING_H_
#define KTUNE_CLIENT_CLI_LOCAL_TUNING_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine.h"
#include "server/gpu/gpu.h"
#include "server/templates/registry.h"
#include "server/tuning/tuning_job.h"

namespace ktune::cli {

// The flags every tuning job takes, with one key or a spec (and, but for the first four and
// quiet, only in this process).
struct TuneJobFlags {
  SearchSettings search;  // --strategy, --budget, --time, --min-gain, --roofline-stop
  // The search fields given on the command line ("strategy", "budget", "time", "min_gain",
  // "roofline_stop", "warm_start"): they win over a spec's search block.
  std::set<std::string> search_flags;
  uint64_t seed = 1;
  bool quiet = false;  // no progress display
  std::string db;
  std::string templates_dir;
  std::string cache_dir;
  std::string worker;
  int ordinal = 0;
  // --gpus: "" tunes on --gpu alone; "all" or "0,1,..." spreads a spec's keys over those GPUs
  // (those of the same device model as the first: the keys are stored under one model).
  std::string gpus;
  int threads = 0;
  // --idle-compile auto|on|off: guided and random jobs compile the rest of their space on idle
  // cores (EngineOptions::idle_compiles).
  std::string idle_compile = "auto";
  // The worker batches back-to-back runs after one L2 flush until a sample lasts this long
  // (0 = its default, 20 us); a tiny value times every run alone after its own flush.
  double min_sample_us = 0;
  // --decide-sample-us: the same for the runs that decide the winner (promotion and the
  // final round); 0 = min_sample_us.
  double decision_min_sample_us = 0;
};

// kInvalidArgument naming --strategy, --budget, --time, --min-gain, --roofline-stop,
// --min-sample-us or --decide-sample-us when out of range.
absl::Status CheckTuneJobFlags(const TuneJobFlags& flags);

// A tuning request for one key with the job's strategy, budget, time limit, seed and timing.
TuneRequest JobRequest(const TuneJobFlags& flags, std::string template_name, DType dtype,
                       Shape shape);

// The engine (server/engine/engine.h, the one ktuned opens too) with the one GPU that
// `ktune tune` uses in this process. The GPU is declared last, so it closes first.
struct LocalTuning {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Gpu> gpu;
  // With --gpus: the other GPUs of gpu's device model, a ktune-worker each.
  std::vector<std::unique_ptr<Gpu>> more_gpus;

  TuningEnv Env() const { return engine->Env(gpu.get()); }
};

// "all" -> 0..63; "0, 2" -> {0, 2}; kInvalidArgument naming --gpus otherwise.
absl::StatusOr<std::vector<int>> ParseGpuList(const std::string& text);

// Starts the worker (--worker, --gpu) and asks it for its GPU, failing there (before any file
// is touched) on a host without one; then opens the engine over `registry` with the store
// (--db, else the daemon's default file), the cubin cache (--cache-dir, else the default)
// and the compile pool (--threads), and with --gpus a worker for each of the others of the
// same model (kInvalidArgument naming --gpus for a list that is not "all" or ordinals).
absl::StatusOr<LocalTuning> OpenLocalTuning(const TuneJobFlags& flags,
                                            std::unique_ptr<TemplateRegistry> registry);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_LOCAL_TUNING_H_
