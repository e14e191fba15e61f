#include "server/tuning/kernel_build.h"

#include "server/base/status_macros.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"

namespace ktune {

absl::StatusOr<BuiltKernel> CompileKernel(Instance instance, Compiler& compiler) {
  BuiltKernel built;
  KTUNE_ASSIGN_OR_RETURN(built.compiled, compiler.Compile(BuildCompileRequest(instance)));
  built.instance = std::move(instance);
  if (!built.compiled.ok) return built;
  KTUNE_ASSIGN_OR_RETURN(built.binary, BuildKernelBinary(built.instance, built.compiled));
  built.launches = LaunchSpecs(built.instance, built.binary);
  return built;
}

absl::StatusOr<BuiltKernel> BuildKernel(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                        const Shape& shape, const Config& config,
                                        const TargetInfo& target, Compiler& compiler) {
  KTUNE_ASSIGN_OR_RETURN(BindResult bound, Bind(std::move(tmpl), dtype, shape, config, target));
  if (!bound.instance) {
    BuiltKernel rejected;
    rejected.rejected_because = std::move(bound.rejected_because);
    return rejected;
  }
  return CompileKernel(*std::move(bound.instance), compiler);
}

}  // namespace ktune
