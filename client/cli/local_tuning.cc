#include "client/cli/local_tuning.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/gpu/process_gpu.h"
#include "server/tuning/compile_request.h"

namespace ktune::cli {

absl::Status CheckTuneJobFlags(const TuneJobFlags& flags) {
  if (flags.budget < 0) return absl::InvalidArgumentError("--budget: must be >= 0");
  if (flags.time_s < 0) return absl::InvalidArgumentError("--time: must be >= 0");
  if (flags.min_sample_us < 0) return absl::InvalidArgumentError("--min-sample-us: must be >= 0");
  return absl::OkStatus();
}

TuneRequest JobRequest(const TuneJobFlags& flags, std::string template_name, DType dtype,
                       Shape shape) {
  TuneRequest request;
  request.template_name = std::move(template_name);
  request.dtype = dtype;
  request.shape = std::move(shape);
  request.strategy = flags.strategy;
  request.budget = flags.budget;
  request.time_limit_s = flags.time_s;
  request.seed = flags.seed;
  request.timing.set_min_sample_us(flags.min_sample_us);
  return request;
}

absl::StatusOr<LocalTuning> OpenLocalTuning(const TuneJobFlags& flags,
                                            const TemplateRegistry& registry) {
  LocalTuning t;
  t.db_path = flags.db.empty() ? DefaultDbPath() : flags.db;
  if (flags.db.empty()) KTUNE_RETURN_IF_ERROR(MakeDirs(DefaultCacheDir()));
  KTUNE_ASSIGN_OR_RETURN(t.store, store::OpenSqliteStore(t.db_path));
  const std::string cache_dir =
      flags.cache_dir.empty() ? absl::StrCat(DefaultCacheDir(), "/cubins") : flags.cache_dir;
  KTUNE_ASSIGN_OR_RETURN(t.cache, CubinCache::Open(cache_dir));
  KTUNE_ASSIGN_OR_RETURN(t.compiler, NewTemplateCompiler(registry, t.cache.get()));
  t.pool = std::make_unique<CompilePool>(t.compiler.get(), flags.threads);
  ProcessGpuOptions gpu_options;
  gpu_options.worker_path = flags.worker.empty() ? DefaultWorkerPath() : flags.worker;
  gpu_options.ordinal = flags.ordinal;
  KTUNE_ASSIGN_OR_RETURN(t.gpu, StartProcessGpu(gpu_options));
  return t;
}

}  // namespace ktune::cli
