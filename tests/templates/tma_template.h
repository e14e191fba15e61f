// Test helper: the tensor-map test template (tests/templates/testdata/tma/tma_copy), loaded.
#ifndef KTUNE_TESTS_TEMPLATES_TMA_TEMPLATE_H_
#define KTUNE_TESTS_TEMPLATES_TMA_TEMPLATE_H_

#include <gtest/gtest.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "server/templates/kernel_template.h"
#include "tests/templates/template_fixture.h"

namespace ktune::testing {

// A test failure (and nullptr) when it does not load.
inline std::shared_ptr<const KernelTemplate> TmaCopyTemplate() {
  auto t = LoadKernelTemplate(absl::StrCat(TmaTemplatesDir(), "/tma_copy"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TEMPLATES_TMA_TEMPLATE_H_
