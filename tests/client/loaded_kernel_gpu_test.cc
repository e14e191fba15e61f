// LoadedKernel on a real GPU: a two-launch kernel compiled here with NVRTC (the second
// launch wants 64 KiB of dynamic shared memory, so the attribute must be raised), served by
// the fake ktuned as an artifact, fetched with GetKernel, loaded into a context this test
// made current, launched, and its output checked; and KernelCache swapping in a tuned cubin
// from its background thread. Skips without a driver or GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/lib/kernel_cache.h"
#include "client/lib/ktune_client.h"
#include "client/lib/loaded_kernel.h"
#include "server/base/status_macros.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/worker/driver.h"
#include "tests/client/fake_ktune_service.h"
#include "tests/testing/status_matchers.h"

namespace ktune::client {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kSource[] = R"(
template <int UNUSED>
__global__ void scale(const float* x, float* y, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
// Stages y through the top of a SMEM_FLOATS-float dynamic shared buffer, then adds one.
template <int SMEM_FLOATS>
__global__ void add_one_via_smem(float* y, int n) {
  extern __shared__ float s[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float* mine = &s[SMEM_FLOATS - blockDim.x + threadIdx.x];
  *mine = i < n ? y[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = *mine + 1.0f;
}
)";
constexpr int kSmemFloats = 16384;  // 64 KiB: above the 48 KiB default
constexpr int kN = 100000;
constexpr float kA = 2.5f;

class LoadedKernelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Driver*> driver = Driver::Get();
    if (!driver.ok()) GTEST_SKIP() << "no CUDA driver or GPU: " << driver.status();
    driver_ = *driver;
    ASSERT_OK_AND_ASSIGN(context_, PrimaryContext::Retain(driver_, 0));
    int major = 0, minor = 0;
    ASSERT_OK(KTUNE_CU(driver_, DeviceGetAttribute, &major,
                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, context_.device()));
    ASSERT_OK(KTUNE_CU(driver_, DeviceGetAttribute, &minor,
                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, context_.device()));
    arch_ = absl::StrCat("--gpu-architecture=sm_", major, minor);
    ASSERT_OK_AND_ASSIGN(CompileResult compiled, Compile(kSource));

    ::ktune::testing::SetCubin(artifact_, compiled.cubin);
    const unsigned blocks = (kN + 255) / 256;
    v1::KernelLaunch* scale = artifact_.add_launches();
    scale->set_lowered_name(compiled.kernels[0].lowered_name);
    for (uint32_t g : {blocks, 1u, 1u}) scale->add_grid(g);
    for (uint32_t b : {256u, 1u, 1u}) scale->add_block(b);
    for (int a : {0, 1, 2, 3}) scale->add_args(a);
    v1::KernelLaunch* add = artifact_.add_launches();
    add->set_lowered_name(compiled.kernels[1].lowered_name);
    for (uint32_t g : {blocks, 1u, 1u}) add->add_grid(g);
    for (uint32_t b : {256u, 1u, 1u}) add->add_block(b);
    add->set_shared_bytes(kSmemFloats * sizeof(float));
    for (int a : {1, 4}) add->add_args(a);
    auto buffer = [&](const char* name, v1::Buffer::Role role) {
      v1::KernelArg* arg = artifact_.add_args();
      arg->set_name(name);
      arg->set_is_buffer(true);
      arg->set_dtype("f32");
      arg->set_count(kN);
      arg->set_role(role);
    };
    buffer("x", v1::Buffer::INPUT);
    buffer("y", v1::Buffer::OUTPUT);
    v1::KernelArg* a = artifact_.add_args();
    a->set_name("a");
    a->set_scalar_type("f32");
    a->set_number(kA);
    v1::KernelArg* n64 = artifact_.add_args();
    n64->set_name("n");
    n64->set_scalar_type("i64");
    n64->set_int_value(kN);
    v1::KernelArg* n32 = artifact_.add_args();
    n32->set_name("n32");
    n32->set_scalar_type("i32");
    n32->set_int_value(kN);
    artifact_.set_template_id("gpu_test");
  }

  // kSource's two kernels (or another source's of the same names) compiled for this GPU.
  absl::StatusOr<CompileResult> Compile(const std::string& source) {
    KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Compiler> compiler, NewNvrtcCompiler(NvrtcOptions{}));
    CompileRequest request;
    request.source = source;
    request.source_name = "loaded_kernel_gpu_test.cu";
    request.name_expressions = {"scale<0>", absl::StrCat("add_one_via_smem<", kSmemFloats, ">")};
    request.options = {arch_};
    KTUNE_ASSIGN_OR_RETURN(CompileResult compiled, compiler->Compile(request));
    if (!compiled.ok) return absl::InternalError(compiled.log);
    return compiled;
  }

