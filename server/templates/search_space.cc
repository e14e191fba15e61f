#include "server/templates/search_space.h"

#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/echo.h"
#include "server/base/status_macros.h"
#include "server/templates/instance.h"

namespace ktune {
namespace {

// ktune's defaults for the global knobs (manifest.proto, KnobSpace).
constexpr int64_t kDefaultMaxRegs[] = {0, 32, 64, 128};
constexpr int64_t kDefaultMinBlocks[] = {1, 2, 4};

// Reasons group better without the numbers that vary from point to point.
std::string ReasonGroup(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (absl::ascii_isdigit(c)) {
      if (out.empty() || out.back() != 'N') out.push_back('N');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<SearchSpace> Enumerate(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                      const Shape& shape, const TargetInfo& target,
                                      const std::vector<Knobs>& knob_choices) {
  SearchSpace space;
  const auto& params = tmpl->manifest().params();
  // Odometer over the params' value lists.
  std::vector<int> idx(params.size(), 0);
  for (;;) {
    ++space.param_points;
    Config config;
    for (int i = 0; i < params.size(); ++i) config.params[params[i].name()] = params[i].values(idx[i]);
    for (size_t k = 0; k < knob_choices.size(); ++k) {
      config.knobs = knob_choices[k];
      KTUNE_ASSIGN_OR_RETURN(BindResult r, Bind(tmpl, dtype, shape, config, target));
      if (r.instance) {
        ++space.points;
        space.configs.push_back(config);
        continue;
      }
      // A constraint of the params alone rejects this point's other knob choices too:
      // counted under it without binding each (most of a large space goes this way; rmsnorm
      // has 20736 param points, a hundred of them valid at a shape).
      const int64_t alike = r.for_every_knob ? static_cast<int64_t>(knob_choices.size() - k) : 1;
      space.points += alike;
      space.rejected[ReasonGroup(r.rejected_because)] += alike;
      if (r.for_every_knob) break;
    }
    int i = 0;
    for (; i < params.size(); ++i) {
      if (++idx[i] < params[i].values_size()) break;
      idx[i] = 0;
    }
    if (i == params.size()) break;
  }
  return space;
}

}  // namespace

absl::Status ValidateRequest(const KernelTemplate& tmpl, DType dtype, const Shape& shape) {
  if (!tmpl.SupportsDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: template ", tmpl.name(), " has no dtype ", DTypeName(dtype), "; it has ",
        absl::StrJoin(tmpl.manifest().dtypes(), ", ")));
  }
  std::set<std::string> dims;
  for (const v1::Dim& d : tmpl.manifest().dims()) {
    dims.insert(d.name());
    auto it = shape.find(d.name());
    if (it == shape.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape: missing dim '", d.name(), "' of template ", tmpl.name()));
    }
    const int64_t max = d.max() != 0 ? d.max() : std::numeric_limits<int32_t>::max();
    if (it->second < d.min() || it->second > max) {
      return absl::InvalidArgumentError(absl::StrCat("shape: dim '", d.name(), "' = ", it->second,
                                                     " is outside [", d.min(), ", ", max, "]"));
    }
  }
  for (const auto& [name, value] : shape) {
    if (!dims.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape: unknown dim ", Echo(name), "; template ", tmpl.name(), " has ",
          absl::StrJoin(dims, ", ")));
    }
  }
  return absl::OkStatus();
}

