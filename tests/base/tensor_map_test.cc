#include "server/base/tensor_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

// A bf16 [rows=64, cols=128] row-major matrix, 64 x 64 boxes.
TensorMapDesc Good() {
  TensorMapDesc m;
  m.buffer = "w";
  m.buffer_arg = 0;
  m.dtype = DType::kBF16;
  m.dims = {128, 64};
  m.strides = {256};
  m.box = {64, 64};
  m.element_strides = {1, 1};
  return m;
}

constexpr int64_t kGoodBytes = 128 * 64 * 2;

TEST(TensorMapTest, GoodMapPasses) {
  EXPECT_OK(CheckTensorMap(Good(), kGoodBytes));
  EXPECT_OK(CheckTensorMap(Good(), -1));  // size unknown: not checked
  EXPECT_THAT(TensorMapExtentBytes(Good()), IsOkAndHolds(kGoodBytes));
}

TEST(TensorMapTest, RankAndCounts) {
  TensorMapDesc m = Good();
  m.dims = {1, 1, 1, 1, 1, 1};
  EXPECT_THAT(CheckTensorMap(m, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dims: rank 6 is outside 1..5")));
  m = Good();
  m.strides = {};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("strides: 0 values for rank 2")));
  m = Good();
  m.box = {64};
  EXPECT_THAT(CheckTensorMap(m, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("box: 1 values for rank 2")));
  m = Good();
  m.element_strides = {1};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("element_strides: 1 values")));
}

TEST(TensorMapTest, BoxLimits) {
  TensorMapDesc m = Good();
  m.box = {64, 512};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("box[1]: 512 is outside 1..256")));
  m.box = {64, 0};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("box[1]: 0 is outside 1..256")));
  m.box = {4, 64};  // 8 bytes
  EXPECT_THAT(CheckTensorMap(m, -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("box[0]: 4 elements x 2 bytes = 8 bytes is not a multiple of 16")));
  m.dtype = DType::kF8E4M3;
  m.box = {16, 64};  // 16 one-byte elements: fine
  EXPECT_OK(CheckTensorMap(m, -1));
}

TEST(TensorMapTest, SwizzleSpanBoundsTheInnerBox) {
  TensorMapDesc m = Good();
  m.swizzle = 3;  // 128B: 64 bf16 fit exactly
  EXPECT_OK(CheckTensorMap(m, kGoodBytes));
  m.swizzle = 2;  // 64B
  EXPECT_THAT(CheckTensorMap(m, kGoodBytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("box[0]: 64 elements x 2 bytes = 128 bytes exceed the 64-byte "
                                 "span of SWIZZLE_64B")));
  m.box = {32, 64};
  EXPECT_OK(CheckTensorMap(m, kGoodBytes));
  m.swizzle = 4;
  EXPECT_THAT(CheckTensorMap(m, kGoodBytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("swizzle: unknown value 4")));
}

TEST(TensorMapTest, StridesDimsAndElementStrides) {
  TensorMapDesc m = Good();
  m.strides = {200};
  EXPECT_THAT(CheckTensorMap(m, -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("strides[0]: 200 bytes is not a positive multiple of 16")));
  m.strides = {int64_t{1} << 40};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("strides[0]: 1099511627776 is not below 2^40")));
  m = Good();
  m.dims = {128, 0};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("dims[1]: 0 is outside 1..2^32")));
  m = Good();
  m.element_strides = {1, 9};
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("element_strides[1]: 9 is outside 1..8")));
}

TEST(TensorMapTest, InterleaveRules) {
  TensorMapDesc m = Good();
  m.interleave = 2;
  EXPECT_THAT(CheckTensorMap(m, -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("interleave: INTERLEAVE_32B needs SWIZZLE_32B and rank >= 3")));
  m.interleave = 1;
  EXPECT_THAT(CheckTensorMap(m, -1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("interleave: an interleaved layout needs rank >= 3")));
}

TEST(TensorMapTest, ExtentMustFitTheBuffer) {
  EXPECT_THAT(CheckTensorMap(Good(), kGoodBytes - 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dims: the map reaches 16384 bytes into buffer 'w', which has 16383")));
  // A padded row stride: the last row needs only its dims[0] elements.
  TensorMapDesc m = Good();
  m.strides = {512};
  EXPECT_THAT(TensorMapExtentBytes(m), IsOkAndHolds(63 * 512 + 256));
  m.dims = {int64_t{1} << 32, int64_t{1} << 32};
  m.strides = {(int64_t{1} << 40) - 16};
  EXPECT_THAT(TensorMapExtentBytes(m),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("overflows int64")));
}

TEST(TensorMapTest, DataTypesAreTheDrivers) {
  EXPECT_EQ(TensorMapDataType(DType::kF32), 7);
  EXPECT_EQ(TensorMapDataType(DType::kF16), 6);
  EXPECT_EQ(TensorMapDataType(DType::kBF16), 9);
  EXPECT_EQ(TensorMapDataType(DType::kI32), 3);
  EXPECT_EQ(TensorMapDataType(DType::kF8E4M3), 0);
  EXPECT_EQ(TensorMapDataType(DType::kF8E5M2), 0);
  EXPECT_EQ(TensorMapString(Good()), "bf16 dims [128, 64] strides [256] box [64, 64]");
}

}  // namespace
}  // namespace ktune
