// The whole path on a GPU host (label `gpu`): a running ktuned (KTUNE_DAEMON) tunes
// elementwise for a shape, the C++ client fetches the winner, LoadedKernel loads it into this
// process's context, and its output is checked against a host computation. Skips unless
// KTUNE_DAEMON names a daemon and a GPU is present (deploy/gpu-host/run.sh starts one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "client/lib/ktune_client.h"
#include "client/lib/loaded_kernel.h"
#include "server/worker/driver.h"
#include "tests/testing/status_matchers.h"

namespace ktune::client {
namespace {

TEST(DaemonGpuTest, TunedElementwiseFromKtunedComputesAxpby) {
  const char* target = std::getenv("KTUNE_DAEMON");
  if (target == nullptr || *target == '\0') GTEST_SKIP() << "KTUNE_DAEMON is not set";
  absl::StatusOr<Driver*> driver = Driver::Get();
  if (!driver.ok()) GTEST_SKIP() << "no CUDA driver or GPU: " << driver.status();
  ASSERT_OK_AND_ASSIGN(PrimaryContext context, PrimaryContext::Retain(*driver, 0));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KtuneClient> client, Connect(target, {}));
  constexpr int64_t kN = 1 << 20;
  KernelRequest request{"elementwise", "f32", {{"n", kN}}, Policy::kTune, 0, absl::Minutes(5)};
  ASSERT_OK_AND_ASSIGN(KernelArtifact artifact, client->GetKernel(request));
  EXPECT_EQ(artifact.provenance, Provenance::kExact);
  EXPECT_GT(artifact.metrics.time_ns, 0);
  std::printf("ktuned tuned elementwise f32 n=%lld: %.2f us, %.0f GB/s\n",
              static_cast<long long>(kN), artifact.metrics.time_ns / 1000, artifact.metrics.gbps);

  // A second ask is a store hit with the same kernel.
  request.policy = Policy::kCacheOnly;
  ASSERT_OK_AND_ASSIGN(KernelArtifact hit, client->GetKernel(request));
  EXPECT_EQ(hit.cubin_sha256, artifact.cubin_sha256);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LoadedKernel> kernel, LoadedKernel::Load(artifact));
  std::vector<float> x(kN), y(kN), out(kN, -1.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < kN; ++i) {
    x[i] = u(rng);
    y[i] = u(rng);
  }
  Driver* d = *driver;
  ASSERT_OK_AND_ASSIGN(DeviceMemory dx, DeviceMemory::Allocate(d, kN * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(DeviceMemory dy, DeviceMemory::Allocate(d, kN * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(DeviceMemory dout, DeviceMemory::Allocate(d, kN * sizeof(float)));
  ASSERT_OK(KTUNE_CU(d, MemcpyHtoD, dx.ptr(), x.data(), kN * sizeof(float)));
  ASSERT_OK(KTUNE_CU(d, MemcpyHtoD, dy.ptr(), y.data(), kN * sizeof(float)));
  ASSERT_OK(KTUNE_CU(d, MemsetD32, dout.ptr(), 0x7fc00000u, kN));  // NaN: unwritten fails
  ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(d));
  ASSERT_OK(kernel->Launch(stream.get(),
                           std::map<std::string, void*>{{"x", reinterpret_cast<void*>(dx.ptr())},
                                                        {"y", reinterpret_cast<void*>(dy.ptr())},
                                                        {"out", reinterpret_cast<void*>(dout.ptr())}}));
  ASSERT_OK(KTUNE_CU(d, StreamSynchronize, stream.get()));
  ASSERT_OK(KTUNE_CU(d, MemcpyDtoH, out.data(), dout.ptr(), kN * sizeof(float)));

  // The scalars come from the artifact: the manifest's alpha and beta.
  double alpha = 0, beta = 0;
  for (const KernelArg& a : artifact.args) {
    if (a.name == "alpha") alpha = a.number;
    if (a.name == "beta") beta = a.number;
  }
  int64_t wrong = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const float want = static_cast<float>(alpha) * x[i] + static_cast<float>(beta) * y[i];
    if (!(std::fabs(out[i] - want) <= 1e-6f + 1e-6f * std::fabs(want))) {
      if (wrong++ < 5) ADD_FAILURE() << "out[" << i << "] = " << out[i] << ", want " << want;
    }
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace ktune::client
