#include "frontends/ktune/local_tuning.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/base/echo.h"
#include "server/base/status_macros.h"
#include "server/gpu/device_model.h"

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
  if (flags.decision_min_sample_us < 0) {
    return absl::InvalidArgumentError("--decide-sample-us: must be >= 0");
  }
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
  request.decision_min_sample_us = flags.decision_min_sample_us;
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
  KTUNE_ASSIGN_OR_RETURN(options.idle_compiles,
                         ParseAutoSwitch("--idle-compile", flags.idle_compile));
  LocalTuning t;
  // The GPU first: without one nothing can be tuned, and the store (a new file, perhaps)
  // and the cubin cache are left as they were.
  KTUNE_ASSIGN_OR_RETURN(t.gpu, ProcessGpuFactory(flags.worker)(flags.ordinal));
  KTUNE_RETURN_IF_ERROR(t.gpu->Info().status());
  KTUNE_ASSIGN_OR_RETURN(t.engine, OpenEngine(std::move(options)));
  if (flags.gpus.empty()) return t;
  KTUNE_ASSIGN_OR_RETURN(std::vector<int> ordinals, ParseGpuList(flags.gpus));
  // The first GPU names the device model; a GPU of another model would store its winners
  // under keys the others never look up, so it is left out (and said so).
  KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo first, t.gpu->Info());
  const std::string model = DeviceModelKey(first);
  for (int ordinal : ordinals) {
    if (ordinal == flags.ordinal) continue;
    KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Gpu> gpu, t.engine->gpu_factory(ordinal));
    absl::StatusOr<v1::DeviceInfo> info = gpu->Info();
    if (!info.ok()) {
      if (flags.gpus == "all") break;  // past the last GPU
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: GPU ", ordinal, ": ", info.status().message()));
    }
    if (DeviceModelKey(*info) != model) {
      std::fprintf(stderr, "ktune: --gpus: GPU %d is a %s, not a %s like GPU %d: not used\n",
                   ordinal, DeviceModelKey(*info).c_str(), model.c_str(), flags.ordinal);
      continue;
    }
    t.more_gpus.push_back(std::move(gpu));
  }
  return t;
}

absl::StatusOr<std::vector<int>> ParseGpuList(const std::string& text) {
  // "all": every ordinal up to the first that has no GPU (OpenLocalTuning stops there).
  constexpr int kMaxGpus = 64;
  std::vector<int> out;
  if (text == "all") {
    for (int i = 0; i < kMaxGpus; ++i) out.push_back(i);
    return out;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int ordinal = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &ordinal) || ordinal < 0 ||
        ordinal >= kMaxGpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus: ", Echo(item), " is not a GPU ordinal; expected all or e.g. 0,1"));
    }
    if (std::find(out.begin(), out.end(), ordinal) == out.end()) out.push_back(ordinal);
  }
  return out;
}

}  // namespace ktune::cli
