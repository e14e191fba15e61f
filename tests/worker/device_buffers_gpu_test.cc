// The GPU's fills and digests against the host's on the same arguments (label gpu): every
// dtype and fill kind, counts with ragged ends, byte for byte; digests of buffers whose
// length is not a whole number of words. Skips without a CUDA driver or GPU.
#include "server/worker/device_buffers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "server/worker/driver.h"
#include "server/worker/host_buffers.h"
#include "tests/testing/fills.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/worker_gpu_fixture.h"

namespace ktune {
namespace {

using ::ktune::testing::MakeFill;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

class DeviceBuffersGpuTest : public testing::WorkerGpuFixture {
 protected:
  void SetUp() override {
    WorkerGpuFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_OK_AND_ASSIGN(buffers_, DeviceBuffers::Load(driver_, 132));
  }

  // What the GPU fills, read back.
  std::string FillOnGpu(DType dtype, int64_t count, const v1::Fill& fill, uint64_t seed) {
    const size_t bytes = static_cast<size_t>(count * DTypeSize(dtype));
    absl::StatusOr<DeviceMemory> m = DeviceMemory::Allocate(driver_, bytes + 8);
    EXPECT_TRUE(m.ok()) << m.status();
    EXPECT_OK(buffers_.Fill(dtype, m->ptr(), count, fill, seed, stream_.get()));
    EXPECT_OK(KTUNE_CU(driver_, StreamSynchronize, stream_.get()));
    std::string out(bytes, '\0');
    if (bytes > 0) {
      EXPECT_OK(KTUNE_CU(driver_, MemcpyDtoH, out.data(), m->ptr(), bytes));
    }
    return out;
  }

  DeviceBuffers buffers_;
};

TEST_F(DeviceBuffersGpuTest, FillsTheHostsBytesForEveryDtypeAndKind) {
  const std::vector<v1::Fill> fills = {
      MakeFill(v1::Fill::UNIFORM, -1, 1),
      MakeFill(v1::Fill::UNIFORM, 0.5, 1.5),
      // Past fp8 e4m3's and f16's finite range: saturation and overflow on both sides.
      MakeFill(v1::Fill::UNIFORM, -70000, 70000),
      // Down to f16's and fp8's subnormals.
      MakeFill(v1::Fill::UNIFORM, -1e-5, 1e-5),
      MakeFill(v1::Fill::UNIFORM, -1000.5, 1000.5),
      MakeFill(v1::Fill::CONSTANT, 0.3, 0),
      MakeFill(v1::Fill::CONSTANT, -2.5, 0),
      MakeFill(v1::Fill::ZERO, 0, 0),
  };
  // One element, a ragged few, and many blocks' strides with a ragged end.
  for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{77}, int64_t{(1 << 20) + 37}}) {
    for (DType dtype : kAllDTypes) {
      for (size_t f = 0; f < fills.size(); ++f) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " count ", count, " fill ", f));
        for (uint64_t seed : {uint64_t{0}, uint64_t{12345}}) {
          ASSERT_OK_AND_ASSIGN(std::string host, GenerateFill(dtype, count, fills[f], seed));
          const std::string gpu = FillOnGpu(dtype, count, fills[f], seed);
          ASSERT_EQ(gpu.size(), host.size());
          size_t first = 0;
          while (first < host.size() && gpu[first] == host[first]) ++first;
          EXPECT_EQ(first, host.size()) << "first differing byte " << first;
        }
      }
    }
  }
}

TEST_F(DeviceBuffersGpuTest, RefusesWhatTheHostRefusesAndNormal) {
  ASSERT_OK_AND_ASSIGN(DeviceMemory m, DeviceMemory::Allocate(driver_, 64));
  EXPECT_THAT(buffers_.Fill(DType::kF32, m.ptr(), 4, MakeFill(v1::Fill::UNIFORM, 1, 1), 0,
                            stream_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lo < hi")));
  EXPECT_THAT(buffers_.Fill(DType::kF32, m.ptr(), -1, MakeFill(v1::Fill::ZERO, 0, 0), 0,
                            stream_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative count")));
  EXPECT_FALSE(DeviceBuffers::CanFill(MakeFill(v1::Fill::NORMAL, 0, 1)));
  EXPECT_THAT(buffers_.Fill(DType::kF32, m.ptr(), 4, MakeFill(v1::Fill::NORMAL, 0, 1), 0,
                            stream_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NORMAL")));
}

TEST_F(DeviceBuffersGpuTest, DigestsAsTheHostDoes) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1000003},
                       (size_t{64} << 20) + 5}) {
    SCOPED_TRACE(bytes);
    std::string data(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
    // Bytes past the buffer's end must not count.
    const DeviceMemory m = Upload(data + std::string(8, '\xAB'));
    ASSERT_OK_AND_ASSIGN(std::string gpu, buffers_.Digest(m.ptr(), bytes, stream_.get()));
    EXPECT_EQ(gpu, OutputDigest(data));
  }
}

}  // namespace
}  // namespace ktune
