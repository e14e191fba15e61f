#include "frontends/ktune/local_tuning.h"

#include <utility>

#include "server/base/status_macros.h"

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
                                            std::unique_ptr<TemplateRegistry> registry) {
  EngineOptions options;
  options.registry = std::move(registry);
  options.db = flags.db;
  options.cache_dir = flags.cache_dir;
  options.worker = flags.worker;
  options.compile_threads = flags.threads;
  LocalTuning t;
  KTUNE_ASSIGN_OR_RETURN(t.engine, OpenEngine(std::move(options)));
  KTUNE_ASSIGN_OR_RETURN(t.gpu, t.engine->gpu_factory(flags.ordinal));
  return t;
}

}  // namespace ktune::cli
