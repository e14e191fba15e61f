#include "server/templates/instance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/base/status_macros.h"
#include "server/templates/shape.h"

namespace ktune {

Scope BaseScope(DType dtype, const Shape& shape, const Config& config, const TargetInfo& target) {
  Scope scope;
  scope.dtype = dtype;
  for (const auto& [name, value] : shape) scope.values[name] = value;
  for (const auto& [name, value] : config.params) scope.values[name] = value;
  scope.values["KTUNE_MAXRREG"] = config.knobs.maxrregcount;
  scope.values["KTUNE_MIN_BLOCKS"] = config.knobs.min_blocks;
  scope.values["KTUNE_FAST_MATH"] = config.knobs.fast_math ? 1 : 0;
  scope.values["KTUNE_SM"] = target.sm;
  scope.values["KTUNE_ARCH_SPECIFIC"] =
      target.has_arch_specific && config.knobs.target == target.ArchSpecificTarget() ? 1 : 0;
  scope.values["KTUNE_SM_COUNT"] = target.sm_count;
  scope.values["KTUNE_THREADS_PER_SM"] = target.max_threads_per_sm;
  scope.values["KTUNE_REGS_PER_SM"] = target.registers_per_sm;
  return scope;
}

namespace {

using Launches = google::protobuf::RepeatedPtrField<v1::Launch>;

// Substitutes {dtype} and {PARAM} in a name expression. The manifest was validated, so
// every placeholder is known.
std::string NameExpression(const std::string& pattern, DType dtype, const Config& config) {
  std::vector<std::pair<std::string, std::string>> subs;
  subs.emplace_back("{dtype}", std::string(DTypeCudaName(dtype)));
  for (const auto& [name, value] : config.params) {
    subs.emplace_back(absl::StrCat("{", name, "}"), absl::StrCat(value));
  }
  return absl::StrReplaceAll(pattern, subs);
}


// Sets which buffer tensor map `tm` covers (name, index in `args`, element type), without
// its numbers: what a map no launch takes keeps. -1 as the index if `args` has no such
// buffer (the manifest's validation rules that out).
void LinkTensorMap(const v1::TensorMap& tm, const std::vector<BoundArg>& args,
                   TensorMapDesc* out) {
  for (size_t j = 0; j < args.size(); ++j) {
    if (args[j].is_buffer && args[j].name == tm.buffer()) {
      out->buffer_arg = static_cast<int>(j);
      out->dtype = args[j].dtype;
    }
  }
  out->buffer = tm.buffer();
}

// Evaluates tensor map `tm` into `*out` and checks it against its buffer in `args` (bound
// already). Returns why the candidate is left out ("box[0]: 512 is outside 1..256"), or "".
absl::StatusOr<std::string> BindTensorMap(const KernelTemplate& t, const v1::TensorMap& tm,
                                          const Scope& scope, const std::vector<BoundArg>* args,
                                          TensorMapDesc* out) {
  LinkTensorMap(tm, *args, out);
  if (out->buffer_arg < 0) {
    return absl::InternalError(absl::StrCat("tensor map over unknown buffer '", tm.buffer(), "'"));
  }
  const BoundArg& buffer = (*args)[static_cast<size_t>(out->buffer_arg)];
  auto eval = [&](const google::protobuf::RepeatedPtrField<std::string>& in,
                  std::vector<int64_t>* values) -> absl::Status {
    values->clear();
    for (const std::string& e : in) {
      KTUNE_ASSIGN_OR_RETURN(int64_t v, t.Evaluate(e, scope));
      values->push_back(v);
    }
    return absl::OkStatus();
  };
  KTUNE_RETURN_IF_ERROR(eval(tm.dims(), &out->dims));
  KTUNE_RETURN_IF_ERROR(eval(tm.strides(), &out->strides));
  KTUNE_RETURN_IF_ERROR(eval(tm.box(), &out->box));
  KTUNE_RETURN_IF_ERROR(eval(tm.element_strides(), &out->element_strides));
  if (out->element_strides.empty()) out->element_strides.assign(out->dims.size(), 1);
  out->swizzle = tm.swizzle();
  out->interleave = tm.interleave();
  out->l2_promotion = tm.l2_promotion();
  out->oob_fill = tm.oob_fill();
  absl::Status s = CheckTensorMap(*out, buffer.count * DTypeSize(buffer.dtype));
  return s.ok() ? std::string() : std::string(s.message());
}

// Binds every manifest arg into inst->args (launches bound already): buffers with their
// element counts, scalars with their values, and the tensor maps the active launches take
// (evaluated and held to TMA's rules; the others only linked to their buffer). Returns why
// the candidate is left out, or "".
absl::StatusOr<std::string> BindArgs(const KernelTemplate& t, DType dtype, const Scope& scope,
                                     Instance* inst) {
  const v1::TemplateManifest& m = t.manifest();
  for (const v1::Arg& a : m.args()) {
    BoundArg arg;
    arg.name = a.name();
    if (a.has_tensor_map()) {
      arg.scalar_type = "tensor_map";  // evaluated below, once every buffer is bound
    } else if (a.has_buffer()) {
      arg.is_buffer = true;
      arg.dtype = BufferDType(a.buffer(), dtype);
      KTUNE_ASSIGN_OR_RETURN(arg.count, t.Evaluate(a.buffer().count(), scope));
      if (arg.count < 1) return absl::StrCat("buffer ", a.name(), " of ", arg.count, " elements");
      arg.role = a.buffer().role();
      arg.fill = a.buffer().fill();
      arg.alignment = BufferAlignment(a.buffer());
    } else {
      arg.scalar_type = a.scalar().type();
      if (a.scalar().has_expr()) {
        KTUNE_ASSIGN_OR_RETURN(arg.int_value, t.Evaluate(a.scalar().expr(), scope));
        if (arg.scalar_type == "i32" && (arg.int_value > std::numeric_limits<int32_t>::max() ||
                                         arg.int_value < std::numeric_limits<int32_t>::min())) {
          return absl::StrCat("scalar ", a.name(), " = ", arg.int_value, " does not fit i32");
        }
      } else {
        arg.number = a.scalar().number();
      }
    }
    inst->args.push_back(std::move(arg));
  }
  // Only the maps an active launch takes are evaluated and held to the driver's rules: a
  // template with a TMA path and a portable one has maps the portable candidates never
  // build (and that may not be valid for shapes only the portable path serves).
  std::set<std::string> launched;
  for (const BoundLaunch& l : inst->launches) launched.insert(l.args.begin(), l.args.end());
  for (int i = 0; i < m.args_size(); ++i) {
    if (!m.args(i).has_tensor_map()) continue;
    TensorMapDesc& desc = inst->args[i].tensor_map;
    if (!launched.count(m.args(i).name())) {
      LinkTensorMap(m.args(i).tensor_map(), inst->args, &desc);
      continue;
    }
    KTUNE_ASSIGN_OR_RETURN(std::string why,
                           BindTensorMap(t, m.args(i).tensor_map(), scope, &inst->args, &desc));
    if (!why.empty()) return absl::StrCat("args[", i, "].tensor_map.", why);
  }
  return std::string();
}

// The request dtype's tolerance into inst->atol / rtol, atol scaled by sqrt(atol_scale).
absl::Status BindTolerance(const KernelTemplate& t, DType dtype, const Shape& shape,
                           const Scope& scope, Instance* inst) {
  const v1::TemplateManifest& m = t.manifest();
  for (const v1::Tolerance& tol : m.tolerances()) {
    if (tol.dtype() != DTypeName(dtype)) continue;
    inst->atol = tol.atol();
    inst->rtol = tol.rtol();
    if (!tol.atol_scale().empty()) {
      KTUNE_ASSIGN_OR_RETURN(int64_t scale, t.Evaluate(tol.atol_scale(), scope));
      if (scale < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("template ", t.name(), ": tolerance atol_scale '", tol.atol_scale(),
                         "' is ", scale, " for shape ", ShapeString(shape), "; must be >= 0"));
      }
      inst->atol *= std::sqrt(static_cast<double>(scale));
    }
  }
  return absl::OkStatus();
}

// The active launches' blocks into inst->launches (names and args too) and
// inst->max_threads; a reason when the config is not a candidate, "" otherwise.
absl::StatusOr<std::string> BindBlocks(const KernelTemplate& t, const Launches& launches,
                                       DType dtype, const Config& config, const TargetInfo& target,
                                       const Scope& scope, Instance* inst_ptr) {
  Instance& inst = *inst_ptr;
  for (const v1::Launch& l : launches) {
    KTUNE_ASSIGN_OR_RETURN(int64_t active, t.Evaluate(l.when(), scope, /*if_empty=*/1));
    if (!active) continue;
    BoundLaunch b;
    b.name_expression = NameExpression(l.kernel(), dtype, config);
    // Every compile target of the device is sm_<its capability>[a]: griddepcontrol exists
    // from sm_90 on, and before it a launch's promise to wait would compile to nothing. (A
    // reference launch never says so: the manifest's validation refuses it.)
    b.programmatic = l.programmatic() && target.sm >= 90;
    KTUNE_ASSIGN_OR_RETURN(b.block[0], t.Evaluate(l.block().x(), scope, 1));
    KTUNE_ASSIGN_OR_RETURN(b.block[1], t.Evaluate(l.block().y(), scope, 1));
    KTUNE_ASSIGN_OR_RETURN(b.block[2], t.Evaluate(l.block().z(), scope, 1));
    b.args.assign(l.args().begin(), l.args().end());
    int64_t threads = 1;
    for (int64_t d : b.block) {
      if (d < 1) return absl::StrCat(b.name_expression, ": block dimension ", d);
      threads *= d;  // each d <= 1024 after the check below, so no overflow
      if (threads > target.max_threads_per_block) {
        return absl::StrCat(b.name_expression, ": block of more than ",
                            target.max_threads_per_block, " threads");
      }
    }
    inst.max_threads = std::max(inst.max_threads, threads);
    inst.launches.push_back(std::move(b));
  }
  return std::string();
}

// The grids and dynamic shared memory of the launches BindBlocks bound, checked against
// CUDA's and the target's limits; a reason when the config is not a candidate, "" otherwise.
absl::StatusOr<std::string> BindGrids(const KernelTemplate& t, const Launches& launches,
                                      const Scope& scope, const TargetInfo& target,
                                      Instance* inst_ptr) {
  Instance& inst = *inst_ptr;
  int li = 0;
  for (const v1::Launch& l : launches) {
    KTUNE_ASSIGN_OR_RETURN(int64_t active, t.Evaluate(l.when(), scope, 1));
    if (!active) continue;
    BoundLaunch& b = inst.launches[li++];
    KTUNE_ASSIGN_OR_RETURN(b.grid[0], t.Evaluate(l.grid().x(), scope, 1));
    KTUNE_ASSIGN_OR_RETURN(b.grid[1], t.Evaluate(l.grid().y(), scope, 1));
    KTUNE_ASSIGN_OR_RETURN(b.grid[2], t.Evaluate(l.grid().z(), scope, 1));
    KTUNE_ASSIGN_OR_RETURN(b.shared_bytes, t.Evaluate(l.shared_bytes(), scope, 0));
    // CUDA's grid limits: x up to 2^31 - 1, y and z up to 65535.
    const int64_t limits[3] = {std::numeric_limits<int32_t>::max(), 65535, 65535};
    for (int i = 0; i < 3; ++i) {
      if (b.grid[i] < 1 || b.grid[i] > limits[i]) {
        return absl::StrCat(b.name_expression, ": grid dimension ", i, " is ", b.grid[i]);
      }
    }
    if (b.shared_bytes < 0 || b.shared_bytes > target.max_shared_per_block) {
      return absl::StrCat(b.name_expression, ": ", b.shared_bytes,
                          " bytes of dynamic shared memory");
    }
  }

  return std::string();
}

absl::StatusOr<BindResult> BindLaunches(std::shared_ptr<const KernelTemplate> tmpl,
                                        const Launches& launches, DType dtype, const Shape& shape,
                                        const Config& config, const TargetInfo& target,
                                        bool is_reference) {
  const KernelTemplate& t = *tmpl;
  const v1::TemplateManifest& m = t.manifest();
  BindResult result;
  auto reject = [&](std::string why) {
    result.rejected_because = std::move(why);
    return result;
  };
  Instance inst;
  inst.tmpl = tmpl;
  inst.dtype = dtype;
  inst.shape = shape;
  inst.config = config;
  inst.target = target;
  Scope scope = BaseScope(dtype, shape, config, target);

  // Constraints select candidates; the reference is whatever reference_params fix and must
  // serve every shape, so they do not apply to it. Those that read no knob come first, in
  // manifest order: they depend on the params alone, so a point they reject is rejected
  // for all its knob choices and for that reason (which lets an enumeration count a whole
  // subtree of params under one without binding a point of it).
  auto check_constraints = [&](bool reading_knobs) -> absl::StatusOr<bool> {
    for (int i = 0; !is_reference && i < m.constraints_size(); ++i) {
      if (t.ConstraintReadsNoKnob(i) == reading_knobs) continue;
      KTUNE_ASSIGN_OR_RETURN(int64_t ok, t.Constraint(i).Evaluate(scope));
      if (!ok) {
        result.rejected_because = absl::StrCat("constraint '", m.constraints(i), "'");
        return false;
      }
    }
    return true;
  };
  KTUNE_ASSIGN_OR_RETURN(bool params_pass, check_constraints(/*reading_knobs=*/false));
  if (!params_pass) return result;

  // Blocks next: KTUNE_MAX_THREADS is derived from them and other expressions may use it.
  KTUNE_ASSIGN_OR_RETURN(std::string block_why,
                         BindBlocks(t, launches, dtype, config, target, scope, &inst));
  if (!block_why.empty()) return reject(std::move(block_why));
  if (inst.launches.empty()) return reject("no launch is active for this config");
  scope.values["KTUNE_MAX_THREADS"] = inst.max_threads;
  if (config.knobs.min_blocks * inst.max_threads > target.max_threads_per_sm) {
    return reject(absl::StrCat("min_blocks ", config.knobs.min_blocks, " x ", inst.max_threads,
                               " threads exceeds ", target.max_threads_per_sm, " per SM"));
  }
  KTUNE_ASSIGN_OR_RETURN(bool knobs_pass, check_constraints(/*reading_knobs=*/true));
  if (!knobs_pass) return result;

  KTUNE_ASSIGN_OR_RETURN(std::string grid_why, BindGrids(t, launches, scope, target, &inst));
  if (!grid_why.empty()) return reject(std::move(grid_why));

  KTUNE_ASSIGN_OR_RETURN(std::string why, BindArgs(t, dtype, scope, &inst));
  if (!why.empty()) return reject(std::move(why));
  KTUNE_ASSIGN_OR_RETURN(inst.bytes, t.Evaluate(m.cost().bytes(), scope));
  KTUNE_ASSIGN_OR_RETURN(inst.flops, t.Evaluate(m.cost().flops(), scope, 0));
  KTUNE_RETURN_IF_ERROR(BindTolerance(t, dtype, shape, scope, &inst));
  result.instance = std::move(inst);
  return result;
}

}  // namespace

