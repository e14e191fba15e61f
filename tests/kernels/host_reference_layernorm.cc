// layernorm over the rows of row-major [tokens, hidden] x:
//   mean[t]   = sum_i x[t, i] / hidden
//   var[t]    = sum_i (x[t, i] - mean[t])^2 / hidden   (biased)
//   out[t, i] = (x[t, i] - mean[t]) / sqrt(var[t] + eps) * weight[i] (+ bias[i]
//   if with_bias == 1)
// The dim `with_bias` says whether there is a bias (0: no, 1: yes; the bias buffer
// then has hidden elements, else one that is never read).
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Layernorm(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t hidden, p.Dim("hidden"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t with_bias, p.Dim("with_bias"));
  if (with_bias != 0 && with_bias != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim with_bias is ", with_bias, ", not 0 or 1"));
  }
  const bool has_bias = with_bias == 1;
  KTUNE_ASSIGN_OR_RETURN(const double eps, p.Scalar("eps"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x,
                         p.Input("x", tokens * hidden));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *w,
                         p.Input("weight", hidden));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *b,
                         p.Input("bias", has_bias ? hidden : 1));
  std::vector<double> out(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    const double *row = x->data() + t * hidden;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i)
      sum += row[i];
    const double mean = sum / static_cast<double>(hidden);
    double sq = 0;
    for (int64_t i = 0; i < hidden; ++i)
      sq += (row[i] - mean) * (row[i] - mean);
    const double inv_std =
        1.0 / std::sqrt(sq / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      out[t * hidden + i] =
          (row[i] - mean) * inv_std * (*w)[i] + (has_bias ? (*b)[i] : 0.0);
    }
  }
  return HostOutputs{{"out", std::move(out)}};
}

} // namespace

HostReference LayernormHostReference() {
  // Odd rows with and without bias; hidden 1 (var 0: out is the bias, or 0);
  // 4096 is where the default config (CACHE = 4: 2048 < hidden <= 256 x 4 x 4)
  // is itself valid.
  return {Layernorm,
          SameShapes({{{"tokens", 1}, {"hidden", 1}, {"with_bias", 1}},
                      {{"tokens", 7}, {"hidden", 1}, {"with_bias", 0}},
                      {{"tokens", 1}, {"hidden", 3}, {"with_bias", 1}},
                      {{"tokens", 7}, {"hidden", 3}, {"with_bias", 0}},
                      {{"tokens", 1}, {"hidden", 1000}, {"with_bias", 0}},
                      {{"tokens", 7}, {"hidden", 1000}, {"with_bias", 1}},
                      {{"tokens", 3}, {"hidden", 4096}, {"with_bias", 1}},
                      {{"tokens", 2}, {"hidden", 4096}, {"with_bias", 0}},
                      // No multiple of 4 or 8: the edge paths (EDGE = 1).
                      {{"tokens", 5}, {"hidden", 1001}, {"with_bias", 1}},
                      {{"tokens", 3}, {"hidden", 4102}, {"with_bias", 0}},
                      {{"tokens", 2}, {"hidden", 8197}, {"with_bias", 1}},
                      // Enough rows for REUSE_W > 1 (a block per SM at least), in a
                      // last group of rows that is not whole.
                      {{"tokens", 1111}, {"hidden", 1001}, {"with_bias", 1}}})};
}

} // namespace ktune::testing
