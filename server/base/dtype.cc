#include "server/base/dtype.h"

namespace ktune {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
  }
  return "?";
}

absl::string_view DTypeCudaName(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    case DType::kI32: return "int";
    case DType::kF8E4M3: return "__nv_fp8_e4m3";
    case DType::kF8E5M2: return "__nv_fp8_e5m2";
  }
  return "?";
}

int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kF8E4M3: return 1;
    case DType::kF8E5M2: return 1;
  }
  return 0;
}

bool IsRequestDType(DType t) { return t != DType::kI32; }

std::optional<DType> ParseDType(absl::string_view name) {
  for (DType t : kAllDTypes) {
    if (DTypeName(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace ktune
