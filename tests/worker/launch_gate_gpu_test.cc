// The launch gate on a real GPU (label gpu): work behind a closed gate waits for Open, and
// a gate never opened lets its stream go after its timeout. Skips without a driver or GPU.
#include "server/worker/launch_gate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/worker/device_buffers.h"
#include "tests/testing/fills.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/worker_gpu_fixture.h"

namespace ktune {
namespace {

class LaunchGateGpuTest : public testing::WorkerGpuFixture {
 protected:
  void SetUp() override {
    WorkerGpuFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_OK_AND_ASSIGN(gate_, LaunchGate::Load(driver_));
    ASSERT_OK_AND_ASSIGN(buffers_, DeviceBuffers::Load(driver_, 1));
    ASSERT_OK_AND_ASSIGN(word_, MappedHostMemory::Allocate(driver_, sizeof(float)));
    *static_cast<volatile float*>(word_.host()) = 0;
  }

  // Enqueues a kernel that stores `value` to the mapped word, where the host sees it.
  void EnqueueStore(float value) {
    ASSERT_OK(buffers_.Fill(DType::kF32, word_.device(), 1,
                            testing::MakeFill(v1::Fill::CONSTANT, value), 0, stream_.get()));
  }
  float Word() const { return *static_cast<volatile float*>(word_.host()); }

  LaunchGate gate_;
  DeviceBuffers buffers_;
  MappedHostMemory word_;
};

TEST_F(LaunchGateGpuTest, WorkBehindAClosedGateWaitsForOpen) {
  for (float value : {1.0f, 2.0f, 3.0f}) {  // each Close waits for its own Open
    ASSERT_OK(gate_.Close(stream_.get()));
    EnqueueStore(value);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(Word(), value - 1) << "ran before the gate opened";
    gate_.Open();
    ASSERT_OK(KTUNE_CU(driver_, StreamSynchronize, stream_.get()));
    EXPECT_EQ(Word(), value);
  }
}

TEST_F(LaunchGateGpuTest, AGateNeverOpenedLetsItsStreamGoAfterTheTimeout) {
  const auto began = std::chrono::steady_clock::now();
  ASSERT_OK(gate_.Close(stream_.get()));
  EnqueueStore(7.0f);
  ASSERT_OK(KTUNE_CU(driver_, StreamSynchronize, stream_.get()));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_EQ(Word(), 7.0f);
  EXPECT_GE(s, 0.9 * LaunchGate::kTimeoutNs * 1e-9);
  EXPECT_LT(s, 10.0);
  gate_.Open();  // late: the next Close still waits for its own
  ASSERT_OK(gate_.Close(stream_.get()));
  EnqueueStore(8.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(Word(), 7.0f);
  gate_.Open();
  ASSERT_OK(KTUNE_CU(driver_, StreamSynchronize, stream_.get()));
  EXPECT_EQ(Word(), 8.0f);
}

}  // namespace
}  // namespace ktune
