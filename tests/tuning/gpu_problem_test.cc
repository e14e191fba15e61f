#include "server/tuning/gpu_problem.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/gpu/tensor_map_proto.h"
#include "server/templates/search_space.h"
#include "tests/templates/template_fixture.h"
#include "tests/templates/tma_template.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::shared_ptr<const KernelTemplate> TmaCopy() { return testing::TmaCopyTemplate(); }

// A compile result naming every launch of `instance`, as the compiler would.
CompileResult FakeCompiled(const Instance& instance) {
  CompileResult r;
  r.ok = true;
  r.cubin = "\x7f" "ELF fake";
  for (const std::string& name : instance.NameExpressions()) {
    CompiledKernel k;
    k.name_expression = name;
    k.lowered_name = absl::StrCat("_Z", name.size());
    r.kernels.push_back(k);
  }
  return r;
}

const Shape kShape = {{"rows", 100}, {"cols", 200}};

TEST(GpuProblemTest, ProblemAndBinariesCarryTheirTensorMaps) {
  const TargetInfo target = *TargetFromArch("sm_90");
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(TmaCopy(), DType::kBF16, kShape, target));
  ASSERT_OK_AND_ASSIGN(v1::Problem problem, BuildProblem(ref, FakeCompiled(ref), 7));
  ASSERT_EQ(problem.args_size(), 5);
  const v1::ArgSpec& spec = problem.args(1);
  EXPECT_EQ(spec.name(), "x_map");
  EXPECT_FALSE(spec.is_buffer());
  EXPECT_EQ(spec.scalar_type(), "tensor_map");
  ASSERT_TRUE(spec.has_tensor_map());
  EXPECT_EQ(spec.tensor_map().buffer(), "x");
  EXPECT_EQ(spec.tensor_map().buffer_arg(), 0);
  EXPECT_EQ(spec.tensor_map().dtype(), "bf16");
  // The reference takes no map: the problem links it to its buffer; each candidate's binary
  // carries the numbers its launches need.
  EXPECT_THAT(spec.tensor_map().dims(), IsEmpty());
  EXPECT_THAT(spec.tensor_map().box(), IsEmpty());
  EXPECT_EQ(problem.args(0).dtype(), "bf16");

  Config c = DefaultConfig(*TmaCopy(), target);
  c.params = {{"BOX_COLS", 64}, {"BOX_ROWS", 1}, {"PATH", 0}};
  ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(TmaCopy(), DType::kBF16, kShape, c, target));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  ASSERT_OK_AND_ASSIGN(v1::KernelBinary binary,
                       BuildKernelBinary(*bound.instance, FakeCompiled(*bound.instance)));
  ASSERT_EQ(binary.tensor_maps_size(), 1);
  EXPECT_EQ(binary.tensor_maps(0).arg(), 1);
  EXPECT_THAT(binary.tensor_maps(0).map().box(), ElementsAre(64, 1));
  EXPECT_THAT(binary.launches(0).args(), ElementsAre(1, 2, 3, 4));
  // The reference's binary says so too: linked, not evaluated (no launch of it takes it).
  EXPECT_THAT(problem.reference().tensor_maps(0).map().box(), IsEmpty());
  EXPECT_EQ(problem.reference().tensor_maps(0).map().buffer_arg(), 0);
}

