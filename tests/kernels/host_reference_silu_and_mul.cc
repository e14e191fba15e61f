// silu_and_mul (SwiGLU): out[t, i] = silu(x[t, i]) * x[t, inter + i], silu(a) =
// a / (1 + exp(-a)), for x row-major [tokens, 2 * inter] (gate half, then up
// half) and out [tokens, inter].
#include <cmath>
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> SiluAndMul(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t tokens, p.Dim("tokens"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t inter, p.Dim("inter"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x,
                         p.Input("x", 2 * tokens * inter));
  std::vector<double> out(static_cast<size_t>(tokens * inter));
  for (int64_t t = 0; t < tokens; ++t) {
    const double *gate = x->data() + t * 2 * inter;
    const double *up = gate + inter;
    for (int64_t i = 0; i < inter; ++i) {
      out[t * inter + i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    }
  }
  return HostOutputs{{"out", std::move(out)}};
}

} // namespace

HostReference SiluAndMulHostReference() {
  // inter 1 and 3 allow only 1-element vectors (the up half starts inter
  // elements in); 1000 and 4096 give partial and full tiles of the default
  // config.
  return {SiluAndMul, SameShapes({{{"tokens", 1}, {"inter", 1}},
                                  {{"tokens", 7}, {"inter", 1}},
                                  {{"tokens", 1}, {"inter", 3}},
                                  {{"tokens", 7}, {"inter", 3}},
                                  {{"tokens", 1}, {"inter", 1000}},
                                  {{"tokens", 7}, {"inter", 1000}},
                                  {{"tokens", 3}, {"inter", 4096}},
                                  // No multiple of 4 or 8: the edge paths (EDGE = 1); 1200
                                  // rows of one tile are more tiles than one wave of blocks
                                  // (the grid-stride variant).
                                  {{"tokens", 5}, {"inter", 1001}},
                                  {{"tokens", 3}, {"inter", 4102}},
                                  // Rows of just over one 16-byte vector: flat vectors
                                  // (GRID_STRIDE 3, EDGE 1) that cross into the next
                                  // row at every offset, and a tail after the last.
                                  {{"tokens", 7}, {"inter", 9}},
                                  {{"tokens", 1200}, {"inter", 1001}}})};
}

} // namespace ktune::testing