std::vector<Knobs> KnobChoices(const KernelTemplate& tmpl, const TargetInfo& target) {
  const v1::KnobSpace& k = tmpl.manifest().knobs();
  std::vector<int64_t> regs(k.maxrregcount().begin(), k.maxrregcount().end());
  if (regs.empty()) regs.assign(std::begin(kDefaultMaxRegs), std::end(kDefaultMaxRegs));
  std::vector<int64_t> min_blocks(k.min_blocks().begin(), k.min_blocks().end());
  if (min_blocks.empty()) {
    min_blocks.assign(std::begin(kDefaultMinBlocks), std::end(kDefaultMinBlocks));
  }
  std::vector<bool> fast = {false};
  if (k.allow_fast_math()) fast.push_back(true);
  std::vector<std::string> targets = {target.PortableTarget()};
  const bool try_specific = !k.has_try_arch_specific() || k.try_arch_specific();
  if (target.has_arch_specific && try_specific) targets.push_back(target.ArchSpecificTarget());

  std::vector<Knobs> out;
  for (const std::string& t : targets) {
    for (bool f : fast) {
      for (int64_t b : min_blocks) {
        for (int64_t r : regs) {
          // A register cap replaces the launch bounds (instance.cc), whose min-blocks
          // argument then has no effect: one combination, not one per min_blocks.
          if (r > 0 && b != min_blocks.front()) continue;
          Knobs knobs;
          knobs.maxrregcount = r;
          knobs.min_blocks = b;
          knobs.fast_math = f;
          knobs.target = t;
          out.push_back(knobs);
        }
      }
    }
  }
  return out;
}

Config DefaultConfig(const KernelTemplate& tmpl, const TargetInfo& target) {
  Config c;
  for (const v1::Param& p : tmpl.manifest().params()) c.params[p.name()] = p.default_();
  c.knobs.target = target.PortableTarget();
  return c;
}

absl::StatusOr<Config> DefaultConfigFor(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                        const Shape& shape, const TargetInfo& target) {
  std::vector<Config> tries = {DefaultConfig(*tmpl, target)};
  for (const v1::DefaultAlternative& alt : tmpl->manifest().default_alternatives()) {
    if (alt.arch_specific() && !target.has_arch_specific) continue;
    Config c = tries.front();
    for (const auto& [name, value] : alt.params()) c.params[name] = value;
    if (alt.arch_specific()) c.knobs.target = target.ArchSpecificTarget();
    tries.push_back(std::move(c));
  }
  std::string first_rejection;
  for (const Config& c : tries) {
    KTUNE_ASSIGN_OR_RETURN(BindResult bound, Bind(tmpl, dtype, shape, c, target));
    if (bound.instance) return c;
    if (first_rejection.empty()) first_rejection = bound.rejected_because;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "template ", tmpl->name(), ": no default config fits ", DTypeName(dtype), " ",
      ShapeString(shape), " on ", target.PortableTarget(), ": ", first_rejection));
}

absl::Status ValidateParams(const KernelTemplate& tmpl,
                            const std::map<std::string, int64_t>& params) {
  std::set<std::string> known;
  for (const v1::Param& p : tmpl.manifest().params()) {
    known.insert(p.name());
    auto it = params.find(p.name());
    if (it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat("params: missing param ", p.name()));
    }
    bool listed = false;
    for (int64_t v : p.values()) listed |= v == it->second;
    if (!listed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "params: ", p.name(), "=", it->second, " is not one of its values (",
          absl::StrJoin(p.values(), ", "), ")"));
    }
  }
  for (const auto& [name, value] : params) {
    if (!known.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "params: template ", tmpl.name(), " has no param ", name, "; it has ",
          known.empty() ? "none" : absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SearchSpace> EnumerateSearchSpace(std::shared_ptr<const KernelTemplate> tmpl,
                                                 DType dtype, const Shape& shape,
                                                 const TargetInfo& target) {
  std::vector<Knobs> knobs = KnobChoices(*tmpl, target);
  return Enumerate(std::move(tmpl), dtype, shape, target, knobs);
}

absl::StatusOr<SearchSpace> EnumerateParams(std::shared_ptr<const KernelTemplate> tmpl,
                                            DType dtype, const Shape& shape,
                                            const TargetInfo& target, const Knobs& knobs) {
  return Enumerate(std::move(tmpl), dtype, shape, target, {knobs});
}

}  // namespace ktune
