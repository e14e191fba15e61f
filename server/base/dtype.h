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

// kF8E4M3 and kF8E5M2 are the OCP fp8 formats of <cuda_fp8.h> (e4m3: bias 7, no
// infinity, finite max 448; e5m2: bias 15, IEEE-like, finite max 57344).
enum class DType { kF32, kF16, kBF16, kI32, kF8E4M3, kF8E5M2 };

// Every dtype, in declaration order.
inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,     DType::kBF16,
                                       DType::kI32,  DType::kF8E4M3, DType::kF8E5M2};

// "f32", "f16", "bf16", "i32", "f8e4m3", "f8e5m2".
absl::string_view DTypeName(DType t);
// The CUDA C++ type NVRTC sees: "float", "__half", "__nv_bfloat16", "int", "__nv_fp8_e4m3",
// "__nv_fp8_e5m2" (the last two from <cuda_fp8.h>).
absl::string_view DTypeCudaName(DType t);
// Size in bytes.
int64_t DTypeSize(DType t);
// Whether a template may be asked for it (every type but i32, which only fixed buffers use).
bool IsRequestDType(DType t);
// Inverse of DTypeName; nullopt for anything else.
std::optional<DType> ParseDType(absl::string_view name);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_DTYPE_H_
