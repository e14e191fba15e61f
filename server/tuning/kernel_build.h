// One candidate made ready to run: bound for a shape, compiled, its binary for the GPU and
// its launch specs for an artifact. The tuning job's finalists, FALLBACK's default config and
// `ktune compile` all go through here, so the sequence is written once.
//
// Pure functions over a thread-safe Compiler; thread-safe.
#ifndef KTUNE_SERVER_TUNING_KERNEL_BUILD_H_
#define KTUNE_SERVER_TUNING_KERNEL_BUILD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/base/config.h"
#include "server/base/launch_spec.h"
#include "server/compile/compiler.h"
#include "server/templates/instance.h"
#include "server/templates/target.h"

namespace ktune {

// What became of one config. A config that does not bind or does not compile is a result
// (each caller words it for its own user), not an error.
struct BuiltKernel {
  // Non-empty when the config is not a candidate for the shape; nothing else is set then.
  std::string rejected_because;
  Instance instance;
  // !compiled.ok: compiled.log says why, and there is no binary nor launches.
  CompileResult compiled;
  v1::KernelBinary binary;
  std::vector<LaunchSpec> launches;

  bool ok() const { return rejected_because.empty() && compiled.ok; }
};

// Compiles `instance` and, when it compiles, builds its binary and launch specs. Errors: the
// compiler's own (it could not run) and kInternal when the compile result lacks a kernel
// the instance launches.
absl::StatusOr<BuiltKernel> CompileKernel(Instance instance, Compiler& compiler);

// Binds `config` for the template, dtype, shape and target, then CompileKernel. Errors:
// Bind's (a manifest that cannot be evaluated) and CompileKernel's.
absl::StatusOr<BuiltKernel> BuildKernel(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                        const Shape& shape, const Config& config,
                                        const TargetInfo& target, Compiler& compiler);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_KERNEL_BUILD_H_
