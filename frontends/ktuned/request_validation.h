// Checks a GetKernel/Tune request at the service's edge and turns it into plain values.
// Every error names the field: INVALID_ARGUMENT ("shape: missing dim 'n' of template tiny"),
// NOT_FOUND for an unknown template.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_SERVICE_REQUEST_VALIDATION_H_
#define KTUNE_SERVER_SERVICE_REQUEST_VALIDATION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "ktune/v1/worker.pb.h"
#include "server/base/dtype.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"
#include "server/tuning/kernel_query.h"
#include "server/tuning/tuning_job.h"

namespace ktune {

// What the checks need to know of the daemon.
struct ValidationContext {
  const TemplateRegistry* registry = nullptr;
  // The usable GPUs by ordinal; empty on a compile-only host (then only gpu 0 is accepted,
  // `target` binds the reference and the buffers' size is not checked).
  std::vector<v1::DeviceInfo> devices;
  TargetInfo target;
  // Fraction of the GPU's memory the buffers may take: the rest is the driver's, the
  // context's and the caller's own.
  double memory_fraction = 0.9;
};

// template_id, dtype, shape (every dim, within bounds, buffers fitting the GPU) and gpu.
absl::StatusOr<KernelQuery> ValidateKernelQuery(const std::string& template_id,
                                                const std::string& dtype,
                                                const google::protobuf::Map<std::string, int64_t>& shape,
                                                int32_t gpu, const ValidationContext& ctx);

// ValidateKernelQuery plus the policy.
absl::StatusOr<KernelQuery> ValidateGetKernel(const v1::GetKernelRequest& request,
                                              const ValidationContext& ctx);
// ValidateKernelQuery plus the search settings (strategy, budget, time, stop rules).
absl::StatusOr<KernelQuery> ValidateTune(const v1::TuneRequest& request,
                                         const ValidationContext& ctx);

// The request's search settings, unset fields at their defaults.
SearchSettings TuneSearchSettings(const v1::TuneRequest& request);

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_REQUEST_VALIDATION_H_