TEST(GpuProblemTest, TensorMapProtoRoundTrips) {
  TensorMapDesc m;
  m.buffer = "w";
  m.buffer_arg = 3;
  m.dtype = DType::kF8E4M3;
  m.dims = {4096, 1024, 2};
  m.strides = {4096, 4096 * 1024};
  m.box = {128, 64, 1};
  m.element_strides = {1, 1, 1};
  m.swizzle = 3;
  m.interleave = 0;
  m.l2_promotion = 2;
  m.oob_fill = 1;
  const v1::BoundTensorMap p = TensorMapToProto(m);
  EXPECT_EQ(p.swizzle(), v1::TensorMap::SWIZZLE_128B);
  EXPECT_EQ(p.l2_promotion(), v1::TensorMap::L2_PROMOTION_128B);
  EXPECT_EQ(p.oob_fill(), v1::TensorMap::OOB_FILL_NAN);
  EXPECT_EQ(p.dtype(), "f8e4m3");
  v1::BoundTensorMap wire;
  ASSERT_TRUE(wire.ParseFromString(p.SerializeAsString()));
  ASSERT_OK_AND_ASSIGN(TensorMapDesc back, TensorMapFromProto(wire));
  EXPECT_EQ(back.buffer, m.buffer);
  EXPECT_EQ(back.buffer_arg, m.buffer_arg);
  EXPECT_EQ(back.dtype, m.dtype);
  EXPECT_EQ(back.dims, m.dims);
  EXPECT_EQ(back.strides, m.strides);
  EXPECT_EQ(back.box, m.box);
  EXPECT_EQ(back.element_strides, m.element_strides);
  EXPECT_EQ(back.swizzle, 3);
  EXPECT_EQ(back.l2_promotion, 2);
  EXPECT_EQ(back.oob_fill, 1);
  wire.set_dtype("f64");
  EXPECT_THAT(TensorMapFromProto(wire),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("dtype: unknown 'f64'")));
}

// A device known only by its row in the store binds as a live one of its architecture:
// threads per SM (they size grid-stride grids) come with the compute capability.
TEST(GpuProblemTest, AStoredDeviceTakesItsArchitecturesThreadsPerSm) {
  store::Device d;
  d.cc_major = 9;
  d.sm_count = 132;
  EXPECT_EQ(TargetForStoredDevice(d, TargetInfo()).max_threads_per_sm, 2048);
  d.cc_major = 8;
  d.cc_minor = 9;
  d.sm_count = 142;
  const TargetInfo ada = TargetForStoredDevice(d, TargetInfo());
  EXPECT_EQ(ada.max_threads_per_sm, 1536);
  EXPECT_EQ(ada.sm, 89);
  EXPECT_EQ(ada.sm_count, 142);
  EXPECT_FALSE(ada.has_arch_specific);
  EXPECT_EQ(TargetFromArch("sm_75")->max_threads_per_sm, 1024);
  EXPECT_EQ(TargetFromArch("sm_120")->max_threads_per_sm, 1536);
  EXPECT_EQ(TargetFromArch("sm_100a")->max_threads_per_sm, 2048);
}

TEST(GpuProblemTest, ProblemToleranceIsScaledByAtolScale) {
  auto t = LoadKernelTemplate(absl::StrCat(testing::TestTemplatesDir(), "/tiny"));
  ASSERT_TRUE(t.ok());
  ASSERT_OK_AND_ASSIGN(Instance ref,
                       BindReference(*t, DType::kBF16, {{"n", 1000}}, *TargetFromArch("sm_90")));
  ref.atol = 0.5;  // as Bind leaves it after atol_scale
  ASSERT_OK_AND_ASSIGN(v1::Problem problem, BuildProblem(ref, FakeCompiled(ref), 1));
  EXPECT_DOUBLE_EQ(problem.atol(), 0.5);
  EXPECT_DOUBLE_EQ(problem.rtol(), 1e-2);
}

// A stored launch rebound for another shape keeps its kernel's lowered name, and is
// programmatic only where both the template's launch and the stored one are: a stale
// entry's cubin may predate the kernel's wait.
TEST(GpuProblemTest, AReboundLaunchIsProgrammaticOnlyWhereTheStoredOneWas) {
  BoundLaunch now;
  now.name_expression = "k<float, 128>";
  now.grid = {8, 1, 1};
  now.block = {128, 1, 1};
  now.args = {"x"};
  LaunchSpec stored;
  stored.lowered_name = "_Z1kIfLi128EEvv";
  stored.grid = {4, 1, 1};
  for (bool template_says : {false, true}) {
    for (bool stored_says : {false, true}) {
      now.programmatic = template_says;
      stored.programmatic = stored_says;
      const LaunchSpec s = LaunchSpecFor(now, stored);
      EXPECT_EQ(s.programmatic, template_says && stored_says);
      EXPECT_EQ(s.lowered_name, stored.lowered_name);
      EXPECT_EQ(s.grid[0], 8u);  // this shape's geometry
    }
  }
}

}  // namespace
}  // namespace ktune