std::vector<std::string> Instance::NameExpressions() const {
  std::vector<std::string> names;
  for (const BoundLaunch& l : launches) {
    if (std::find(names.begin(), names.end(), l.name_expression) == names.end()) {
      names.push_back(l.name_expression);
    }
  }
  return names;
}

std::vector<std::string> Instance::CompileOptions() const {
  std::vector<std::string> options = {
      absl::StrCat("--gpu-architecture=", config.knobs.target),
      absl::StrCat("-DKTUNE_MAX_THREADS=", max_threads),
      absl::StrCat("-DKTUNE_MIN_BLOCKS=", config.knobs.min_blocks),
      absl::StrCat("-DKTUNE_MAXRREG=", config.knobs.maxrregcount),
  };
  // ptxas ignores --maxrregcount for a kernel with __launch_bounds__ (checked with NVRTC
  // 13.0), and __maxnreg__ cannot be combined with it; so templates write
  // KTUNE_LAUNCH_BOUNDS and the register knob picks which qualifier it becomes.
  if (config.knobs.maxrregcount > 0) {
    options.push_back(absl::StrCat("-DKTUNE_LAUNCH_BOUNDS=__maxnreg__(",
                                   config.knobs.maxrregcount, ")"));
    options.push_back(absl::StrCat("--maxrregcount=", config.knobs.maxrregcount));
  } else {
    options.push_back(absl::StrCat("-DKTUNE_LAUNCH_BOUNDS=__launch_bounds__(", max_threads, ", ",
                                   config.knobs.min_blocks, ")"));
  }
  if (config.knobs.fast_math) options.push_back("--use_fast_math");
  return options;
}

absl::StatusOr<BindResult> Bind(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                const Shape& shape, const Config& config,
                                const TargetInfo& target) {
  const auto& launches = tmpl->manifest().launches();
  return BindLaunches(std::move(tmpl), launches, dtype, shape, config, target,
                     /*is_reference=*/false);
}

absl::StatusOr<Instance> BindReference(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                       const Shape& shape, const TargetInfo& target) {
  Config config;
  for (const v1::Param& p : tmpl->manifest().params()) config.params[p.name()] = p.default_();
  for (const auto& [name, value] : tmpl->manifest().reference_params()) {
    config.params[name] = value;
  }
  config.knobs.target = target.PortableTarget();
  const auto& launches = tmpl->manifest().reference();
  const std::string name = tmpl->name();
  KTUNE_ASSIGN_OR_RETURN(BindResult r,
                         BindLaunches(std::move(tmpl), launches, dtype, shape, config,
                                                     target, /*is_reference=*/true));
  if (!r.instance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "template ", name, ": the reference is not valid for shape ", ShapeString(shape), ": ",
        r.rejected_because));
  }
  return *std::move(r.instance);
}

}  // namespace ktune
