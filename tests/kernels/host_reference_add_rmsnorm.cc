// add_rmsnorm: the residual add fused with RMSNorm over row-major [tokens,
// hidden]:
//   r[t, i]   = round_dtype(x[t, i] + residual[t, i])   (the new residual,
//   INOUT) out[t, i] = r[t, i] / sqrt(sum_i(r[t, i]^2) / hidden + eps) *
//   weight[i]
// The norm is of r as stored, rounded to the element type (the manifest's
// contract).
#include <cmath>
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> AddRmsnorm(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t hidden, p.Dim("hidden"));
  KTUNE_ASSIGN_OR_RETURN(const double eps, p.Scalar("eps"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x,
                         p.Input("x", tokens * hidden));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *res,
                         p.Input("residual", tokens * hidden));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *w,
                         p.Input("weight", hidden));
  std::vector<double> r(static_cast<size_t>(tokens * hidden));
  std::vector<double> out(r.size());
  for (int64_t t = 0; t < tokens; ++t) {
    double sum_sq = 0;
    for (int64_t i = t * hidden; i < (t + 1) * hidden; ++i) {
      r[i] = RoundTo(p.dtype, (*x)[i] + (*res)[i]);
      sum_sq += r[i] * r[i];
    }
    const double inv_rms =
        1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      out[t * hidden + i] = r[t * hidden + i] * inv_rms * (*w)[i];
    }
  }
  return HostOutputs{{"residual", std::move(r)}, {"out", std::move(out)}};
}

} // namespace

HostReference AddRmsnormHostReference() {
  // As rmsnorm's shapes, and hidden 8200, the smallest kind of row where the
  // default config (CACHE = 0, kept only past 8 vectors per thread) is itself
  // valid.
  return {AddRmsnorm, SameShapes({{{"tokens", 1}, {"hidden", 1}},
                                  {{"tokens", 7}, {"hidden", 1}},
                                  {{"tokens", 1}, {"hidden", 3}},
                                  {{"tokens", 7}, {"hidden", 3}},
                                  {{"tokens", 1}, {"hidden", 1000}},
                                  {{"tokens", 7}, {"hidden", 1000}},
                                  {{"tokens", 3}, {"hidden", 4096}},
                                  {{"tokens", 2}, {"hidden", 8200}},
                                  // No multiple of 4 or 8: the edge paths (EDGE = 1).
                                  {{"tokens", 5}, {"hidden", 1001}},
                                  {{"tokens", 3}, {"hidden", 4102}},
                                  {{"tokens", 2}, {"hidden", 8197}},
                                  // 9 rows of 1001: the weight read at each of the 8
                                  // shifts (a kernel compiled per shift, PER_SHIFT).
                                  {{"tokens", 9}, {"hidden", 1001}}})};
}

} // namespace ktune::testing
