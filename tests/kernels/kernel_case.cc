#include "tests/kernels/kernel_case.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/worker/host_buffers.h"
#include "server/templates/search_space.h"

namespace ktune::testing {
namespace {

bool IsOutput(const BoundArg &a) {
  return a.is_buffer &&
         (a.role == v1::Buffer::OUTPUT || a.role == v1::Buffer::INOUT);
}

bool IsFilled(const BoundArg &a) {
  return a.is_buffer &&
         (a.role == v1::Buffer::INPUT || a.role == v1::Buffer::INOUT);
}

} // namespace

std::string CaseName(const std::string &template_name, DType dtype,
                     const Shape &shape) {
  return absl::StrCat(template_name, " ", DTypeName(dtype), " ",
                      ShapeString(shape));
}

absl::StatusOr<HostProblem> MakeHostProblem(const Instance &reference,
                                            uint64_t seed) {
  HostProblem p;
  p.dtype = reference.dtype;
  p.shape = reference.shape;
  for (size_t i = 0; i < reference.args.size(); ++i) {
    const BoundArg &a = reference.args[i];
    if (!a.is_buffer) {
      if (a.scalar_type == "f32") {
        p.scalars[a.name] = static_cast<double>(static_cast<float>(a.number));
      } else if (a.scalar_type == "i32" || a.scalar_type == "i64") {
        p.scalars[a.name] = static_cast<double>(a.int_value);
      } else if (a.scalar_type == "tensor_map") {
        // A view of a buffer the host reads directly: nothing to add.
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("argument '", a.name, "': scalar type '",
                         a.scalar_type, "' is not i32, i64 or f32"));
      }
      continue;
    }
    if (!IsFilled(a))
      continue;
    absl::StatusOr<std::string> bytes = GenerateFill(
        a.dtype, a.count, a.fill, BufferSeed(seed, static_cast<int>(i)));
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument '", a.name, "': ", bytes.status().message()));
    }
    const int64_t size = DTypeSize(a.dtype);
    std::vector<double> &values = p.inputs[a.name];
    values.resize(static_cast<size_t>(a.count));
    for (int64_t k = 0; k < a.count; ++k) {
      values[static_cast<size_t>(k)] =
          DecodeElement(a.dtype, bytes->data() + k * size);
    }
  }
  return p;
}

absl::StatusOr<std::map<std::string, std::string>>
EncodeExpected(const Instance &reference, const HostOutputs &outputs) {
  std::map<std::string, std::string> encoded;
  std::set<std::string> output_names;
  for (const BoundArg &a : reference.args) {
    if (!IsOutput(a))
      continue;
    output_names.insert(a.name);
    auto it = outputs.find(a.name);
    if (it == outputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host reference gives no values for output buffer '",
                       a.name, "'"));
    }
    if (static_cast<int64_t>(it->second.size()) != a.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host reference gives ", it->second.size(),
                       " values for output buffer '", a.name,
                       "'; the manifest says ", a.count));
    }
    const int64_t size = DTypeSize(a.dtype);
    std::string &bytes = encoded[a.name];
    bytes.resize(static_cast<size_t>(a.count * size));
    for (int64_t k = 0; k < a.count; ++k) {
      EncodeElement(a.dtype, it->second[static_cast<size_t>(k)],
                    bytes.data() + k * size);
    }
  }
  for (const auto &[name, values] : outputs) {
    if (!output_names.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host reference gives values for '", name,
                       "', which is no output buffer"));
    }
  }
  return encoded;
}

namespace {

// The valid param points of (template, dtype, shape, target, knobs), enumerated once per
// process: the GPU check and its CPU test choose a candidate of each kernel variant at
// every case, and one walk of gemm's space at its larger cases takes a second or more
// (the variants' test took over six minutes walking it per variant). Thread-safe.
absl::StatusOr<const std::vector<Config> *>
CachedParams(const std::shared_ptr<const KernelTemplate> &tmpl, DType dtype,
             const Shape &shape, const TargetInfo &target, const Knobs &knobs) {
  static std::mutex mu;
  static std::map<std::string, std::vector<Config>> cache;
  Config knobs_only;
  knobs_only.knobs = knobs;
  const std::string key = absl::StrCat(
      tmpl->name(), " ", tmpl->source_hash(), " ", DTypeName(dtype), " ",
      ShapeString(shape), " sm", target.sm, " ", target.sm_count, " ",
      target.max_shared_per_block, " ", ConfigString(knobs_only));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return &it->second;
  }
  KTUNE_ASSIGN_OR_RETURN(SearchSpace s,
                         EnumerateParams(tmpl, dtype, shape, target, knobs));
  std::lock_guard<std::mutex> lock(mu);
  return &cache.emplace(key, std::move(s.configs)).first->second;
}

} // namespace

absl::StatusOr<ChosenCandidate>
ChooseCandidate(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                const Shape &shape, const TargetInfo &target,
                const ConfigFilter &want) {
  // The request's default (DefaultConfigFor), else the params' defaults for the distance.
  absl::StatusOr<Config> request_default =
      DefaultConfigFor(tmpl, dtype, shape, target);
  const Config default_config =
      request_default.ok() ? *request_default : DefaultConfig(*tmpl, target);
  KTUNE_ASSIGN_OR_RETURN(BindResult bound,
                         Bind(tmpl, dtype, shape, default_config, target));
  const bool default_wanted = !want || want(default_config);
  if (bound.instance && default_wanted) {
    return ChosenCandidate{default_config, *std::move(bound.instance), ""};
  }
  // Params at the default's knobs first; then at the device's other target (a template
  // with a portable and an arch-specific kernel has variants on both).
  std::vector<Knobs> knob_choices = {default_config.knobs};
  if (target.has_arch_specific) {
    Knobs other = default_config.knobs;
    other.target = other.target == target.ArchSpecificTarget()
                       ? target.PortableTarget()
                       : target.ArchSpecificTarget();
    knob_choices.push_back(other);
  }
  SearchSpace space;
  for (const Knobs &knobs : knob_choices) {
    KTUNE_ASSIGN_OR_RETURN(const std::vector<Config> *configs,
                           CachedParams(tmpl, dtype, shape, target, knobs));
    space.configs.insert(space.configs.end(), configs->begin(), configs->end());
  }
  const Config *best = nullptr;
  int best_differing = 0;
  for (const Config &c : space.configs) {
    if (want && !want(c))
      continue;
    int differing = 0;
    for (const auto &[name, value] : c.params) {
      auto it = default_config.params.find(name);
      differing += it == default_config.params.end() || it->second != value;
    }
    if (best == nullptr || differing < best_differing) {
      best = &c;
      best_differing = differing;
    }
  }
  if (best == nullptr && want && !space.configs.empty()) {
    return absl::NotFoundError(
        absl::StrCat(CaseName(tmpl->name(), dtype, shape),
                     ": no valid config of the wanted kind"));
  }
  if (best == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(CaseName(tmpl->name(), dtype, shape),
                     ": no valid config (the default is "
                     "rejected: ",
                     bound.rejected_because, ")"));
  }
  KTUNE_ASSIGN_OR_RETURN(BindResult chosen,
                         Bind(tmpl, dtype, shape, *best, target));
  if (!chosen.instance) {
    return absl::InternalError(absl::StrCat(
        "config ", ConfigString(*best),
        " from the search space does not bind: ", chosen.rejected_because));
  }
  std::string why;
  if (!bound.instance) {
    why = bound.rejected_because;
  } else if (!default_wanted) {
    why = "is not of the wanted kind";
  }
  return ChosenCandidate{*best, *std::move(chosen.instance), why};
}

} // namespace ktune::testing
