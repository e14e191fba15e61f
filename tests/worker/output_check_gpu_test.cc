// The GPU output check against the host's CompareBuffers on the same bytes: every dtype,
// random values with mismatches planted at the tolerance's edge (on it, and one step past
// it), NaNs and infinities on either side, the poison pattern, and a buffer with no
// mismatch. Skips without a CUDA driver or GPU.
#include "server/worker/output_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "server/worker/driver.h"
#include "server/worker/host_buffers.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/worker_gpu_fixture.h"

namespace ktune {
namespace {

class OutputCheckGpuTest : public testing::WorkerGpuFixture {
 protected:
  void SetUp() override {
    WorkerGpuFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_OK_AND_ASSIGN(check_, OutputCheck::Load(driver_, 132));
  }

  // Both checks of `got` against `want`; the GPU's must equal the host's field by field.
  void ExpectSameAsHost(DType dtype, const std::string& got, const std::string& want,
                        double atol, double rtol, int64_t expect_mismatches) {
    const Comparison host = CompareBuffers(dtype, got, want, atol, rtol);
    DeviceMemory g = Upload(got), w = Upload(want);
    ASSERT_OK_AND_ASSIGN(Comparison dev,
                         check_.Compare(dtype, g.ptr(), w.ptr(), got.size() / DTypeSize(dtype),
                                        atol, rtol, stream_.get()));
    const std::string what(DTypeName(dtype));
    EXPECT_EQ(host.mismatches, expect_mismatches) << what;
    EXPECT_EQ(dev.elements, host.elements) << what;
    EXPECT_EQ(dev.mismatches, host.mismatches) << what;
    EXPECT_EQ(dev.max_abs_error, host.max_abs_error) << what;
    EXPECT_EQ(dev.first_index, host.first_index) << what;
    if (host.mismatches > 0) {
      EXPECT_TRUE(dev.first_got == host.first_got ||
                  (std::isnan(dev.first_got) && std::isnan(host.first_got)))
          << what << " " << dev.first_got << " vs " << host.first_got;
      EXPECT_EQ(dev.first_want, host.first_want) << what;
    }
  }

  OutputCheck check_;
};

void Put(DType dtype, std::string& bytes, int64_t i, double v) {
  EncodeElement(dtype, v, bytes.data() + i * DTypeSize(dtype));
}
double Get(DType dtype, const std::string& bytes, int64_t i) {
  return DecodeElement(dtype, bytes.data() + i * DTypeSize(dtype));
}

TEST_F(OutputCheckGpuTest, AgreesWithTheHostOnEveryDtype) {
  constexpr int64_t kN = (1 << 20) + 37;  // many blocks' strides, and a ragged end
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    v1::Fill fill;
    fill.set_kind(v1::Fill::UNIFORM);
    fill.set_lo(dtype == DType::kI32 ? -1000 : -4);
    fill.set_hi(dtype == DType::kI32 ? 1000 : 4);
    ASSERT_OK_AND_ASSIGN(std::string want, GenerateFill(dtype, kN, fill, 7));
    std::string got = want;
    const double atol = dtype == DType::kI32 ? 1 : 0.25, rtol = 0.125;

    // No mismatch: the same bytes.
    ExpectSameAsHost(dtype, got, want, atol, rtol, 0);

    // Planted differences, from a high index down so the first one is not the lowest
    // written.
    std::mt19937_64 rng(11);
    int64_t planted = 0;
    auto at = [&] { return std::uniform_int_distribution<int64_t>(0, kN - 1)(rng); };
    for (int k = 0; k < 200; ++k) {
      const int64_t i = at();
      const double w = Get(dtype, want, i);
      // Far outside the tolerance: a mismatch in every dtype.
      Put(dtype, got, i, w + 8 * (atol + rtol * std::fabs(w)) + 1);
    }
    // Exactly on the bound (passes) where the dtype can hold it: want 1, got 1 + atol +
    // rtol = 1.375 (f32, f16, bf16, fp8 e4m3 hold it; e5m2 rounds it, i32 too).
    Put(dtype, want, 5, 1.0);
    Put(dtype, got, 5, 1.0 + atol + rtol);
    // Special values, both sides.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    if (dtype != DType::kI32) {
      Put(dtype, want, 10, nan);
      Put(dtype, got, 10, nan);  // NaN for NaN: passes
      Put(dtype, want, 11, 1.0);
      Put(dtype, got, 11, nan);  // a NaN where a number was: fails, error infinite
      if (dtype != DType::kF8E4M3) {  // e4m3 has no infinity: it saturates
        Put(dtype, want, 12, inf);
        Put(dtype, got, 12, inf);  // the same infinity: passes
        Put(dtype, want, 13, inf);
        Put(dtype, got, 13, -inf);  // the other one: fails
      }
    }
    // The poison pattern where an output was never written.
    std::memset(got.data() + 20 * DTypeSize(dtype), 0xFF, DTypeSize(dtype));
    planted = CompareBuffers(dtype, got, want, atol, rtol).mismatches;
    ASSERT_GT(planted, 150);
    ExpectSameAsHost(dtype, got, want, atol, rtol, planted);
  }
}

// One mismatch at the very last element: the ragged end is read.
TEST_F(OutputCheckGpuTest, TheLastElementCounts) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    constexpr int64_t kN = 1000003;
    v1::Fill fill;
    fill.set_kind(v1::Fill::UNIFORM);
    fill.set_lo(-1);
    fill.set_hi(1);
    ASSERT_OK_AND_ASSIGN(std::string want, GenerateFill(dtype, kN, fill, 3));
    std::string got = want;
    Put(dtype, got, kN - 1, Get(dtype, want, kN - 1) + 100);
    ExpectSameAsHost(dtype, got, want, 1e-3, 1e-3, 1);
  }
}

}  // namespace
}  // namespace ktune
