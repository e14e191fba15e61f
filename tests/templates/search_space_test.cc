#include "server/templates/search_space.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/base/file.h"
#include "server/templates/instance.h"
#include "tests/templates/template_fixture.h"
#include "tests/templates/tma_template.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::HasSubstr;
using ::testing::Pair;

std::shared_ptr<const KernelTemplate> Tiny() {
  auto t = LoadKernelTemplate(absl::StrCat(testing::TestTemplatesDir(), "/tiny"));
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TargetInfo Sm90() { return *TargetFromArch("sm_90"); }

TEST(SearchSpaceTest, CountsForADivisibleShape) {
  // BLOCK: 7 values, VEC: 3 -> 21 param points; knobs: (maxrreg 0 x min_blocks {1,2}, or
  // maxrreg 64) x {sm_90, sm_90a} = 6. BLOCK 2048 is over the 1024-thread limit: 3 x 6.
  ASSERT_OK_AND_ASSIGN(SearchSpace s, EnumerateSearchSpace(Tiny(), DType::kF32, {{"n", 1000}}, Sm90()));
  EXPECT_EQ(s.param_points, 21);
  EXPECT_EQ(s.points, 126);
  EXPECT_EQ(s.configs.size(), 108u);
  EXPECT_THAT(s.rejected,
              ElementsAre(Pair("tiny<float, N, N>: block of more than N threads", 18)));
}

TEST(SearchSpaceTest, ConstraintsPruneBeforeCompiling) {
  // n = 1001 is odd: VEC 2 and 4 fail "n % VEC == 0" at each of the 7 blocks (the
  // constraint, reading no knob, is checked before the blocks), leaving 6 blocks x VEC 1
  // (BLOCK 2048 is over the device's 1024), 6 knob choices each.
  ASSERT_OK_AND_ASSIGN(SearchSpace s, EnumerateSearchSpace(Tiny(), DType::kF32, {{"n", 1001}}, Sm90()));
  EXPECT_EQ(s.configs.size(), 6u * 6u);
  EXPECT_EQ(s.rejected.at("constraint 'n % VEC == N'"), 14 * 6);
}

TEST(SearchSpaceTest, NoArchSpecificTargetBeforeSm90) {
  ASSERT_OK_AND_ASSIGN(SearchSpace s,
                       EnumerateSearchSpace(Tiny(), DType::kF32, {{"n", 1000}}, *TargetFromArch("sm_80")));
  EXPECT_EQ(s.configs.size(), 54u);
  for (const Config& c : s.configs) EXPECT_EQ(c.knobs.target, "sm_80");
}

TEST(SearchSpaceTest, KnobChoicesAndDefaults) {
  std::vector<Knobs> knobs = KnobChoices(*Tiny(), Sm90());
  ASSERT_EQ(knobs.size(), 6u);
  EXPECT_EQ(knobs.front().target, "sm_90");
  EXPECT_EQ(knobs.back().target, "sm_90a");
  Config d = DefaultConfig(*Tiny(), Sm90());
  EXPECT_EQ(ConfigString(d), "BLOCK=128,VEC=1 maxrreg=0 minb=1 fastmath=0 sm_90");
}

TEST(SearchSpaceTest, MinBlocksTimesBlockOverThreadsPerSmIsRejected) {
  Config c = DefaultConfig(*Tiny(), Sm90());
  c.params["BLOCK"] = 1024;
  c.knobs.min_blocks = 4;
  ASSERT_OK_AND_ASSIGN(BindResult r, Bind(Tiny(), DType::kF32, {{"n", 4096}}, c, Sm90()));
  EXPECT_FALSE(r.instance);
  EXPECT_EQ(r.rejected_because, "min_blocks 4 x 1024 threads exceeds 2048 per SM");
}

TEST(SearchSpaceTest, ValidateRequest) {
  auto t = Tiny();
  EXPECT_OK(ValidateRequest(*t, DType::kBF16, {{"n", 1}}));
  EXPECT_THAT(ValidateRequest(*t, DType::kF16, {{"n", 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dtype: template tiny has no dtype f16; it has f32, bf16")));
  EXPECT_THAT(ValidateRequest(*t, DType::kF32, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shape: missing dim 'n'")));
  EXPECT_THAT(ValidateRequest(*t, DType::kF32, {{"n", 0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape: dim 'n' = 0 is outside [1, 1048576]")));
  EXPECT_THAT(ValidateRequest(*t, DType::kF32, {{"n", 1048577}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside [1, 1048576]")));
  EXPECT_THAT(ValidateRequest(*t, DType::kF32, {{"n", 8}, {"m", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape: unknown dim 'm'; template tiny has n")));
}

TEST(SearchSpaceTest, ValidateParams) {
  auto t = Tiny();
  EXPECT_OK(ValidateParams(*t, {{"BLOCK", 64}, {"VEC", 2}}));
  EXPECT_THAT(ValidateParams(*t, {{"BLOCK", 64}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("params: missing param VEC")));
  EXPECT_THAT(ValidateParams(*t, {{"BLOCK", 65}, {"VEC", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params: BLOCK=65 is not one of its values (32, 64, 128, 256, "
                                 "512, 1024, 2048)")));
  EXPECT_THAT(ValidateParams(*t, {{"BLOCK", 64}, {"VEC", 2}, {"X", 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params: template tiny has no param X; it has BLOCK, VEC")));
}

TEST(InstanceTest, BindsGeometryArgsCostAndOptions) {
  Config c = DefaultConfig(*Tiny(), Sm90());
  c.params = {{"BLOCK", 128}, {"VEC", 4}};
  c.knobs = {64, 2, true, "sm_90a"};
  ASSERT_OK_AND_ASSIGN(BindResult r, Bind(Tiny(), DType::kBF16, {{"n", 1000}}, c, Sm90()));
  ASSERT_TRUE(r.instance) << r.rejected_because;
  const Instance& i = *r.instance;
  ASSERT_EQ(i.launches.size(), 1u);
  EXPECT_EQ(i.launches[0].name_expression, "tiny<__nv_bfloat16, 128, 4>");
  EXPECT_EQ(i.launches[0].grid, (std::array<int64_t, 3>{2, 1, 1}));
  EXPECT_EQ(i.launches[0].block, (std::array<int64_t, 3>{128, 1, 1}));
  EXPECT_THAT(i.launches[0].args, ElementsAre("x", "out", "count"));
  EXPECT_EQ(i.max_threads, 128);
  EXPECT_EQ(i.bytes, 2 * 1000 * 2);
  EXPECT_EQ(i.flops, 1000);
  ASSERT_EQ(i.args.size(), 3u);
  EXPECT_TRUE(i.args[0].is_buffer);
  EXPECT_EQ(i.args[0].dtype, DType::kBF16);
  EXPECT_EQ(i.args[0].count, 1000);
  EXPECT_EQ(i.args[1].role, v1::Buffer::OUTPUT);
  EXPECT_FALSE(i.args[2].is_buffer);
  EXPECT_EQ(i.args[2].int_value, 1000);
  EXPECT_THAT(i.CompileOptions(),
              ElementsAre("--gpu-architecture=sm_90a", "-DKTUNE_MAX_THREADS=128",
                          "-DKTUNE_MIN_BLOCKS=2", "-DKTUNE_MAXRREG=64",
                          "-DKTUNE_LAUNCH_BOUNDS=__maxnreg__(64)", "--maxrregcount=64",
                          "--use_fast_math"));
  c.knobs = {0, 2, false, "sm_90"};
  ASSERT_OK_AND_ASSIGN(BindResult plain, Bind(Tiny(), DType::kBF16, {{"n", 1000}}, c, Sm90()));
  EXPECT_THAT(plain.instance->CompileOptions(),
              ElementsAre("--gpu-architecture=sm_90", "-DKTUNE_MAX_THREADS=128",
                          "-DKTUNE_MIN_BLOCKS=2", "-DKTUNE_MAXRREG=0",
                          "-DKTUNE_LAUNCH_BOUNDS=__launch_bounds__(128, 2)"));
  EXPECT_THAT(i.NameExpressions(), ElementsAre("tiny<__nv_bfloat16, 128, 4>"));
}

TEST(InstanceTest, ReferenceIgnoresConstraintsAndKnobs) {
  // n = 7 fails the default VEC's constraint only if VEC > 1; the reference must bind for
  // any valid shape regardless.
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(Tiny(), DType::kF32, {{"n", 7}}, Sm90()));
  ASSERT_EQ(ref.launches.size(), 1u);
  EXPECT_EQ(ref.launches[0].name_expression, "tiny_ref<float>");
  EXPECT_EQ(ref.launches[0].grid[0], 1);
  EXPECT_EQ(ref.config.knobs.target, "sm_90");
  EXPECT_EQ(ref.config.knobs.maxrregcount, 0);
}

std::shared_ptr<const KernelTemplate> TmaCopy() { return testing::TmaCopyTemplate(); }

Config TmaConfig(int64_t box_cols, int64_t box_rows, int64_t path, const std::string& target) {
  Config c = DefaultConfig(*TmaCopy(), Sm90());
  c.params = {{"BOX_COLS", box_cols}, {"BOX_ROWS", box_rows}, {"PATH", path}};
  c.knobs.target = target;
  return c;
}

TEST(SearchSpaceTest, ArchSpecificConstraintExcludesPortablePointsBeforeCompiling) {
  // 4 x 3 x 2 param points x {sm_90, sm_90a} (try_arch_specific defaults to true). The
  // manifest's "PATH == 0 || KTUNE_ARCH_SPECIFIC" leaves out PATH 1 on sm_90: 12 points.
  ASSERT_OK_AND_ASSIGN(SearchSpace s, EnumerateSearchSpace(TmaCopy(), DType::kF32,
                                                           {{"rows", 100}, {"cols", 200}}, Sm90()));
  EXPECT_EQ(s.param_points, 24);
  EXPECT_EQ(s.points, 48);
  EXPECT_EQ(s.configs.size(), 36u);
  EXPECT_THAT(s.rejected, ElementsAre(Pair("constraint 'PATH == N || KTUNE_ARCH_SPECIFIC'", 12)));
  int path1 = 0;
  for (const Config& c : s.configs) {
    if (c.params.at("PATH") == 1) {
      ++path1;
      EXPECT_EQ(c.knobs.target, "sm_90a") << ConfigString(c);
    }
  }
  EXPECT_EQ(path1, 12);
  // Without the arch-specific target (sm_80), every PATH 1 point is gone.
  ASSERT_OK_AND_ASSIGN(SearchSpace old,
                       EnumerateSearchSpace(TmaCopy(), DType::kF32, {{"rows", 100}, {"cols", 200}},
                                            *TargetFromArch("sm_80")));
  EXPECT_EQ(old.configs.size(), 12u);
  for (const Config& c : old.configs) EXPECT_EQ(c.params.at("PATH"), 0);
}

TEST(SearchSpaceTest, TensorMapRulesPruneBeforeCompiling) {
  // bf16 with BOX_COLS 4: a box row of 8 bytes, below TMA's 16. 3 BOX_ROWS x 2 PATHs x 2
  // targets, of which the 3 PATH 1 / sm_90 points fail the constraint first.
  ASSERT_OK_AND_ASSIGN(SearchSpace s, EnumerateSearchSpace(TmaCopy(), DType::kBF16,
                                                           {{"rows", 100}, {"cols", 200}}, Sm90()));
  EXPECT_EQ(s.rejected.at("constraint 'PATH == N || KTUNE_ARCH_SPECIFIC'"), 12);
  EXPECT_EQ(s.rejected.at("args[N].tensor_map.box[N]: N elements x N bytes = N bytes is not a "
                          "multiple of N"),
            9);
  EXPECT_EQ(s.configs.size(), 48u - 12u - 9u);
}

TEST(InstanceTest, KtuneArchSpecificFollowsTheTarget) {
  ASSERT_OK_AND_ASSIGN(BindResult portable,
                       Bind(TmaCopy(), DType::kF32, {{"rows", 100}, {"cols", 200}},
                            TmaConfig(32, 8, 1, "sm_90"), Sm90()));
  EXPECT_FALSE(portable.instance);
  EXPECT_EQ(portable.rejected_because, "constraint 'PATH == 0 || KTUNE_ARCH_SPECIFIC'");
  ASSERT_OK_AND_ASSIGN(BindResult specific,
                       Bind(TmaCopy(), DType::kF32, {{"rows", 100}, {"cols", 200}},
                            TmaConfig(32, 8, 1, "sm_90a"), Sm90()));
  EXPECT_TRUE(specific.instance) << specific.rejected_because;
}

TEST(InstanceTest, BindsATensorMapPerCandidate) {
  ASSERT_OK_AND_ASSIGN(BindResult r, Bind(TmaCopy(), DType::kBF16, {{"rows", 100}, {"cols", 200}},
                                          TmaConfig(64, 32, 0, "sm_90"), Sm90()));
  ASSERT_TRUE(r.instance) << r.rejected_because;
  const BoundArg& a = r.instance->args[1];
  EXPECT_EQ(a.name, "x_map");
  EXPECT_FALSE(a.is_buffer);
  EXPECT_TRUE(a.is_tensor_map());
  EXPECT_EQ(a.scalar_type, "tensor_map");
  const TensorMapDesc& m = a.tensor_map;
  EXPECT_EQ(m.buffer, "x");
  EXPECT_EQ(m.buffer_arg, 0);
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_THAT(m.dims, ElementsAre(200, 100));
  EXPECT_THAT(m.strides, ElementsAre(400));
  EXPECT_THAT(m.box, ElementsAre(64, 32));
  EXPECT_THAT(m.element_strides, ElementsAre(1, 1));
  EXPECT_EQ(m.swizzle, 0);
  EXPECT_EQ(r.instance->launches[0].name_expression, "tma_copy<__nv_bfloat16, 64, 32, 0>");
  EXPECT_THAT(r.instance->launches[0].args, ElementsAre("x_map", "out", "nrows", "ncols"));
  // Another config, another box.
  ASSERT_OK_AND_ASSIGN(BindResult other, Bind(TmaCopy(), DType::kBF16,
                                              {{"rows", 100}, {"cols", 200}},
                                              TmaConfig(8, 1, 0, "sm_90"), Sm90()));
  ASSERT_TRUE(other.instance) << other.rejected_because;
  EXPECT_THAT(other.instance->args[1].tensor_map.box, ElementsAre(8, 1));
  // The reference takes no map: it is linked to its buffer, not evaluated (only maps an
  // active launch takes are).
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(TmaCopy(), DType::kBF16,
                                                   {{"rows", 100}, {"cols", 200}}, Sm90()));
  EXPECT_THAT(ref.args[1].tensor_map.box, IsEmpty());
  EXPECT_EQ(ref.args[1].tensor_map.buffer_arg, 0);
  EXPECT_EQ(ref.args[1].tensor_map.dtype, DType::kBF16);
}

TEST(InstanceTest, TensorMapBeyondItsBufferIsRejected) {
  std::string manifest =
      *ReadFile(absl::StrCat(testing::TmaTemplatesDir(), "/tma_copy/tma_copy.textproto"));
  manifest = absl::StrReplaceAll(manifest, {{"dims: [\"cols\", \"rows\"]",
                                             "dims: [\"cols\", \"rows + 1\"]"}});
  const std::string root = testing::NewTempDir();
  testing::WriteTmaCopy(root, manifest);
  ASSERT_OK_AND_ASSIGN(auto t, LoadKernelTemplate(root + "/tma_copy"));
  ASSERT_OK_AND_ASSIGN(BindResult r, Bind(t, DType::kF32, {{"rows", 100}, {"cols", 200}},
                                          TmaConfig(32, 8, 0, "sm_90"), Sm90()));
  EXPECT_FALSE(r.instance);
  EXPECT_EQ(r.rejected_because,
            "args[1].tensor_map.dims: the map reaches 80800 bytes into buffer 'x', which has "
            "80000");
}

TEST(InstanceTest, DtypeForSetsABuffersElementType) {
  std::string manifest = *ReadFile(absl::StrCat(testing::TestTemplatesDir(), "/tiny/tiny.textproto"));
  manifest = absl::StrReplaceAll(
      manifest, {{"count: \"n\" role: OUTPUT", "count: \"n\" role: OUTPUT dtype_for { key: \"bf16\" value: \"f32\" }"}});
  const std::string root = testing::NewTempDir();
  testing::WriteTiny(root, manifest);
  ASSERT_OK_AND_ASSIGN(auto t, LoadKernelTemplate(root + "/tiny"));
  ASSERT_OK_AND_ASSIGN(Instance bf16, BindReference(t, DType::kBF16, {{"n", 1000}}, Sm90()));
  EXPECT_EQ(bf16.args[0].dtype, DType::kBF16);  // x follows the request
  EXPECT_EQ(bf16.args[1].dtype, DType::kF32);   // out: dtype_for
  ASSERT_OK_AND_ASSIGN(Instance f32, BindReference(t, DType::kF32, {{"n", 1000}}, Sm90()));
  EXPECT_EQ(f32.args[1].dtype, DType::kF32);
  // The tolerance is still the request dtype's.
  EXPECT_DOUBLE_EQ(bf16.atol, 1e-2);
}

TEST(InstanceTest, AtolScaleGrowsWithTheSquareRootOfADim) {
  std::string manifest = *ReadFile(absl::StrCat(testing::TestTemplatesDir(), "/tiny/tiny.textproto"));
  manifest = absl::StrReplaceAll(
      manifest, {{"tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }",
                  "tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 atol_scale: \"n / 10\" }"}});
  const std::string root = testing::NewTempDir();
  testing::WriteTiny(root, manifest);
  ASSERT_OK_AND_ASSIGN(auto t, LoadKernelTemplate(root + "/tiny"));
  ASSERT_OK_AND_ASSIGN(Instance bf16, BindReference(t, DType::kBF16, {{"n", 1000}}, Sm90()));
  EXPECT_DOUBLE_EQ(bf16.atol, 1e-2 * 10);  // sqrt(100)
  EXPECT_DOUBLE_EQ(bf16.rtol, 1e-2);
  ASSERT_OK_AND_ASSIGN(Instance f32, BindReference(t, DType::kF32, {{"n", 1000}}, Sm90()));
  EXPECT_DOUBLE_EQ(f32.atol, 1e-6);  // no scale for f32
  // A negative scale is a manifest defect for that shape; at the example shape (n=1000)
  // the load refuses the template.
  testing::WriteTiny(root, absl::StrReplaceAll(manifest, {{"atol_scale: \"n / 10\"",
                                                          "atol_scale: \"10 - n\""}}));
  EXPECT_THAT(LoadKernelTemplate(root + "/tiny").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("example shape n=1000 (bf16): template tiny: tolerance "
                                 "atol_scale '10 - n' is -990")));
  manifest = absl::StrReplaceAll(manifest, {{"atol_scale: \"n / 10\"", "atol_scale: \"n - 999\""}});
  testing::WriteTiny(root, manifest);
  ASSERT_OK_AND_ASSIGN(t, LoadKernelTemplate(root + "/tiny"));
  EXPECT_THAT(BindReference(t, DType::kBF16, {{"n", 998}}, Sm90()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("atol_scale 'n - 999' is -1 for shape n=998; must be >= 0")));
}

TEST(ShapeTest, ParseAndPrint) {
  ASSERT_OK_AND_ASSIGN(Shape s, ParseShape(" tokens=4096, hidden = 8192 "));
  EXPECT_EQ(ShapeString(s), "hidden=8192,tokens=4096");
  EXPECT_THAT(ParseShape(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParseShape("tokens"), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("item 'tokens' is not dim=value")));
  EXPECT_THAT(ParseShape("=3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("item '=3' has no dim name")));
  EXPECT_THAT(ParseShape("tokens=x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dim 'tokens' has value 'x', not an integer")));
  EXPECT_THAT(ParseShape("n=1,n=2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim 'n' given twice")));
  EXPECT_THAT(ParseShape("n=99999999999999999999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an integer")));
}

TEST(ShapeTest, DistanceIsLog2RatiosAndNeverCrossesAFlag) {
  const Shape a = {{"tokens", 4096}, {"hidden", 4096}, {"with_bias", 1}};
  EXPECT_EQ(ShapeDistance(a, a), 0);
  Shape b = a;
  b["tokens"] = 8192;
  EXPECT_DOUBLE_EQ(ShapeDistance(a, b), 1);
  EXPECT_DOUBLE_EQ(ShapeDistance(b, a), 1);
  b["hidden"] = 1024;
  EXPECT_DOUBLE_EQ(ShapeDistance(a, b), 3);  // 1 for tokens, 2 for hidden
  // A flag that differs (1 vs 0) is another computation, not a neighbour.
  Shape no_bias = a;
  no_bias["with_bias"] = 0;
  EXPECT_EQ(ShapeDistance(a, no_bias), INFINITY);
  // Both 0: equal, so near.
  Shape no_bias_longer = no_bias;
  no_bias_longer["tokens"] = 2048;
  EXPECT_DOUBLE_EQ(ShapeDistance(no_bias, no_bias_longer), 1);
  // A dim the other lacks: unrelated.
  EXPECT_EQ(ShapeDistance(a, {{"tokens", 4096}}), INFINITY);
}

TEST(TargetTest, FromArch) {
  ASSERT_OK_AND_ASSIGN(TargetInfo t, TargetFromArch("sm_90a"));
  EXPECT_EQ(t.sm, 90);
  EXPECT_EQ(t.PortableTarget(), "sm_90");
  EXPECT_EQ(t.ArchSpecificTarget(), "sm_90a");
  EXPECT_THAT(TargetFromArch("compute_90"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected sm_XY or sm_XYa")));
  EXPECT_THAT(TargetFromArch("sm_80a"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("arch-specific targets start at sm_90a")));
}

}  // namespace
}  // namespace ktune
