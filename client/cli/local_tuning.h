// What `ktune tune` tunes with in this process, for one key or a spec's keys: the flags of a
// tuning job, and the store file, cubin cache, NVRTC, compile pool and ktune-worker child
// they open.
#ifndef KTUNE_CLIENT_CLI_LOCAL_TUNING_H_
#define KTUNE_CLIENT_CLI_LOCAL_TUNING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/compile/compile_pool.h"
#include "server/compile/compiler.h"
#include "server/compile/cubin_cache.h"
#include "server/gpu/gpu.h"
#include "server/store/store.h"
#include "server/templates/registry.h"
#include "server/tuning/tuning_job.h"

namespace ktune::cli {

// The flags every tuning job takes, with one key or a spec (and, but for the first four and
// quiet, only in this process).
struct TuneJobFlags {
  std::string strategy = "exhaustive";
  int64_t budget = 0;
  double time_s = 0;
  uint64_t seed = 1;
  bool quiet = false;  // no progress display
  std::string db;
  std::string templates_dir;
  std::string cache_dir;
  std::string worker;
  int ordinal = 0;
  int threads = 0;
  // The worker batches back-to-back runs after one L2 flush until a sample lasts this long
  // (0 = its default, 20 us); a tiny value times every run alone after its own flush.
  double min_sample_us = 0;
};

// kInvalidArgument naming --budget, --time or --min-sample-us when negative.
absl::Status CheckTuneJobFlags(const TuneJobFlags& flags);

// A tuning request for one key with the job's strategy, budget, time limit, seed and timing.
TuneRequest JobRequest(const TuneJobFlags& flags, std::string template_name, DType dtype,
                       Shape shape);

// Members in the order they are opened, so they close in reverse (the pool before the
// compiler it uses).
struct LocalTuning {
  std::string db_path;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<CubinCache> cache;
  std::unique_ptr<Compiler> compiler;
  std::unique_ptr<CompilePool> pool;
  std::unique_ptr<Gpu> gpu;

  TuningEnv Env(const TemplateRegistry& registry) const {
    return TuningEnv{&registry, compiler.get(), pool.get(), gpu.get(), store.get()};
  }
};

// Opens the store (--db, else the daemon's default file), the cubin cache (--cache-dir, else
// the default), NVRTC over `registry`, the compile pool and the worker (--worker, --gpu).
absl::StatusOr<LocalTuning> OpenLocalTuning(const TuneJobFlags& flags,
                                            const TemplateRegistry& registry);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_LOCAL_TUNING_H_
