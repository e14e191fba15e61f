// client/lib/cuda_api.h declares the driver's types itself, without <cuda.h>, so that
// libktune_client needs no CUDA headers: its layouts and enum values, checked here against
// the toolkit's own at compile time (the test's one run-time check is that it built).
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "client/lib/cuda_api.h"

namespace ktune::client {
namespace {

static_assert(kCudaSuccess == CUDA_SUCCESS);
static_assert(kFuncAttributeMaxDynamicSharedSizeBytes ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(kLaunchAttributeProgrammaticStreamSerialization ==
              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);

static_assert(sizeof(CuLaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(CuLaunchAttribute, id) == offsetof(CUlaunchAttribute, id));
static_assert(offsetof(CuLaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(sizeof(CuLaunchAttribute::value) == sizeof(CUlaunchAttributeValue));

static_assert(sizeof(CuLaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(CuLaunchConfig, grid_x) == offsetof(CUlaunchConfig, gridDimX));
static_assert(offsetof(CuLaunchConfig, block_z) == offsetof(CUlaunchConfig, blockDimZ));
static_assert(offsetof(CuLaunchConfig, shared_bytes) ==
              offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(CuLaunchConfig, stream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(CuLaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(CuLaunchConfig, num_attrs) == offsetof(CUlaunchConfig, numAttrs));

TEST(CudaAbiTest, TheDeclaredLayoutsAreTheDriversOwn) {
  CuLaunchAttribute attr{};
  attr.value.programmatic_stream_serialization_allowed = 1;
  CUlaunchAttributeValue value;
  static_assert(sizeof(value) == sizeof(attr.value));
  std::memcpy(&value, &attr.value, sizeof(value));
  EXPECT_EQ(value.programmaticStreamSerializationAllowed, 1);
}

}  // namespace
}  // namespace ktune::client
