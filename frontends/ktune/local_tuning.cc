#include "frontends/ktune/local_tuning.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"

namespace ktune::cli {

absl::Status CheckTuneJobFlags(const TuneJobFlags& flags) {
  if (absl::Status s = CheckSearchSettings(flags.search); !s.ok()) {
    // The engine names fields in its own words; the user typed flags.
    static const std::pair<const char*, const char*> kFlags[] = {
        {"strategy:", "--strategy:"},  {"budget:", "--budget:"},
        {"time limit:", "--time:"},    {"min gain:", "--min-gain:"},
        {"roofline stop:", "--roofline-stop:"}};
    for (const auto& [field, flag] : kFlags) {
      if (absl::StartsWith(s.message(), field)) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, s.message().substr(std::string_view(field).size())));
      }
    }
    return s;
  }
  if (flags.min_sample_us < 0) return absl::InvalidArgumentError("--min-sample-us: must be >= 0");
  return absl::OkStatus();
}

TuneRequest JobRequest(const TuneJobFlags& flags, std::string template_name, DType dtype,
                       Shape shape) {
  TuneRequest request;
  request.template_name = std::move(template_name);
  request.dtype = dtype;
  request.shape = std::move(shape);
  request.search = flags.search;
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
