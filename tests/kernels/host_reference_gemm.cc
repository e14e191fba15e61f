// gemm: out[i, j] = scale_x * scale_w * sum_l x[i, l] * w[j, l] for x [m, k],
// w [n, k], out [m, n], all row-major.
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Gemm(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t m, p.Dim("m"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t n, p.Dim("n"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t k, p.Dim("k"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x, p.Input("x", m * k));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *w, p.Input("w", n * k));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *sx, p.Input("scale_x", 1));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *sw, p.Input("scale_w", 1));
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) sum += (*x)[i * k + l] * (*w)[j * k + l];
      out[i * n + j] = sum * (*sx)[0] * (*sw)[0];
    }
  }
  return HostOutputs{{"out", std::move(out)}};
}

Shape GemmShape(int64_t m, int64_t n, int64_t k) { return {{"m", m}, {"n", n}, {"k", k}}; }

std::vector<Shape> GemmShapes(DType /*dtype*/) {
  // m 1, 3 and 77 (decode rows, partial tiles of every BN and of x's rows), 200 (two
  // 128-row tiles, the second partial); n 1000 and 1003 (partial tiles, odd rows of out);
  // k 144 and 4112 (16-byte rows for fp8 too, and a partial 128-byte slot at the end of K;
  // 4112 has slots for every split-K). m 260 x n 1000: three 128-row tiles, so a cluster
  // sharing w's tile along m has a last unit hanging past m, and rows of out 2000 bytes long
  // (a multiple of 16) for TMA stores, which clip the partial tiles at both edges. m 1100 x
  // n 2056: more tiles than one wave of 132 blocks (9 x 17 of 128 x 128: a last wave of 21,
  // which TAIL splits five ways over k 272's five slots; 5 x 17 units of two sharing w: a
  // last wave of 19 units, one of them hanging past m), partial at both edges.
  std::vector<Shape> shapes = {GemmShape(1, 1000, 4112), GemmShape(3, 1003, 144),
                               GemmShape(77, 1000, 4112), GemmShape(200, 1003, 4112),
                               GemmShape(260, 1000, 144), GemmShape(1100, 2056, 272)};
  // The portable path also takes rows TMA cannot read: k not a multiple of 16 bytes (fp8's
  // copied element by element, as 16-bit ones are).
  shapes.push_back(GemmShape(33, 70, 77));
  return shapes;
}

}  // namespace

HostReference GemmHostReference() { return {Gemm, GemmShapes}; }

}  // namespace ktune::testing
