// A template bound to one dtype, shape and config: concrete kernel names, launch geometry,
// argument list, compile options and cost, everything later stages need without the
// manifest's expressions.
//
// Plain value; thread-compatible.
#ifndef KTUNE_SERVER_TEMPLATES_INSTANCE_H_
#define KTUNE_SERVER_TEMPLATES_INSTANCE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/manifest.pb.h"
#include "server/base/config.h"
#include "server/base/dtype.h"
#include "server/base/tensor_map.h"
#include "server/templates/kernel_template.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"

namespace ktune {

struct BoundArg {
  std::string name;
  bool is_buffer = false;
  // Buffers (the element type after dtype_for):
  DType dtype = DType::kF32;
  int64_t count = 0;  // elements
  v1::Buffer::Role role = v1::Buffer::ROLE_UNSPECIFIED;
  v1::Fill fill;
  int alignment = kDefaultBufferAlignment;  // bytes the kernels need of the address
  // Scalars: type "i32", "i64" or "f32", and the value. Tensor maps: "tensor_map".
  std::string scalar_type;
  int64_t int_value = 0;
  double number = 0;
  // Tensor maps: evaluated for this candidate (buffer_arg indexes Instance::args) and
  // checked with CheckTensorMap against its buffer's size.
  TensorMapDesc tensor_map;

  bool is_tensor_map() const { return scalar_type == "tensor_map"; }
};

struct BoundLaunch {
  std::string name_expression;  // e.g. "rmsnorm_kernel<__nv_bfloat16, 256, 8, 0, 1>"
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t shared_bytes = 0;
  std::vector<std::string> args;
  // The manifest's Launch.programmatic, kept only where the compile target is sm_90 or
  // later (griddepcontrol compiles to nothing before).
  bool programmatic = false;
};

struct Instance {
  std::shared_ptr<const KernelTemplate> tmpl;
  DType dtype = DType::kF32;
  Shape shape;
  Config config;
  std::vector<BoundLaunch> launches;  // the active ones (`when` nonzero), in order
  std::vector<BoundArg> args;         // every manifest arg, in manifest order
  int64_t max_threads = 0;            // KTUNE_MAX_THREADS
  int64_t bytes = 0;                  // cost model
  int64_t flops = 0;
  // The request dtype's tolerance, atol scaled by sqrt(atol_scale) when the manifest has one.
  double atol = 0;
  double rtol = 0;
  TargetInfo target;  // what it was bound for, so another config can be bound alike

  // Distinct name expressions of the launches, in order, for nvrtcAddNameExpression.
  std::vector<std::string> NameExpressions() const;
  // NVRTC options that come from the config: the target, the launch-bounds defines,
  // maxrregcount and fast math. The compiler adds its own (language level, include paths).
  std::vector<std::string> CompileOptions() const;
};

// Binding either gives an instance or says why the config is not a candidate for this
// shape (a failed constraint, a block over the device's limit, ...).
struct BindResult {
  std::optional<Instance> instance;
  std::string rejected_because;  // empty iff instance is set
};

// The values every manifest expression of a candidate may read before its launches are
// bound: the shape's dims, the config's params (those it has), its knobs and the target's
// constants (KTUNE_MAX_THREADS comes with the blocks, later).
Scope BaseScope(DType dtype, const Shape& shape, const Config& config, const TargetInfo& target);

// Binds the candidate launches. REQUIRES: ValidateRequest(*tmpl, dtype, shape) is OK and
// config names exactly the template's params. A Status error means the manifest cannot be
// evaluated for this point (division by zero, overflow): a template defect, never a
// rejection.
absl::StatusOr<BindResult> Bind(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                const Shape& shape, const Config& config,
                                const TargetInfo& target);

// Binds the reference launches: params at their defaults overridden by reference_params,
// knobs at their plain values on the portable target. kInvalidArgument if the reference
// itself is rejected for this shape (a manifest defect).
absl::StatusOr<Instance> BindReference(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                       const Shape& shape, const TargetInfo& target);

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_INSTANCE_H_
