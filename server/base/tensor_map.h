// A CUDA tensor map (CUtensorMap, for TMA) as numbers: what a manifest's TensorMap evaluates to
// for one candidate and shape, and what every launcher (ktune-worker, the C++ and Python
// LoadedKernel) hands to cuTensorMapEncodeTiled together with the device pointer of the
// buffer it covers. The checks here are the driver's documented rules, so a candidate whose
// map the driver would refuse is left out before it is compiled, and a launcher refuses a
// malformed artifact with the field named instead of a bare CUDA_ERROR_INVALID_VALUE.
//
// Plain value and pure functions; thread-safe. No driver needed.
#ifndef KTUNE_SERVER_BASE_TENSOR_MAP_H_
#define KTUNE_SERVER_BASE_TENSOR_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/base/dtype.h"

namespace ktune {

// Limits of cuTensorMapEncodeTiled (CUDA 12 driver API documentation).
inline constexpr int kTensorMapMaxRank = 5;
inline constexpr int64_t kTensorMapMaxBox = 256;
inline constexpr int64_t kTensorMapMaxElementStride = 8;
inline constexpr int64_t kTensorMapStrideLimit = int64_t{1} << 40;  // strides below this
inline constexpr int64_t kTensorMapMaxDim = int64_t{1} << 32;       // dims at most this
// The map's size, and the alignment of ktune's host copies: cuTensorMapEncodeTiled
// documents 64 bytes, CUDA 13's <cuda.h> declares CUtensorMap alignas(128); 128 meets both.
inline constexpr int kTensorMapBytes = 128;
inline constexpr int kTensorMapAlignment = 128;

struct TensorMapDesc {
  std::string buffer;   // the Buffer arg it covers
  int buffer_arg = -1;  // that arg's index in the same argument list
  DType dtype = DType::kF32;            // the buffer's element type
  std::vector<int64_t> dims;            // elements per dimension, innermost first; rank 1..5
  std::vector<int64_t> strides;         // bytes, of dims[1..]: rank - 1 values
  std::vector<int64_t> box;             // elements of one copy per dimension: rank values
  std::vector<int64_t> element_strides; // rank values (all 1: dense)
  // The values of CUtensorMapSwizzle (0 none, 1 32B, 2 64B, 3 128B), CUtensorMapInterleave
  // (0 none, 1 16B, 2 32B), CUtensorMapL2promotion (0 none, 1 64B, 2 128B, 3 256B) and
  // CUtensorMapFloatOOBfill (0 zeros, 1 NaN_REQUEST_ZERO_FMA): manifest.proto's enums.
  int swizzle = 0;
  int interleave = 0;
  int l2_promotion = 0;
  int oob_fill = 0;

  int rank() const { return static_cast<int>(dims.size()); }
};

// CUtensorMapDataType's value for `dtype`: FLOAT32 7, FLOAT16 6, BFLOAT16 9, INT32 3, and
// UINT8 0 for the fp8 types (TMA moves bytes; the kernel reads them as fp8, as CUTLASS does).
int TensorMapDataType(DType dtype);

// Bytes from the buffer's start to one past the last element the map can address:
// dims[0] * element size + sum over i >= 1 of (dims[i] - 1) * strides[i - 1]. kOutOfRange
// on int64 overflow. REQUIRES: the counts are consistent (CheckTensorMap's first checks).
absl::StatusOr<int64_t> TensorMapExtentBytes(const TensorMapDesc& map);

// Checks `map` against the driver's rules, kInvalidArgument naming the field first, e.g.
// "box[0]: 512 is outside 1..256":
//   rank 1..5 with rank - 1 strides, rank box values and rank element strides;
//   dims 1..2^32; strides multiples of 16 (32 with INTERLEAVE_32B), below 2^40;
//   box 1..256, box[0] * element bytes a multiple of 16 without interleave and, with a
//   swizzle, at most the swizzle's span (32, 64 or 128 bytes); element strides 1..8;
//   the enums within their ranges; INTERLEAVE_32B only with SWIZZLE_32B and rank >= 3;
//   with `buffer_bytes` >= 0, the extent (TensorMapExtentBytes) within the buffer.
absl::Status CheckTensorMap(const TensorMapDesc& map, int64_t buffer_bytes);

// "f16 dims [64, 128] strides [128] box [64, 64] swizzle 128B", for logs and listings.
std::string TensorMapString(const TensorMapDesc& map);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_TENSOR_MAP_H_
