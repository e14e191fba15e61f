#include "frontends/ktuned/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/base/sha256.h"
#include "server/templates/search_space.h"
#include "tests/templates/template_fixture.h"
#include "tests/templates/tma_template.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::ElementsAre;

std::shared_ptr<const KernelTemplate> TmaCopy() { return testing::TmaCopyTemplate(); }

// An entry of tma_copy for bf16 100x200 with BOX_COLS=64, BOX_ROWS=1 (the reference's
// binding has 32 x 8).
store::Entry TmaEntry(const TargetInfo& target) {
  store::Entry e;
  e.id = 5;
  e.key = {"nvidia-h200", "tma_copy", "bf16", "cols=200,rows=100"};
  e.config = DefaultConfig(*TmaCopy(), target);
  e.config.params = {{"BOX_COLS", 64}, {"BOX_ROWS", 1}, {"PATH", 0}};
  e.cubin = "\x7f" "ELF";
  e.cubin_sha256 = Sha256Hex(e.cubin);
  LaunchSpec l;
  l.lowered_name = "_Z8tma_copy";
  l.grid = {4, 100, 1};
  l.block = {128, 1, 1};
  l.args = {"x_map", "out", "nrows", "ncols"};
  e.launches = {l};
  return e;
}

// A status carries a head of a long message (a compiler log): the whole one could pass the
// caller's receive limit and turn the answer into its RESOURCE_EXHAUSTED.
TEST(ConvertTest, LongStatusMessagesAreCut) {
  const grpc::Status s = ToGrpcStatus(absl::InternalError(std::string(100000, 'l')));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_LT(s.error_message().size(), kMaxStatusMessageBytes + 64);
  EXPECT_THAT(s.error_message(), ::testing::EndsWith("more bytes]"));
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("short")).error_message(), "short");
}

TEST(ConvertTest, ArtifactTensorMapsFollowTheEntrysConfig) {
  const TargetInfo target = *TargetFromArch("sm_90");
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(TmaCopy(), DType::kBF16,
                                                   {{"rows", 100}, {"cols", 200}}, target));
  ASSERT_OK_AND_ASSIGN(v1::KernelArtifact a, ToArtifact(TmaEntry(target), false, ref, v1::EXACT));
  ASSERT_EQ(a.args_size(), 5);
  const v1::KernelArg& m = a.args(1);
  EXPECT_EQ(m.name(), "x_map");
  EXPECT_FALSE(m.is_buffer());
  // Old clients see an unknown scalar type and refuse; new ones read tensor_map.
  EXPECT_EQ(m.scalar_type(), "tensor_map");
  ASSERT_TRUE(m.has_tensor_map());
  EXPECT_EQ(m.tensor_map().buffer(), "x");
  EXPECT_EQ(m.tensor_map().buffer_arg(), 0);
  EXPECT_EQ(m.tensor_map().dtype(), "bf16");
  EXPECT_THAT(m.tensor_map().dims(), ElementsAre(200, 100));
  EXPECT_THAT(m.tensor_map().strides(), ElementsAre(400));
  EXPECT_THAT(m.tensor_map().box(), ElementsAre(64, 1));  // the entry's, not the reference's
  EXPECT_THAT(a.launches(0).args(), ElementsAre(1, 2, 3, 4));
  EXPECT_TRUE(a.args(0).is_buffer());
  EXPECT_EQ(a.args(0).dtype(), "bf16");
  // The manifest leaves it unset: the default, for the launchers to check.
  EXPECT_EQ(a.args(0).alignment(), 16);
  EXPECT_EQ(m.alignment(), 0);  // not a buffer
  EXPECT_FALSE(a.launches(0).programmatic());
}

TEST(ConvertTest, AProgrammaticLaunchSaysSo) {
  const TargetInfo target = *TargetFromArch("sm_90");
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(TmaCopy(), DType::kBF16,
                                                   {{"rows", 100}, {"cols", 200}}, target));
  store::Entry e = TmaEntry(target);
  e.launches[0].programmatic = true;
  ASSERT_OK_AND_ASSIGN(v1::KernelArtifact a, ToArtifact(e, false, ref, v1::EXACT));
  EXPECT_TRUE(a.launches(0).programmatic());
}

TEST(ConvertTest, EntryWhoseConfigNoLongerBindsIsRefused) {
  const TargetInfo target = *TargetFromArch("sm_90");
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(TmaCopy(), DType::kBF16,
                                                   {{"rows", 100}, {"cols", 200}}, target));
  store::Entry e = TmaEntry(target);
  e.config.params["BOX_COLS"] = 4;  // 8-byte box rows in bf16
  EXPECT_THAT(ToArtifact(e, false, ref, v1::EXACT),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                ::testing::HasSubstr("box[0]")));
}

}  // namespace
}  // namespace ktune
