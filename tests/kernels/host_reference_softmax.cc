// softmax over the last dim of row-major [rows, cols] x:
//   out[r, j] = exp(x[r, j] - max_j x[r, :]) / sum_j exp(x[r, j] - max_j x[r,
//   :])
// into `out` (the dtype) when the dim out_bytes is the dtype's size, else into
// `out_f32`; the other output is a 1-element buffer the kernels never write
// (NaN here: it keeps the poison).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "tests/kernels/host_reference.h"

namespace ktune::testing {
namespace {

absl::StatusOr<HostOutputs> Softmax(const HostProblem &p) {
  KTUNE_ASSIGN_OR_RETURN(const int64_t rows, p.Dim("rows"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t cols, p.Dim("cols"));
  KTUNE_ASSIGN_OR_RETURN(const int64_t out_bytes, p.Dim("out_bytes"));
  if (out_bytes != DTypeSize(p.dtype) && out_bytes != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim out_bytes is ", out_bytes, ", neither the dtype's size nor 4"));
  }
  const bool to_f32 = out_bytes != DTypeSize(p.dtype);
  KTUNE_ASSIGN_OR_RETURN(const std::vector<double> *x,
                         p.Input("x", rows * cols));
  std::vector<double> result(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x->data() + r * cols;
    const double max = *std::max_element(row, row + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j)
      sum += std::exp(row[j] - max);
    for (int64_t j = 0; j < cols; ++j)
      result[r * cols + j] = std::exp(row[j] - max) / sum;
  }
  const std::vector<double> unused = {std::numeric_limits<double>::quiet_NaN()};
  if (to_f32)
    return HostOutputs{{"out", unused}, {"out_f32", std::move(result)}};
  return HostOutputs{{"out", std::move(result)}, {"out_f32", unused}};
}

std::vector<Shape> SoftmaxShapes(DType dtype) {
  // cols 1 (every output is 1), 3, 1000, and 9000, past the 8 vectors per
  // thread of the default block where the default config (CACHE = 0, the online
  // variant) is valid.
  // cols 1001, 4102 and 9003 are no multiple of 4 or 8: rows start at every alignment (the
  // edge paths, EDGE = 1); 9003 over 2 rows also splits (cluster and two launches).
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 1},    {7, 1},    {1, 3},    {7, 3},    {1, 1000}, {7, 1000},
      {3, 4096}, {2, 9000}, {5, 1001}, {3, 4102}, {2, 9003}};
  std::vector<Shape> shapes;
  for (const int64_t out_bytes : {DTypeSize(dtype), int64_t{4}}) {
    for (const auto &[rows, cols] : sizes) {
      shapes.push_back(
          {{"rows", rows}, {"cols", cols}, {"out_bytes", out_bytes}});
    }
    if (out_bytes == 4)
      break; // f32: one output type
  }
  return shapes;
}

} // namespace

HostReference SoftmaxHostReference() { return {Softmax, SoftmaxShapes}; }

} // namespace ktune::testing
