#include "frontends/ktuned/request_validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/echo.h"
#include "server/base/status_macros.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "server/tuning/gpu_problem.h"

namespace ktune {

absl::StatusOr<KernelQuery> ValidateKernelQuery(
    const std::string& template_id, const std::string& dtype,
    const google::protobuf::Map<std::string, int64_t>& shape, int32_t gpu,
    const ValidationContext& ctx) {
  KernelQuery q;
  if (template_id.empty()) return absl::InvalidArgumentError("template_id: required");
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl = ctx.registry->Get(template_id);
  if (!tmpl.ok()) {
    return absl::Status(tmpl.status().code(),
                        absl::StrCat("template_id: ", tmpl.status().message()));
  }
  q.tmpl = *tmpl;
  if (dtype.empty()) return absl::InvalidArgumentError("dtype: required (f32, f16, bf16, f8e4m3 or f8e5m2)");
  std::optional<DType> parsed = ParseDType(dtype);
  if (!parsed || !IsRequestDType(*parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: unknown ", Echo(dtype), "; one of f32, f16, bf16, f8e4m3, f8e5m2"));
  }
  q.dtype = *parsed;
  if (shape.empty()) return absl::InvalidArgumentError("shape: required");
  q.shape = Shape(shape.begin(), shape.end());
  KTUNE_RETURN_IF_ERROR(ValidateRequest(*q.tmpl, q.dtype, q.shape));
  const int gpus = static_cast<int>(ctx.devices.size());
  if (gpu < 0 || gpu >= std::max(gpus, 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu: ordinal ", gpu, " out of range; this daemon has ", gpus,
                     " usable GPU", gpus == 1 ? "" : "s"));
  }
  q.gpu = gpu;
  const v1::DeviceInfo* device = gpus > 0 ? &ctx.devices[gpu] : nullptr;
  absl::StatusOr<Instance> reference = BindReference(
      q.tmpl, q.dtype, q.shape, device != nullptr ? TargetForDevice(*device) : ctx.target);
  if (!reference.ok()) {
    // The request is within the manifest's bounds: arithmetic that fails here (a division
    // by zero, an overflow) is the template's defect, not the caller's.
    return absl::InternalError(absl::StrCat(
        "template ", q.tmpl->name(), ": its manifest (",
        q.tmpl->source_path().substr(0, q.tmpl->source_path().rfind('.')),
        ".textproto) cannot be evaluated for shape ", ShapeString(q.shape), ": ",
        reference.status().message()));
  }
  q.reference = *std::move(reference);
  if (device != nullptr && device->total_memory_bytes() > 0) {
    // Sum in double: a shape within every dim's bounds may still overflow int64 bytes.
    double bytes = 0;
    for (const BoundArg& a : q.reference.args) {
      if (a.is_buffer) bytes += static_cast<double>(a.count) * DTypeSize(a.dtype);
    }
    const double room = ctx.memory_fraction * device->total_memory_bytes();
    if (bytes > room) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shape: the buffers need %.2f GiB; GPU %d has %.2f GiB, of which %.0f%% may be used",
          bytes / (1 << 30), gpu, device->total_memory_bytes() / double(1 << 30),
          100 * ctx.memory_fraction));
    }
  }
  return q;
}

absl::StatusOr<KernelQuery> ValidateGetKernel(const v1::GetKernelRequest& r,
                                              const ValidationContext& ctx) {
  if (!v1::Policy_IsValid(r.policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy: unknown value ", r.policy(), "; CACHE_ONLY, TUNE or FALLBACK"));
  }
  return ValidateKernelQuery(r.template_id(), r.dtype(), r.shape(), r.gpu(), ctx);
}

SearchSettings TuneSearchSettings(const v1::TuneRequest& r) {
  SearchSettings s;
  if (!r.strategy().empty()) s.strategy = r.strategy();
  s.budget = r.budget();
  s.time_limit_s = r.time_s();
  if (r.has_min_gain()) s.min_gain = r.min_gain();
  if (r.has_roofline_stop()) s.roofline_stop = r.roofline_stop();
  s.warm_start = !r.no_warm_start();
  return s;
}

absl::StatusOr<KernelQuery> ValidateTune(const v1::TuneRequest& r, const ValidationContext& ctx) {
  if (r.budget() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("budget: must be >= 0, got ", r.budget()));
  }
  KTUNE_RETURN_IF_ERROR(CheckSearchSettings(TuneSearchSettings(r)));
  return ValidateKernelQuery(r.template_id(), r.dtype(), r.shape(), r.gpu(), ctx);
}

}  // namespace ktune
