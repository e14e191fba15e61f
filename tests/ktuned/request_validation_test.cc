// ktuned's request checks (frontends/ktuned/request_validation.h): whose fault an error is,
// and how much of the request it echoes.
#include "frontends/ktuned/request_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_replace.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A manifest whose arithmetic divides by zero at one shape its bounds let through (not its
// example, which loads): that request used to be INVALID_ARGUMENT, blaming the caller.
TEST(RequestValidationTest, AManifestDefectIsInternalNamingTheManifest) {
  const std::string root = testing::NewTempDir();
  absl::StatusOr<std::string> good =
      ReadFile(testing::TestTemplatesDir() + "/tiny/tiny.textproto");
  ASSERT_TRUE(good.ok());
  testing::WriteTiny(root, absl::StrReplaceAll(*good, {{"grid { x: \"ceil_div(n, 128)\" }",
                                                        "grid { x: \"ceil_div(n, 128) + 1 / (n - 999) - 1\" }"}}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry, LoadTemplateRegistry(root));
  ASSERT_TRUE(registry->errors().empty()) << registry->errors().front();
  ValidationContext ctx;
  ctx.registry = registry.get();
  google::protobuf::Map<std::string, int64_t> shape;
  shape["n"] = 1000;
  EXPECT_OK(ValidateKernelQuery("tiny", "f32", shape, 0, ctx).status());
  shape["n"] = 999;
  EXPECT_THAT(ValidateKernelQuery("tiny", "f32", shape, 0, ctx).status(),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("template tiny"), HasSubstr("tiny.textproto"),
                             HasSubstr("n=999"))));
}

// A 100 KB template id used to come back whole in the message, past the client's limit.
TEST(RequestValidationTest, EchoedInputIsCut) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry,
                       LoadTemplateRegistry(testing::TestTemplatesDir()));
  ValidationContext ctx;
  ctx.registry = registry.get();
  google::protobuf::Map<std::string, int64_t> shape;
  shape["n"] = 1000;
  const std::string huge(100000, 'x');
  for (const absl::Status& s :
       {ValidateKernelQuery(huge, "f32", shape, 0, ctx).status(),
        ValidateKernelQuery("tiny", huge, shape, 0, ctx).status()}) {
    EXPECT_FALSE(s.ok());
    EXPECT_LT(s.message().size(), 400u);
    EXPECT_THAT(std::string(s.message()), HasSubstr("(100000 bytes)"));
  }
  shape[huge] = 1;
  absl::Status s = ValidateKernelQuery("tiny", "f32", shape, 0, ctx).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 400u);
}

}  // namespace
}  // namespace ktune
