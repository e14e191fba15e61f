// Element types a template can be asked for, and their names in manifests, requests and
// CUDA C++.
//
// Pure data; thread-safe.
#ifndef KTUNE_SERVER_BASE_DTYPE_H_
#define KTUNE_SERVER_BASE_DTYPE_H_

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

namespace ktune {

enum class DType { kF32, kF16, kBF16, kI32 };

// "f32", "f16", "bf16", "i32".
absl::string_view DTypeName(DType t);
// The CUDA C++ type NVRTC sees: "float", "__half", "__nv_bfloat16", "int".
absl::string_view DTypeCudaName(DType t);
// Size in bytes.
int64_t DTypeSize(DType t);
// Inverse of DTypeName; nullopt for anything else.
std::optional<DType> ParseDType(absl::string_view name);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_DTYPE_H_
