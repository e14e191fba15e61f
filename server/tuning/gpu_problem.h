// Where templates meet the GPU: a bound reference becomes the Problem every candidate is
// checked against, a compiled candidate becomes a KernelBinary, and a device's description
// (live or stored) becomes the search space's target.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_TUNING_GPU_PROBLEM_H_
#define KTUNE_SERVER_TUNING_GPU_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/base/launch_spec.h"
#include "server/compile/compiler.h"
#include "server/store/store.h"
#include "server/templates/instance.h"
#include "server/templates/target.h"

namespace ktune {

// The launches of `instance` with the lowered names `compiled` gave them. kInternal if a
// launch's name expression is missing from the compile result.
absl::StatusOr<v1::KernelBinary> BuildKernelBinary(const Instance& instance,
                                                   const CompileResult& compiled);

// The problem for a job: the arguments (from the reference's binding: every binding of one
// shape and dtype has the same arguments), the reference kernel, the template's tolerance
// for the dtype, and the seed of the random inputs.
absl::StatusOr<v1::Problem> BuildProblem(const Instance& reference,
                                         const CompileResult& reference_compiled, uint64_t seed);

// The same launches as an artifact's launch specs (lowered names, geometry, arg names).
std::vector<LaunchSpec> LaunchSpecs(const Instance& instance, const v1::KernelBinary& binary);

// The launch spec of bound launch `l`, its kernel found in the cubin as `lowered_name`.
LaunchSpec LaunchSpecFor(const BoundLaunch& l, std::string lowered_name);

// The same for the kernel of a stored launch (another shape's entry, rebound for this one):
// its lowered name, and programmatic only where both are. The cubin is the stored entry's,
// and one compiled from an older source (a stale entry) may not wait for the kernel before
// it however the template's launch reads now.
LaunchSpec LaunchSpecFor(const BoundLaunch& l, const LaunchSpec& stored);

// The search space's view of a device.
TargetInfo TargetForDevice(const v1::DeviceInfo& device);
// The search space's view of a device known only from the store (a compile-only host):
// its architecture and SM count over `base`, whose other limits stay.
TargetInfo TargetForStoredDevice(const store::Device& device, TargetInfo base);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_GPU_PROBLEM_H_
