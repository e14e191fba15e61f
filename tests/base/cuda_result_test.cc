#include "server/base/cuda_result.h"

#include <gtest/gtest.h>

namespace ktune {
namespace {

using absl::StatusCode;

TEST(CudaResultTest, EachFamilyHasItsCode) {
  EXPECT_EQ(CudaResultCode(kCudaErrorOutOfMemory), StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaResultCode(kCudaErrorLaunchOutOfResources), StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaResultCode(kCudaErrorNoDevice), StatusCode::kUnavailable);
  EXPECT_EQ(CudaResultCode(kCudaErrorNotInitialized), StatusCode::kUnavailable);
  EXPECT_EQ(CudaResultCode(kCudaErrorInvalidValue), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaResultCode(kCudaErrorNoBinaryForGpu), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaResultCode(kCudaErrorInvalidHandle), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaResultCode(kCudaErrorNotFound), StatusCode::kNotFound);
  EXPECT_EQ(CudaResultCode(kCudaErrorInvalidContext), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaResultCode(kCudaErrorNotSupported), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaResultCode(12345), StatusCode::kInternal);
}

TEST(CudaResultTest, StickyErrorsAreInternal) {
  for (int r : {kCudaErrorIllegalAddress, kCudaErrorLaunchFailed, kCudaErrorEccUncorrectable,
                kCudaErrorAssert, kCudaErrorUnknown}) {
    EXPECT_TRUE(IsStickyCudaResult(r)) << r;
    EXPECT_EQ(CudaResultCode(r), StatusCode::kInternal) << r;
  }
  EXPECT_FALSE(IsStickyCudaResult(kCudaErrorOutOfMemory));
  EXPECT_FALSE(IsStickyCudaResult(kCudaErrorInvalidValue));
}

}  // namespace
}  // namespace ktune
