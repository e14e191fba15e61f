// A fixture for tests of the worker's GPU pieces in this process: the driver, the primary
// context of GPU 0 and a stream, or the test skips, saying why, where there is no driver or
// GPU (CI's machines).
#ifndef KTUNE_TESTS_TESTING_WORKER_GPU_FIXTURE_H_
#define KTUNE_TESTS_TESTING_WORKER_GPU_FIXTURE_H_

#include <gtest/gtest.h>

#include <string>

#include "server/worker/driver.h"
#include "tests/testing/status_matchers.h"

namespace ktune::testing {

class WorkerGpuFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Driver*> driver = Driver::Get();
    if (!driver.ok()) GTEST_SKIP() << "no CUDA driver: " << driver.status();
    driver_ = *driver;
    absl::StatusOr<PrimaryContext> context = PrimaryContext::Retain(driver_, 0);
    if (!context.ok()) GTEST_SKIP() << "no GPU: " << context.status();
    context_ = *std::move(context);
    ASSERT_OK_AND_ASSIGN(stream_, Stream::Create(driver_));
  }

  // `bytes` on the GPU, in memory `slack` bytes longer.
  DeviceMemory Upload(const std::string& bytes, size_t slack = 8) {
    absl::StatusOr<DeviceMemory> m = DeviceMemory::Allocate(driver_, bytes.size() + slack);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return DeviceMemory();
    if (!bytes.empty()) {
      EXPECT_OK(KTUNE_CU(driver_, MemcpyHtoD, m->ptr(), bytes.data(), bytes.size()));
    }
    return *std::move(m);
  }

  Driver* driver_ = nullptr;
  PrimaryContext context_;
  Stream stream_;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_WORKER_GPU_FIXTURE_H_
