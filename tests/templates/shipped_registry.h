// The shipped templates as one registry, for the tests that check every one of them.
#ifndef KTUNE_TESTS_TEMPLATES_SHIPPED_REGISTRY_H_
#define KTUNE_TESTS_TEMPLATES_SHIPPED_REGISTRY_H_

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "server/templates/registry.h"
#include "tests/templates/template_fixture.h"

namespace ktune::testing {

// The registry of ShippedTemplatesDir(), or null (and a test failure) when the folder cannot
// be read. A template folder that does not load is a test failure too: it would otherwise
// drop out of every check over "all the templates" without a word.
inline std::unique_ptr<TemplateRegistry> LoadShippedRegistry() {
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadTemplateRegistry(ShippedTemplatesDir());
  EXPECT_TRUE(registry.ok()) << registry.status();
  if (!registry.ok()) return nullptr;
  for (const absl::Status& e : (*registry)->errors()) {
    ADD_FAILURE() << "a shipped template did not load: " << e;
  }
  return *std::move(registry);
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TEMPLATES_SHIPPED_REGISTRY_H_
