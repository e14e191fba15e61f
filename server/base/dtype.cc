#include "server/base/dtype.h"

namespace ktune {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

absl::string_view DTypeCudaName(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    case DType::kI32: return "int";
  }
  return "?";
}

int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

std::optional<DType> ParseDType(absl::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    if (DTypeName(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace ktune
