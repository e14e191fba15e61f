// The kernel variants of each shipped template that its default candidate does
// not run (gemv's tensor-core kernel, softmax's cluster and two-launch
// variants, ...): the GPU check runs, beside the default, the config nearest to
// the default of each variant at every case where the variant is valid.
// kernels_test checks that every variant is valid at one case at least, so the
// GPU check cannot pass by finding none.
#ifndef KTUNE_TESTS_KERNELS_KERNEL_VARIANTS_H_
#define KTUNE_TESTS_KERNELS_KERNEL_VARIANTS_H_

#include <string>
#include <vector>

#include "tests/kernels/kernel_case.h"

namespace ktune::testing {

struct KernelVariant {
  std::string name;     // "tensor cores, split-K"
  ConfigFilter selects; // the configs that run it
};

// The template's variants; empty for a template with one kernel and one path.
const std::vector<KernelVariant> &KernelVariants(const std::string &template_name);

} // namespace ktune::testing

#endif // KTUNE_TESTS_KERNELS_KERNEL_VARIANTS_H_
