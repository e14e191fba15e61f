#include "tests/kernels/host_reference.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/worker/host_buffers.h"

namespace ktune::testing {

absl::StatusOr<int64_t> HostProblem::Dim(const std::string &name) const {
  auto it = shape.find(name);
  if (it == shape.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shape has no dim '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<double> HostProblem::Scalar(const std::string &name) const {
  auto it = scalars.find(name);
  if (it == scalars.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no scalar argument '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<const std::vector<double> *>
HostProblem::Input(const std::string &name, int64_t count) const {
  auto it = inputs.find(name);
  if (it == inputs.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no input buffer '", name, "'"));
  }
  if (static_cast<int64_t>(it->second.size()) != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("input buffer '", name, "' holds ", it->second.size(),
                     " elements, expected ", count));
  }
  return &it->second;
}

std::function<std::vector<Shape>(DType)> SameShapes(std::vector<Shape> shapes) {
  return [shapes = std::move(shapes)](DType) { return shapes; };
}

double RoundTo(DType dtype, double v) {
  char bytes[8];
  EncodeElement(dtype, v, bytes);
  return DecodeElement(dtype, bytes);
}

const std::map<std::string, HostReference> &HostReferences() {
  // Built once, never destroyed (no exit-time destructor order to worry about).
  static const auto *table = new std::map<std::string, HostReference>{
      {"elementwise", ElementwiseHostReference()},
      {"rmsnorm", RmsnormHostReference()},
      {"add_rmsnorm", AddRmsnormHostReference()},
      {"layernorm", LayernormHostReference()},
      {"silu_and_mul", SiluAndMulHostReference()},
      {"softmax", SoftmaxHostReference()},
      {"rope", RopeHostReference()},
      {"rope_qkv", RopeQkvHostReference()},
      {"gemv", GemvHostReference()},
      {"gemm", GemmHostReference()},
  };
  return *table;
}

} // namespace ktune::testing
