// ktune-worker running the tensor-map test template (tests/templates/testdata/tma/tma_copy)
// end to end on a real GPU (label `gpu`): bound, compiled with NVRTC, the reference run, and
// candidates whose `const __grid_constant__ ktune::TensorMap` the worker builds with
// cuTensorMapEncodeTiled, checked against the reference. Skips without a driver or GPU, and
// below compute capability 9.0 (no TMA).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "ktune/v1/worker.pb.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/worker/worker_session.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

const Shape kShape = {{"rows", 100}, {"cols", 200}};  // cols not a multiple of any box

class TmaGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    session_ = NewWorkerSession();
    v1::Request hello;
    hello.mutable_hello()->set_ordinal(0);
    const v1::Response r = session_->Handle(hello);
    if (r.has_error() && r.error().code() == static_cast<int>(absl::StatusCode::kUnavailable)) {
      GTEST_SKIP() << "no CUDA driver or GPU: " << r.error().message();
    }
    ASSERT_TRUE(r.has_device()) << r.DebugString();
    if (r.device().cc_major() < 9) GTEST_SKIP() << "TMA needs compute capability 9.0";
    target_ = TargetForDevice(r.device());
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TmaTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(tmpl_, registry_->Get("tma_copy"));
    NvrtcOptions options;
    options.include_dirs = {absl::StrCat(testing::ShippedTemplatesDir(), "/include")};
    ASSERT_OK_AND_ASSIGN(compiler_, NewNvrtcCompiler(options));

    ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(tmpl_, GetParam(), kShape, target_));
    ASSERT_OK_AND_ASSIGN(CompileResult compiled, compiler_->Compile(BuildCompileRequest(ref)));
    ASSERT_TRUE(compiled.ok) << compiled.log;
    ASSERT_OK_AND_ASSIGN(v1::Problem problem, BuildProblem(ref, compiled, 11));
    v1::Request set;
    *set.mutable_set_problem() = problem;
    const v1::Response ready = session_->Handle(set);
    ASSERT_TRUE(ready.has_problem_ready()) << ready.DebugString();
  }

  // The candidate for (BOX_COLS, BOX_ROWS, PATH) on `arch`, compiled.
  v1::KernelBinary Candidate(int64_t box_cols, int64_t box_rows, int64_t path,
                             const std::string& arch) {
    Config c = DefaultConfig(*tmpl_, target_);
    c.params = {{"BOX_COLS", box_cols}, {"BOX_ROWS", box_rows}, {"PATH", path}};
    c.knobs.target = arch;
    absl::StatusOr<BindResult> bound = Bind(tmpl_, GetParam(), kShape, c, target_);
    EXPECT_TRUE(bound.ok() && bound->instance) << (bound.ok() ? bound->rejected_because : "");
    if (!bound.ok() || !bound->instance) return {};
    absl::StatusOr<CompileResult> compiled =
        compiler_->Compile(BuildCompileRequest(*bound->instance));
    EXPECT_TRUE(compiled.ok() && compiled->ok) << (compiled.ok() ? compiled->log : "");
    absl::StatusOr<v1::KernelBinary> binary = BuildKernelBinary(*bound->instance, *compiled);
    EXPECT_TRUE(binary.ok()) << binary.status();
    return binary.ok() ? *binary : v1::KernelBinary{};
  }

  v1::Measurement Measure(const v1::KernelBinary& binary) {
    v1::Request r;
    *r.mutable_measure()->mutable_candidate() = binary;
    r.mutable_measure()->mutable_timing()->set_max_repeats(20);
    const v1::Response response = session_->Handle(r);
    EXPECT_TRUE(response.has_measurement()) << response.DebugString();
    return response.measurement();
  }

  std::unique_ptr<WorkerSession> session_;
  TargetInfo target_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::shared_ptr<const KernelTemplate> tmpl_;
  std::unique_ptr<Compiler> compiler_;
};

TEST_P(TmaGpuTest, CandidatesMatchTheReference) {
  for (const auto& [cols, rows, path, arch] :
       {std::tuple<int64_t, int64_t, int64_t, std::string>{64, 8, 0, "sm_90"},
        {32, 32, 0, "sm_90"}, {8, 1, 0, "sm_90"}, {64, 8, 1, "sm_90a"}}) {
    if (GetParam() == DType::kBF16 && cols < 8) continue;
    SCOPED_TRACE(absl::StrCat(cols, "x", rows, " PATH ", path, " ", arch));
    const v1::KernelBinary binary = Candidate(cols, rows, path, arch);
    ASSERT_EQ(binary.tensor_maps_size(), 1);
    const v1::Measurement m = Measure(binary);
    EXPECT_EQ(m.outcome(), "ok") << m.detail();
    EXPECT_EQ(m.mismatches(), 0);
    EXPECT_GT(m.time_ns(), 0);
  }
}

TEST_P(TmaGpuTest, TheBinarysOwnMapIsTheOneUsed) {
  // Every other row of x: the copy no longer matches the reference.
  v1::KernelBinary binary = Candidate(32, 8, 0, "sm_90");
  ASSERT_EQ(binary.tensor_maps_size(), 1);
  v1::BoundTensorMap* map = binary.mutable_tensor_maps(0)->mutable_map();
  map->set_dims(1, map->dims(1) / 2);
  map->set_strides(0, map->strides(0) * 2);
  const v1::Measurement m = Measure(binary);
  EXPECT_EQ(m.outcome(), "wrong_result") << m.detail();
  EXPECT_GT(m.mismatches(), 0);
}

TEST_P(TmaGpuTest, AMapTheDriverWouldRefuseFailsTheCandidateNotTheWorker) {
  v1::KernelBinary binary = Candidate(32, 8, 0, "sm_90");
  ASSERT_EQ(binary.tensor_maps_size(), 1);
  binary.mutable_tensor_maps(0)->mutable_map()->set_box(1, 512);
  const v1::Measurement m = Measure(binary);
  EXPECT_EQ(m.outcome(), "launch_failed");
  EXPECT_THAT(m.detail(), HasSubstr("box[1]: 512 is outside 1..256"));
  // The worker goes on.
  EXPECT_EQ(Measure(Candidate(64, 8, 0, "sm_90")).outcome(), "ok");
}

INSTANTIATE_TEST_SUITE_P(DTypes, TmaGpuTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace ktune
