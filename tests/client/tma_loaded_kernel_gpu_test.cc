// LoadedKernel launching the tensor-map test template (tests/templates/testdata/tma) on a
// real GPU: the artifact carries a tensor map over x, LoadedKernel encodes it with
// cuTensorMapEncodeTiled from the pointer the caller passes for x, and out must equal x.
// Skips without a driver or GPU, and below compute capability 9.0 (no TMA).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/lib/ktune_client.h"
#include "client/lib/loaded_kernel.h"
#include "client/lib/proto_convert.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/worker/driver.h"
#include "server/gpu/tensor_map_proto.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "tests/client/fake_ktune_service.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune::client {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kRows = 100;
constexpr int kCols = 200;

class TmaLoadedKernelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Driver*> driver = Driver::Get();
    if (!driver.ok()) GTEST_SKIP() << "no CUDA driver or GPU: " << driver.status();
    driver_ = *driver;
    ASSERT_OK_AND_ASSIGN(context_, PrimaryContext::Retain(driver_, 0));
    int major = 0;
    ASSERT_OK(KTUNE_CU(driver_, DeviceGetAttribute, &major,
                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, context_.device()));
    if (major < 9) GTEST_SKIP() << "TMA needs compute capability 9.0";

    ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(::ktune::testing::TmaTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(auto tmpl, registry->Get("tma_copy"));
    ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
    Config c = DefaultConfig(*tmpl, target);
    c.params = {{"BOX_COLS", 64}, {"BOX_ROWS", 8}, {"PATH", 0}};
    ASSERT_OK_AND_ASSIGN(BindResult bound,
                         Bind(tmpl, DType::kF32, {{"rows", kRows}, {"cols", kCols}}, c, target));
    ASSERT_TRUE(bound.instance) << bound.rejected_because;
    NvrtcOptions options;
    options.include_dirs = {absl::StrCat(::ktune::testing::ShippedTemplatesDir(), "/include")};
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler, NewNvrtcCompiler(options));
    ASSERT_OK_AND_ASSIGN(CompileResult compiled,
                         compiler->Compile(BuildCompileRequest(*bound.instance)));
    ASSERT_TRUE(compiled.ok) << compiled.log;
    ASSERT_OK_AND_ASSIGN(v1::KernelBinary binary, BuildKernelBinary(*bound.instance, compiled));

    // The artifact as the daemon describes it (frontends/ktuned/convert.cc).
    v1::KernelArtifact a;
    ::ktune::testing::SetCubin(a, compiled.cubin);
    for (const v1::LaunchBinary& lb : binary.launches()) {
      v1::KernelLaunch* l = a.add_launches();
      l->set_lowered_name(lb.lowered_name());
      for (uint32_t g : lb.grid()) l->add_grid(g);
      for (uint32_t b : lb.block()) l->add_block(b);
      for (int32_t i : lb.args()) l->add_args(i);
    }
    for (const BoundArg& b : bound.instance->args) {
      v1::KernelArg* arg = a.add_args();
      arg->set_name(b.name);
      arg->set_is_buffer(b.is_buffer);
      if (b.is_buffer) {
        arg->set_dtype(std::string(DTypeName(b.dtype)));
        arg->set_count(b.count);
        arg->set_role(b.role);
      } else {
        arg->set_scalar_type(b.scalar_type);
        arg->set_int_value(b.int_value);
        if (b.is_tensor_map()) *arg->mutable_tensor_map() = TensorMapToProto(b.tensor_map);
      }
    }
    artifact_ = ArtifactFromProto(a);
  }

  Driver* driver_ = nullptr;
  PrimaryContext context_;
  KernelArtifact artifact_;
};

TEST_F(TmaLoadedKernelGpuTest, BuildsTheMapFromTheCallersPointerAndCopies) {
  ASSERT_EQ(artifact_.args[1].scalar_type, "tensor_map");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact_));
  const size_t n = size_t{kRows} * kCols;
  std::vector<float> x(n), out(n, -1.0f);
  for (size_t i = 0; i < n; ++i) x[i] = 0.25f * static_cast<float>(i % 1013) - 7.0f;
  ASSERT_OK_AND_ASSIGN(DeviceMemory dx, DeviceMemory::Allocate(driver_, n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(DeviceMemory dout, DeviceMemory::Allocate(driver_, n * sizeof(float)));
  ASSERT_OK(KTUNE_CU(driver_, MemcpyHtoD, dx.ptr(), x.data(), n * sizeof(float)));
  ASSERT_OK(KTUNE_CU(driver_, MemsetD32, dout.ptr(), 0x7fc00000u, n));  // NaN
  ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(driver_));
  ASSERT_OK(kernel->Launch(stream.get(),
                           std::map<std::string, void*>{{"x", reinterpret_cast<void*>(dx.ptr())},
                                                        {"out", reinterpret_cast<void*>(dout.ptr())}}));
  ASSERT_OK(KTUNE_CU(driver_, StreamSynchronize, stream.get()));
  ASSERT_OK(KTUNE_CU(driver_, MemcpyDtoH, out.data(), dout.ptr(), n * sizeof(float)));
  int wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != x[i] && wrong++ < 5) ADD_FAILURE() << "out[" << i << "] = " << out[i];
  }
  EXPECT_EQ(wrong, 0);
}

TEST_F(TmaLoadedKernelGpuTest, AMisalignedBufferIsRefused) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact_));
  ASSERT_OK_AND_ASSIGN(DeviceMemory d, DeviceMemory::Allocate(driver_, 2 * kRows * kCols * 4));
  EXPECT_THAT(kernel->Launch(nullptr, std::map<std::string, void*>{
                                          {"x", reinterpret_cast<void*>(d.ptr() + 4)},
                                          {"out", reinterpret_cast<void*>(d.ptr() + kRows * kCols * 4)}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("16-byte aligned")));
}

}  // namespace
}  // namespace ktune::client
