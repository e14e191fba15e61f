// Host references for the shipped kernel templates: for each template, its math
// written once more in plain C++ with double arithmetic, independent of the
// CUDA code, and the small shapes its GPU check (kernels_gpu_test.cc) runs at.
//
// A template's GPU reference kernel is what every tuned candidate is checked
// against; a host reference checks that reference (and the template's default
// candidate) in turn, so a wrong reference cannot hide a wrong kernel. Every
// shipped template needs an entry (kernels_test.cc fails with "no host
// reference for template X" otherwise).
//
// Adding one: write host_reference_<template>.cc defining the function declared
// at the end of this header, and add it to the table in host_reference.cc.
//
// Pure functions and immutable data; thread-safe.
#ifndef KTUNE_TESTS_KERNELS_HOST_REFERENCE_H_
#define KTUNE_TESTS_KERNELS_HOST_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/dtype.h"
#include "server/templates/shape.h"

namespace ktune::testing {

// What a kernel is given, as the host sees it.
struct HostProblem {
  DType dtype = DType::kF32; // the request's dtype
  Shape shape;               // the request's dims
  // Scalar arguments by name, as the kernel receives them (f32 values rounded
  // to float).
  std::map<std::string, double> scalars;
  // INPUT and INOUT buffers by name: their elements, decoded exactly from the
  // buffer's type.
  std::map<std::string, std::vector<double>> inputs;

  // The named dim, scalar or input; kInvalidArgument naming what is missing (a
  // manifest that renamed an argument the host reference reads).
  absl::StatusOr<int64_t> Dim(const std::string &name) const;
  absl::StatusOr<double> Scalar(const std::string &name) const;
  // Also checks the length: kInvalidArgument when the buffer does not hold
  // `count` elements.
  absl::StatusOr<const std::vector<double> *> Input(const std::string &name,
                                                    int64_t count) const;
};

// The exact results (before rounding to the buffer's type) of every OUTPUT and
// INOUT buffer, by name; an INOUT buffer's values are those after the kernel.
// NaN marks an element the kernels must leave unwritten (it keeps the worker's
// poison, a NaN for the float types), e.g. the unused one of softmax's two
// output buffers.
using HostOutputs = std::map<std::string, std::vector<double>>;

struct HostReference {
  std::function<absl::StatusOr<HostOutputs>(const HostProblem &)> compute;
  // Shapes the GPU check runs at for a dtype: small, and odd where the template
  // allows it (1, 3, 7, 1000), so tails and partial tiles are exercised. Each
  // must be a valid request with that dtype.
  std::function<std::vector<Shape>(DType)> shapes;
};

// `shapes` for every dtype.
std::function<std::vector<Shape>(DType)> SameShapes(std::vector<Shape> shapes);

// `v` rounded to nearest even in `dtype`, as a kernel's store rounds a float
// (for f16 and bf16 through float first, like EncodeElement; exact for any
// value a float holds).
double RoundTo(DType dtype, double v);

// The table, by template name.
const std::map<std::string, HostReference> &HostReferences();

// The entries (host_reference_<template>.cc).
HostReference ElementwiseHostReference();
HostReference RmsnormHostReference();
HostReference AddRmsnormHostReference();
HostReference LayernormHostReference();
HostReference SiluAndMulHostReference();
HostReference SoftmaxHostReference();
HostReference RopeHostReference();
HostReference RopeQkvHostReference();
HostReference GemvHostReference();
HostReference GemmHostReference();

} // namespace ktune::testing

#endif // KTUNE_TESTS_KERNELS_HOST_REFERENCE_H_
