#include "server/tuning/gpu_problem.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/gpu/tensor_map_proto.h"

namespace ktune {

absl::StatusOr<v1::KernelBinary> BuildKernelBinary(const Instance& instance,
                                                   const CompileResult& compiled) {
  v1::KernelBinary binary;
  binary.set_cubin(compiled.cubin);
  for (const BoundLaunch& l : instance.launches) {
    const CompiledKernel* kernel = nullptr;
    for (const CompiledKernel& k : compiled.kernels) {
      if (k.name_expression == l.name_expression) kernel = &k;
    }
    if (kernel == nullptr) {
      return absl::InternalError(
          absl::StrCat("compile result has no kernel for '", l.name_expression, "'"));
    }
    v1::LaunchBinary* lb = binary.add_launches();
    lb->set_lowered_name(kernel->lowered_name);
    for (int64_t g : l.grid) lb->add_grid(static_cast<uint32_t>(g));
    for (int64_t b : l.block) lb->add_block(static_cast<uint32_t>(b));
    lb->set_shared_bytes(static_cast<uint32_t>(l.shared_bytes));
    for (const std::string& name : l.args) {
      for (size_t i = 0; i < instance.args.size(); ++i) {
        if (instance.args[i].name == name) lb->add_args(static_cast<int32_t>(i));
      }
    }
  }
  for (size_t i = 0; i < instance.args.size(); ++i) {
    if (!instance.args[i].is_tensor_map()) continue;
    v1::TensorMapArg* tm = binary.add_tensor_maps();
    tm->set_arg(static_cast<int32_t>(i));
    *tm->mutable_map() = TensorMapToProto(instance.args[i].tensor_map);
  }
  return binary;
}

absl::StatusOr<v1::Problem> BuildProblem(const Instance& reference,
                                         const CompileResult& reference_compiled, uint64_t seed) {
  v1::Problem problem;
  for (const BoundArg& a : reference.args) {
    v1::ArgSpec* spec = problem.add_args();
    spec->set_name(a.name);
    spec->set_is_buffer(a.is_buffer);
    if (a.is_buffer) {
      spec->set_dtype(std::string(DTypeName(a.dtype)));
      spec->set_count(a.count);
      spec->set_role(a.role);
      *spec->mutable_fill() = a.fill;
    } else {
      spec->set_scalar_type(a.scalar_type);
      spec->set_int_value(a.int_value);
      spec->set_number(a.number);
      if (a.is_tensor_map()) *spec->mutable_tensor_map() = TensorMapToProto(a.tensor_map);
    }
  }
  absl::StatusOr<v1::KernelBinary> ref = BuildKernelBinary(reference, reference_compiled);
  if (!ref.ok()) return ref.status();
  *problem.mutable_reference() = *std::move(ref);
  bool found = false;
  for (const v1::Tolerance& t : reference.tmpl->manifest().tolerances()) {
    found |= t.dtype() == DTypeName(reference.dtype);
  }
  // Bind scaled atol by the manifest's atol_scale for this shape.
  problem.set_atol(reference.atol);
  problem.set_rtol(reference.rtol);
  if (!found) {
    return absl::InternalError(absl::StrCat("template ", reference.tmpl->name(),
                                            " has no tolerance for ", DTypeName(reference.dtype)));
  }
  problem.set_seed(seed);
  return problem;
}

std::vector<LaunchSpec> LaunchSpecs(const Instance& instance, const v1::KernelBinary& binary) {
  std::vector<LaunchSpec> specs;
  for (int i = 0; i < binary.launches_size() && i < static_cast<int>(instance.launches.size());
       ++i) {
    const v1::LaunchBinary& lb = binary.launches(i);
    LaunchSpec s;
    s.lowered_name = lb.lowered_name();
    for (int d = 0; d < 3; ++d) {
      s.grid[d] = lb.grid(d);
      s.block[d] = lb.block(d);
    }
    s.shared_bytes = lb.shared_bytes();
    s.args = instance.launches[i].args;
    s.programmatic = instance.launches[i].programmatic;
    specs.push_back(std::move(s));
  }
  return specs;
}

LaunchSpec LaunchSpecFor(const BoundLaunch& l, std::string lowered_name) {
  LaunchSpec s;
  s.lowered_name = std::move(lowered_name);
  for (int d = 0; d < 3; ++d) {
    s.grid[d] = static_cast<uint32_t>(l.grid[d]);
    s.block[d] = static_cast<uint32_t>(l.block[d]);
  }
  s.shared_bytes = static_cast<uint32_t>(l.shared_bytes);
  s.args = l.args;
  s.programmatic = l.programmatic;
  return s;
}

LaunchSpec LaunchSpecFor(const BoundLaunch& l, const LaunchSpec& stored) {
  LaunchSpec s = LaunchSpecFor(l, stored.lowered_name);
  s.programmatic = l.programmatic && stored.programmatic;
  return s;
}

TargetInfo TargetForDevice(const v1::DeviceInfo& device) {
  TargetInfo t;
  SetComputeCapability(device.cc_major(), device.cc_minor(), &t);
  t.sm_count = device.sm_count();
  if (device.max_threads_per_sm() > 0) t.max_threads_per_sm = device.max_threads_per_sm();
  if (device.registers_per_sm() > 0) t.registers_per_sm = device.registers_per_sm();
  if (device.max_threads_per_block() > 0) t.max_threads_per_block = device.max_threads_per_block();
  if (device.max_shared_per_block_optin() > 0) {
    t.max_shared_per_block = device.max_shared_per_block_optin();
  }
  return t;
}

TargetInfo TargetForStoredDevice(const store::Device& device, TargetInfo base) {
  SetComputeCapability(device.cc_major, device.cc_minor, &base);
  if (device.sm_count > 0) base.sm_count = device.sm_count;
  return base;
}

}  // namespace ktune