  // The artifact as GetKernel returns it from the fake daemon.
  KernelArtifact Fetch() {
    ::ktune::testing::FakeKtuned daemon;
    daemon.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest&,
                                      v1::GetKernelResponse* resp) {
      *resp->mutable_artifact() = artifact_;
      return grpc::Status::OK;
    };
    EXPECT_TRUE(daemon.Start());
    absl::StatusOr<std::unique_ptr<KtuneClient>> client = Connect(daemon.target(), {});
    EXPECT_OK(client.status());
    absl::StatusOr<KernelArtifact> a = (*client)->GetKernel({"gpu_test", "f32", {{"n", kN}}});
    EXPECT_OK(a.status());
    return a.ok() ? *a : KernelArtifact{};
  }

  // Runs `kernel` on fresh x and checks y == a*x + 1.
  void RunAndCheck(const LoadedKernel& kernel, bool by_name) {
    std::vector<float> x(kN), y(kN, -1.0f);
    for (int i = 0; i < kN; ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
    ASSERT_OK_AND_ASSIGN(DeviceMemory dx, DeviceMemory::Allocate(driver_, kN * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(DeviceMemory dy, DeviceMemory::Allocate(driver_, kN * sizeof(float)));
    ASSERT_OK(KTUNE_CU(driver_, MemcpyHtoD, dx.ptr(), x.data(), kN * sizeof(float)));
    ASSERT_OK(KTUNE_CU(driver_, MemsetD32, dy.ptr(), 0x7fc00000u, kN));  // NaN
    void* px = reinterpret_cast<void*>(dx.ptr());
    void* py = reinterpret_cast<void*>(dy.ptr());
    ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(driver_));
    if (by_name) {
      ASSERT_OK(kernel.Launch(stream.get(), std::map<std::string, void*>{{"x", px}, {"y", py}}));
    } else {
      ASSERT_OK(kernel.Launch(stream.get(), std::vector<void*>{px, py, nullptr, nullptr, nullptr}));
    }
    ASSERT_OK(KTUNE_CU(driver_, StreamSynchronize, stream.get()));
    ASSERT_OK(KTUNE_CU(driver_, MemcpyDtoH, y.data(), dy.ptr(), kN * sizeof(float)));
    int wrong = 0;
    for (int i = 0; i < kN; ++i) {
      const float want = kA * x[i] + 1.0f;
      if (!(std::fabs(y[i] - want) <= 1e-5f + 1e-5f * std::fabs(want))) {
        if (wrong++ < 5) ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", want " << want;
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  Driver* driver_ = nullptr;
  PrimaryContext context_;
  std::string arch_;  // --gpu-architecture=sm_XY of this GPU
  v1::KernelArtifact artifact_;
};

TEST_F(LoadedKernelGpuTest, LoadsLaunchesAndComputes) {
  KernelArtifact artifact = Fetch();
  ASSERT_FALSE(artifact.cubin.empty());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact));
  EXPECT_EQ(kernel->context(), static_cast<void*>(context_.context()));
  RunAndCheck(*kernel, /*by_name=*/true);
  RunAndCheck(*kernel, /*by_name=*/false);
}

TEST_F(LoadedKernelGpuTest, SameCubinTwiceSharesTheModuleAndBothRun) {
  KernelArtifact artifact = Fetch();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> first, LoadedKernel::Load(artifact));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> second, LoadedKernel::Load(artifact));
  RunAndCheck(*second, true);
  first.reset();  // the module stays loaded for `second`
  RunAndCheck(*second, true);
  second.reset();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> third, LoadedKernel::Load(artifact));
  RunAndCheck(*third, false);
}

