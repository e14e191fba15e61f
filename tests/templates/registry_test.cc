#include "server/templates/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RegistryTest, BrokenTemplateIsReportedAndOthersLoad) {
  const std::string root = testing::NewTempDir();
  testing::WriteTiny(root);
  // A second template whose manifest names the wrong folder.
  ASSERT_OK(MakeDirs(root + "/broken"));
  ASSERT_OK(AtomicWriteFile(root + "/broken/broken.textproto", "name: \"other\"\n"));
  ASSERT_OK(AtomicWriteFile(root + "/broken/broken.cu", ""));
  // Shared headers and stray files are not templates.
  ASSERT_OK(MakeDirs(root + "/include/ktune"));
  ASSERT_OK(AtomicWriteFile(root + "/include/ktune/common.cuh", "// shared\n"));
  ASSERT_OK(AtomicWriteFile(root + "/README", "not a template\n"));

  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(root));
  EXPECT_EQ(registry->templates().size(), 1u);
  ASSERT_OK(registry->Get("tiny").status());
  ASSERT_EQ(registry->errors().size(), 1u);
  EXPECT_THAT(registry->errors()[0],
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("broken/broken.textproto:1: name: 'other' must equal the "
                                 "folder name 'broken'")));
  EXPECT_EQ(registry->include_dir(), root + "/include");
  EXPECT_THAT(registry->Get("nope"), StatusIs(absl::StatusCode::kNotFound,
                                              HasSubstr("unknown template 'nope'; known: tiny")));
}

// Every file under include/ is hashed, not only common.cuh (the norm templates also include
// ktune/row.cuh).
TEST(RegistryTest, SharedHeaderChangeChangesSourceHash) {
  for (const char* header : {"common.cuh", "row.cuh"}) {
    SCOPED_TRACE(header);
    const std::string root = testing::NewTempDir();
    testing::WriteTiny(root);
    ASSERT_OK(MakeDirs(root + "/include/ktune"));
    ASSERT_OK(AtomicWriteFile(root + "/include/ktune/common.cuh", "// v1\n"));
    ASSERT_OK(AtomicWriteFile(root + "/include/ktune/row.cuh", "// v1\n"));
    ASSERT_OK_AND_ASSIGN(auto a, LoadTemplateRegistry(root));
    ASSERT_OK(AtomicWriteFile(absl::StrCat(root, "/include/ktune/", header), "// v2\n"));
    ASSERT_OK_AND_ASSIGN(auto b, LoadTemplateRegistry(root));
    EXPECT_NE((*a->Get("tiny"))->source_hash(), (*b->Get("tiny"))->source_hash());
  }
}

TEST(RegistryTest, MissingFolder) {
  EXPECT_THAT(LoadTemplateRegistry("/nonexistent/ktune-templates"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/ktune-templates")));
}

TEST(RegistryTest, ShippedTemplatesAllLoad) {
  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  for (const absl::Status& e : registry->errors()) ADD_FAILURE() << e;
  EXPECT_OK(registry->Get("elementwise").status());
  EXPECT_OK(registry->Get("rmsnorm").status());
}

}  // namespace
}  // namespace ktune
