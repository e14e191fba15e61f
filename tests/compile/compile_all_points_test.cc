// Every valid param point of every shipped template compiles with NVRTC (at default knobs, at
// each dim's example shape, each dtype, sm_90 and sm_90a; spaces past 128 points and the
// second target of a template whose program is the same on both are sampled), with every
// reference. CTest label `slow` (2 to 6 minutes of two cores): deploy/test.sh leaves it out
// unless KTUNE_SLOW_TESTS=1; run it after editing a template or manifest with
// `ctest -L slow`. compile_test's covering sample runs in every suite.
#include <gtest/gtest.h>

#include "tests/compile/shipped_template_compiles.h"

namespace ktune {
namespace {

TEST(ShippedTemplatesTest, EveryParamPointAndReferenceCompiles) {
  testing::CompileShippedTemplates(
      {/*all_up_to=*/128, /*sample=*/64, /*second_target_sample=*/16});
}

}  // namespace
}  // namespace ktune
