#include "server/worker/tensor_map.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_map.h"
#include "server/gpu/tensor_map_proto.h"

namespace ktune {

// manifest.proto's enums and TensorMapDataType carry the driver's values.
static_assert(CU_TENSOR_MAP_SWIZZLE_128B == 3 && CU_TENSOR_MAP_INTERLEAVE_32B == 2 &&
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B == 3 &&
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA == 1);
static_assert(CU_TENSOR_MAP_DATA_TYPE_FLOAT32 == 7 && CU_TENSOR_MAP_DATA_TYPE_FLOAT16 == 6 &&
              CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == 9 && CU_TENSOR_MAP_DATA_TYPE_INT32 == 3 &&
              CU_TENSOR_MAP_DATA_TYPE_UINT8 == 0);
static_assert(sizeof(CUtensorMap) == kTensorMapBytes && alignof(CUtensorMap) >= 64 &&
              alignof(CUtensorMap) <= kTensorMapAlignment);

const v1::BoundTensorMap& TensorMapFor(const v1::KernelBinary& binary, int arg,
                                       const v1::BoundTensorMap& fallback) {
  for (const v1::TensorMapArg& t : binary.tensor_maps()) {
    if (t.arg() == arg) return t.map();
  }
  return fallback;
}

absl::StatusOr<std::unique_ptr<CUtensorMap>> EncodeTensorMap(Driver* driver,
                                                             const v1::BoundTensorMap& proto,
                                                             CUdeviceptr base,
                                                             size_t buffer_bytes) {
  KTUNE_ASSIGN_OR_RETURN(TensorMapDesc map, TensorMapFromProto(proto));
  KTUNE_RETURN_IF_ERROR(CheckTensorMap(map, static_cast<int64_t>(buffer_bytes)));
  if (base % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", map.buffer, "': address is not 16-byte aligned"));
  }
  if (driver->api().TensorMapEncodeTiled == nullptr) {
    return absl::UnavailableError(
        "this CUDA driver has no cuTensorMapEncodeTiled (CUDA 12.0 or later is needed)");
  }
  const int rank = map.rank();
  std::vector<cuuint64_t> dims(map.dims.begin(), map.dims.end());
  // Never an empty array (rank 1 has no strides): the driver gets a valid pointer.
  std::vector<cuuint64_t> strides(map.strides.begin(), map.strides.end());
  if (strides.empty()) strides.push_back(0);
  std::vector<cuuint32_t> box(map.box.begin(), map.box.end());
  std::vector<cuuint32_t> element_strides(map.element_strides.begin(),
                                          map.element_strides.end());
  // C++17's aligned new honours CUtensorMap's alignas (64 or 128 by CUDA version).
  auto out = std::make_unique<CUtensorMap>();
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(
      driver, TensorMapEncodeTiled, out.get(),
      static_cast<CUtensorMapDataType>(TensorMapDataType(map.dtype)),
      static_cast<cuuint32_t>(rank), reinterpret_cast<void*>(base), dims.data(),
      strides.data(), box.data(), element_strides.data(),
      static_cast<CUtensorMapInterleave>(map.interleave),
      static_cast<CUtensorMapSwizzle>(map.swizzle),
      static_cast<CUtensorMapL2promotion>(map.l2_promotion),
      static_cast<CUtensorMapFloatOOBfill>(map.oob_fill)));
  return out;
}

}  // namespace ktune
