#include "server/base/dtype.h"

#include <gtest/gtest.h>

#include <optional>

namespace ktune {
namespace {

TEST(DTypeTest, Helpers) {
  struct Row {
    DType t;
    const char* name;
    const char* cuda;
    int64_t size;
  };
  for (const Row& r :
       {Row{DType::kF32, "f32", "float", 4}, Row{DType::kF16, "f16", "__half", 2},
        Row{DType::kBF16, "bf16", "__nv_bfloat16", 2}, Row{DType::kI32, "i32", "int", 4},
        Row{DType::kF8E4M3, "f8e4m3", "__nv_fp8_e4m3", 1},
        Row{DType::kF8E5M2, "f8e5m2", "__nv_fp8_e5m2", 1}}) {
    EXPECT_EQ(DTypeName(r.t), r.name);
    EXPECT_EQ(DTypeCudaName(r.t), r.cuda);
    EXPECT_EQ(DTypeSize(r.t), r.size);
    EXPECT_EQ(ParseDType(r.name), r.t);
  }
}

TEST(DTypeTest, EveryTypeButI32IsARequestType) {
  for (DType t : kAllDTypes) EXPECT_EQ(IsRequestDType(t), t != DType::kI32) << DTypeName(t);
}

TEST(DTypeTest, ParseRejectsOtherNames) {
  for (const char* bad : {"", "F32", "float", "f64", "fp16", "bfloat16", "i32 ", "int", "fp8", "f8", "e4m3"}) {
    EXPECT_EQ(ParseDType(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace ktune
