// gemv: y[b, i] = sum_j w[i, j] * x[b, j] for w [n, k], x [batch, k], y [batch,
// n], all row-major.
#include <cstdint>
#include <vector>

#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Gemv(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t n, p.Dim("n"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t k, p.Dim("k"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t batch, p.Dim("batch"));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *w, p.Input("w", n * k));
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x, p.Input("x", batch * k));
  std::vector<double> y(static_cast<size_t>(batch * n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += (*w)[i * k + j] * (*x)[b * k + j];
      y[b * n + i] = sum;
    }
  }
  return HostOutputs{{"y", std::move(y)}};
}

Shape GemvShape(int64_t n, int64_t k, int64_t batch) {
  return {{"n", n}, {"k", k}, {"batch", batch}};
}

} // namespace

HostReference GemvHostReference() {
  // k 1 and 3 allow only 1-element vectors; 1000 and 4096 rows of several
  // vector steps per thread; n 1, 7 and 1000 leave row groups of a block idle;
  // every batch from 1 to 8 once.
  return {Gemv, SameShapes({GemvShape(1, 1, 1), GemvShape(7, 3, 2),
                            GemvShape(3, 7, 3), GemvShape(1000, 3, 1),
                            GemvShape(7, 1000, 4), GemvShape(1, 4096, 5),
                            GemvShape(1000, 1000, 8), GemvShape(3, 4096, 6),
                            GemvShape(33, 512, 7)})};
}

} // namespace ktune::testing
