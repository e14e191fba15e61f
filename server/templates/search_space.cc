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


// The space in the params' odometer order (the first param varying fastest), walked as a
// tree from the last param to the first. A constraint that reads no knob depends on the
// params, the shape and the target alone, so it is decided once the params it reads are
// set: where it fails, the whole subtree under those params (every value of the params
// below, every knob choice) is counted under it without visiting a point, as binding each
// would have. Only what is left is bound point by point. (rmsnorm has 20736 param points,
// about a hundred valid at a shape.)
class Enumerator {
 public:
  Enumerator(std::shared_ptr<const KernelTemplate> tmpl, DType dtype, const Shape& shape,
             const TargetInfo& target, const std::vector<Knobs>& knob_choices)
      : tmpl_(std::move(tmpl)), dtype_(dtype), shape_(shape), target_(target),
        knob_choices_(knob_choices) {
    const v1::TemplateManifest& m = tmpl_->manifest();
    const int n = m.params_size();
    decided_at_.resize(static_cast<size_t>(n) + 1);
    // Bind checks these constraints first, in manifest order, and a point counts under the
    // first that rejects it. So one is decided where it and every one before it can be: at
    // the lowest-numbered param any of them reads (once that one is set, so are all they
    // read); where it fails there, the ones before it have passed.
    int level = n;
    for (int c = 0; c < m.constraints_size(); ++c) {
      if (!tmpl_->ConstraintReadsNoKnob(c)) continue;
      for (int p = 0; p < level; ++p) {
        if (tmpl_->ConstraintReads(c, m.params(p).name())) {
          level = p;
          break;
        }
      }
      decided_at_[static_cast<size_t>(level)].push_back(c);
    }
    for (int c = 0; c < m.constraints_size(); ++c) {
      rejected_by_.push_back(ReasonGroup(absl::StrCat("constraint '", m.constraints(c), "'")));
    }
    // The walk's scope: the shape's dims and the target's constants, the params added as
    // they are set. (Its knob values are the defaults; the constraints it decides read none.)
    scope_ = BaseScope(dtype_, shape_, Config{}, target_);
    below_.assign(static_cast<size_t>(n) + 1, 1);
    for (int p = 0; p < n; ++p) {
      below_[static_cast<size_t>(p) + 1] = below_[static_cast<size_t>(p)] * m.params(p).values_size();
    }
  }

  absl::StatusOr<SearchSpace> Run() {
    Config config;
    KTUNE_RETURN_IF_ERROR(Walk(tmpl_->manifest().params_size(), config));
    return std::move(space_);
  }

 private:
  // Params level..n-1 are set in `config`; walks every point under them.
  absl::Status Walk(int level, Config& config) {
    const v1::TemplateManifest& m = tmpl_->manifest();
    const int64_t knobs = static_cast<int64_t>(knob_choices_.size());
    for (int c : decided_at_[static_cast<size_t>(level)]) {
      // An error here is the one Bind would give for every point below, at the same
      // constraint (it checks these first, in this order, with these values).
      KTUNE_ASSIGN_OR_RETURN(int64_t ok, tmpl_->Constraint(c).Evaluate(scope_));
      if (ok == 0) {
        const int64_t points = below_[static_cast<size_t>(level)];
        space_.param_points += points;
        space_.points += points * knobs;
        space_.rejected[rejected_by_[static_cast<size_t>(c)]] += points * knobs;
        return absl::OkStatus();
      }
    }
    if (level == 0) return BindPoint(config);
    const v1::Param& p = m.params(level - 1);
    for (int64_t v : p.values()) {
      config.params[p.name()] = v;
      scope_.values[p.name()] = v;
      KTUNE_RETURN_IF_ERROR(Walk(level - 1, config));
    }
    config.params.erase(p.name());
    scope_.values.erase(p.name());
    return absl::OkStatus();
  }

  // A point every constraint of its params alone passed (the walk decided them all): each
  // knob choice bound.
  absl::Status BindPoint(Config config) {
    ++space_.param_points;
    for (const Knobs& knobs : knob_choices_) {
      config.knobs = knobs;
      KTUNE_ASSIGN_OR_RETURN(BindResult r, Bind(tmpl_, dtype_, shape_, config, target_));
      ++space_.points;
      if (r.instance) {
        space_.configs.push_back(config);
      } else {
        ++space_.rejected[ReasonGroup(r.rejected_because)];
      }
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<const KernelTemplate> tmpl_;
  const DType dtype_;
  const Shape& shape_;
  const TargetInfo& target_;
  const std::vector<Knobs>& knob_choices_;
  std::vector<std::vector<int>> decided_at_;  // per level: the constraints decided there
  std::vector<int64_t> below_;                // per level: the param points under it
  std::vector<std::string> rejected_by_;      // per constraint: its key in space_.rejected
  Scope scope_;                               // the walk's values (params level..n-1 set)
  SearchSpace space_;
};

absl::StatusOr<SearchSpace> Enumerate(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                      const Shape& shape, const TargetInfo& target,
                                      const std::vector<Knobs>& knob_choices) {
  return Enumerator(std::move(tmpl), dtype, shape, target, knob_choices).Run();
}

}  // namespace

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