TEST_F(LoadedKernelGpuTest, BadNamesAndBuffers) {
  KernelArtifact artifact = Fetch();
  KernelArtifact renamed = artifact;
  renamed.launches[1].lowered_name = "_Z9no_such_kernelv";
  EXPECT_THAT(LoadedKernel::Load(renamed),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("_Z9no_such_kernelv")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact));
  EXPECT_THAT(kernel->Launch(nullptr, std::map<std::string, void*>{{"x", nullptr}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'y'")));
  EXPECT_THAT(kernel->Launch(nullptr, std::vector<void*>{nullptr, nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 args")));
}

// KernelCache on the GPU: FALLBACK's kernel first, then a tuned one (another cubin of the
// same kernels) that the background thread loads into this test's context, both computing.
TEST_F(LoadedKernelGpuTest, KernelCacheSwapsInTheTunedKernelInTheBackground) {
  artifact_.set_provenance(v1::DEFAULT);
  v1::KernelArtifact tuned = artifact_;
  ASSERT_OK_AND_ASSIGN(CompileResult other,
                       Compile(std::string(kSource) + "__global__ void tuned_marker() {}\n"));
  ::ktune::testing::SetCubin(tuned, other.cubin);
  tuned.set_provenance(v1::EXACT);
  ASSERT_NE(tuned.cubin_sha256(), artifact_.cubin_sha256());
  ::ktune::testing::FakeKtuned daemon;
  daemon.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest&,
                                    v1::GetKernelResponse* resp) {
    *resp->mutable_artifact() = artifact_;
    return grpc::Status::OK;
  };
  daemon.service().get_kernels = [&](grpc::ServerContext*, const v1::GetKernelsRequest& req,
                                     v1::GetKernelsResponse* resp) {
    for (int i = 0; i < req.requests_size(); ++i) {
      *resp->add_results()->mutable_response()->mutable_artifact() = tuned;
    }
    return grpc::Status::OK;
  };
  ASSERT_TRUE(daemon.Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KtuneClient> client, Connect(daemon.target(), {}));
  KernelCacheOptions options;
  options.refresh_period = absl::Milliseconds(10);
  std::unique_ptr<KernelCache> cache = NewKernelCache(std::move(client), options);
  const KernelKey key{"gpu_test", "f32", {{"n", kN}}, 0};
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CachedKernel> first, cache->Get(key));
  EXPECT_EQ(first->provenance, Provenance::kDefault);
  RunAndCheck(*first->kernel, /*by_name=*/false);
  std::shared_ptr<const CachedKernel> now = first;
  for (int i = 0; i < 1000 && now->provenance != Provenance::kExact; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_OK_AND_ASSIGN(now, cache->Get(key));
  }
  ASSERT_EQ(now->provenance, Provenance::kExact);
  EXPECT_EQ(now->cubin_sha256, tuned.cubin_sha256());
  EXPECT_EQ(now->kernel->context(), static_cast<void*>(context_.context()));
  RunAndCheck(*now->kernel, /*by_name=*/false);
  RunAndCheck(*first->kernel, /*by_name=*/true);  // still valid for whoever holds it
}

TEST_F(LoadedKernelGpuTest, NoCurrentContextIsFailedPrecondition) {
  KernelArtifact artifact = Fetch();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact));
  ASSERT_OK(KTUNE_CU(driver_, CtxSetCurrent, nullptr));
  EXPECT_THAT(LoadedKernel::Load(artifact),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no current CUDA context")));
  EXPECT_THAT(kernel->Launch(nullptr, std::vector<void*>(5, reinterpret_cast<void*>(256))),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not current")));
  kernel.reset();  // unloads with its context pushed, though none is current
  ASSERT_OK(KTUNE_CU(driver_, CtxSetCurrent, context_.context()));
}

}  // namespace
}  // namespace ktune::client
