// elementwise (axpby): out[i] = alpha * x[i] + beta * y[i] over n elements.
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Axpby(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t n, p.Dim("n"));
  KTUNE_ASSIGN_OR_RETURN(const double alpha, p.Scalar("alpha"));
  KTUNE_ASSIGN_OR_RETURN(const double beta, p.Scalar("beta"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x, p.Input("x", n));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *y, p.Input("y", n));
  std::vector<double> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = alpha * (*x)[i] + beta * (*y)[i];
  return HostOutputs{{"out", std::move(out)}};
}

} // namespace

HostReference ElementwiseHostReference() {
  // 1, 3, 7: only the scalar tail (n < VEC); 1000: one partial tile; 4133: two
  // full tiles of the default config (256 threads x 4 x 2) and a partial one
  // with a 1-element tail.
  return {
      Axpby,
      SameShapes(
          {{{"n", 1}}, {{"n", 3}}, {{"n", 7}}, {{"n", 1000}}, {{"n", 4133}}})};
}

} // namespace ktune::testing
