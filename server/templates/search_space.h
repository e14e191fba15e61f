// A template's search space for one request: every (params, knobs) point that the
// manifest's constraints and the device's limits allow, found without compiling anything.
//
// Pure functions of their arguments; thread-safe.
#ifndef KTUNE_SERVER_TEMPLATES_SEARCH_SPACE_H_
#define KTUNE_SERVER_TEMPLATES_SEARCH_SPACE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/base/config.h"
#include "server/base/dtype.h"
#include "server/templates/kernel_template.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"

namespace ktune {

// Checks a request against the template: the dtype is one of its dtypes, the shape names
// exactly its dims, each within [min, max]. kInvalidArgument naming the dtype or the dim.
absl::Status ValidateRequest(const KernelTemplate& tmpl, DType dtype, const Shape& shape);

// The global knob combinations for `tmpl` on `target`: the manifest's knob lists (ktune's
// defaults where empty) x fast math where allowed x {sm_XY, sm_XYa where the device has
// it and the manifest allows}. A register cap goes with the first min_blocks value only
// (it replaces the launch bounds). Launch-bounds combinations a device cannot honour are
// removed later, per candidate, when its block size is known.
std::vector<Knobs> KnobChoices(const KernelTemplate& tmpl, const TargetInfo& target);

// The template's default config: every param at its default, no register limit, min
// blocks 1, no fast math, the portable target.
Config DefaultConfig(const KernelTemplate& tmpl, const TargetInfo& target);

// The default config for one request: DefaultConfig where it binds for this dtype and shape
// on `target`, else the first of the manifest's default_alternatives that does (an
// arch-specific one only where the target has that variant). kFailedPrecondition naming the
// shape and why the params' defaults were rejected when none binds; a Status error of Bind
// (a template defect) as it is. REQUIRES: ValidateRequest is OK.
absl::StatusOr<Config> DefaultConfigFor(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                        const Shape& shape, const TargetInfo& target);

// Checks that `params` names exactly the template's params, each with one of its values.
// kInvalidArgument naming the param otherwise.
absl::Status ValidateParams(const KernelTemplate& tmpl, const std::map<std::string, int64_t>& params);

struct SearchSpace {
  std::vector<Config> configs;  // the valid candidates, in a deterministic order
  int64_t param_points = 0;     // params' cartesian product
  int64_t points = 0;           // param_points x knob choices
  // Why the others were left out: reason -> count (reasons without their numbers, so
  // they group; e.g. "constraint 'hidden % VEC == 0'"). A param point that a constraint of
  // its params alone rejects counts under that constraint for each of its knob choices.
  std::map<std::string, int64_t> rejected;
};

// A rejection reason with each run of digits replaced by N, as SearchSpace::rejected groups
// them: "constraint 'hidden % VEC == N'".
std::string ReasonGroup(const std::string& reason);

// Enumerates the search space. REQUIRES: ValidateRequest is OK. A Status error means a
// manifest expression could not be evaluated for some point (naming it).
absl::StatusOr<SearchSpace> EnumerateSearchSpace(std::shared_ptr<const KernelTemplate> tmpl,
                                                 DType dtype, const Shape& shape,
                                                 const TargetInfo& target);

// As EnumerateSearchSpace, with the knobs fixed to `knobs`: the template's own choices only.
absl::StatusOr<SearchSpace> EnumerateParams(std::shared_ptr<const KernelTemplate> tmpl,
                                            DType dtype, const Shape& shape,
                                            const TargetInfo& target, const Knobs& knobs);

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_SEARCH_SPACE_H_
