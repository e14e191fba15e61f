// rmsnorm: out[t, i] = x[t, i] / sqrt(sum_i(x[t, i]^2) / hidden + eps) *
// weight[i] over a row-major [tokens, hidden] x.
#include <cmath>
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Rmsnorm(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t hidden, p.Dim("hidden"));
  KTUNE_ASSIGN_OR_RETURN(const double eps, p.Scalar("eps"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x,
                         p.Input("x", tokens * hidden));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *w,
                         p.Input("weight", hidden));
  std::vector<double> out(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    const double *row = x->data() + t * hidden;
    double sum_sq = 0;
    for (int64_t i = 0; i < hidden; ++i)
      sum_sq += row[i] * row[i];
    const double inv_rms =
        1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i)
      out[t * hidden + i] = row[i] * inv_rms * (*w)[i];
  }
  return HostOutputs{{"out", std::move(out)}};
}

} // namespace

HostReference RmsnormHostReference() {
  // hidden 1 and 3 are below every VEC > 1 (the default VEC = 4 is rejected
  // there, so the GPU check runs the nearest valid config); 1000 is no multiple
  // of any block; 4096 gives every thread of the default block several vectors.
  // tokens 7 is no multiple of the rows a block of the ROWS_PER_WARP variant
  // takes.
  return {Rmsnorm, SameShapes({{{"tokens", 1}, {"hidden", 1}},
                               {{"tokens", 7}, {"hidden", 1}},
                               {{"tokens", 1}, {"hidden", 3}},
                               {{"tokens", 7}, {"hidden", 3}},
                               {{"tokens", 1}, {"hidden", 1000}},
                               {{"tokens", 7}, {"hidden", 1000}},
                               {{"tokens", 3}, {"hidden", 4096}},
                               // No multiple of 4 or 8: the edge paths (EDGE = 1).
                               {{"tokens", 5}, {"hidden", 1001}},
                               {{"tokens", 3}, {"hidden", 4102}},
                               {{"tokens", 2}, {"hidden", 8197}},
                               // Enough rows for REUSE_W > 1 (a block per SM at least),
                               // in a last group of rows that is not whole.
                               {{"tokens", 1111}, {"hidden", 1001}}})};
}

} // namespace ktune::testing
