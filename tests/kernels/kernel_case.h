// One GPU check case of a template (a dtype and a shape), host side: the inputs
// the worker generates for it, decoded for the host reference; the host
// reference's results encoded as the output buffers' bytes; and the candidate
// the check runs beside the reference (the default config, or the valid config
// nearest to it where the default does not fit the shape).
//
// Needs no GPU, so kernels_test.cc runs all of it in CI. Pure functions;
// thread-safe.
#ifndef KTUNE_TESTS_KERNELS_KERNEL_CASE_H_
#define KTUNE_TESTS_KERNELS_KERNEL_CASE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/base/config.h"
#include "server/templates/instance.h"
#include "server/templates/kernel_template.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {

// "rmsnorm bf16 hidden=3,tokens=7": how failures name a case.
std::string CaseName(const std::string &template_name, DType dtype,
                     const Shape &shape);

// What the kernels of `reference`'s problem see when the worker fills it from
// `seed` (BuildProblem keeps the instance's argument order; GenerateFill with
// BufferSeed, as worker_session.cc does): every INPUT and INOUT buffer decoded,
// every scalar as passed.
absl::StatusOr<HostProblem> MakeHostProblem(const Instance &reference,
                                            uint64_t seed);

// The host reference's results as bytes of each OUTPUT and INOUT buffer of
// `reference` (by name), each value rounded to nearest even in the buffer's
// type, as a kernel's store rounds it. kInvalidArgument when an output buffer
// is missing from `outputs`, has another element count, or `outputs` names a
// buffer that is no output.
absl::StatusOr<std::map<std::string, std::string>>
EncodeExpected(const Instance &reference, const HostOutputs &outputs);

struct ChosenCandidate {
  Config config;
  Instance instance;
  // Empty when it is the default config; else why the default was not usable.
  std::string default_rejected_because;
};

// Which configs a check wants (a kernel variant: e.g. gemv's MMA = 1); null
// wants any.
using ConfigFilter = std::function<bool(const Config &)>;

// The default config (DefaultConfig) bound to the shape, or, where it is
// rejected (e.g. VEC = 4 at hidden = 3), the valid config at default knobs that
// differs from the default in the fewest params (the first such in the search
// space's order). kFailedPrecondition when the shape has no valid config at
// all. With `want`, the same among the configs it accepts (the default only if
// it does); kNotFound when the shape has no valid config it accepts.
absl::StatusOr<ChosenCandidate>
ChooseCandidate(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                const Shape &shape, const TargetInfo &target,
                const ConfigFilter &want = nullptr);

} // namespace ktune::testing

#endif // KTUNE_TESTS_KERNELS_KERNEL_CASE_H_
