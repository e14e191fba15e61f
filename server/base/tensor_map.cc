#include "server/base/tensor_map.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/status_macros.h"

namespace ktune {
namespace {

absl::Status Bad(absl::string_view field, int i, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: ", reason));
}

constexpr const char* kSwizzleNames[] = {"none", "32B", "64B", "128B"};

}  // namespace

int TensorMapDataType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 7;
    case DType::kF16: return 6;
    case DType::kBF16: return 9;
    case DType::kI32: return 3;
    case DType::kF8E4M3: return 0;
    case DType::kF8E5M2: return 0;
  }
  return 0;
}

absl::StatusOr<int64_t> TensorMapExtentBytes(const TensorMapDesc& map) {
  int64_t total = 0;
  if (map.dims.empty()) return total;
  if (__builtin_mul_overflow(map.dims[0], DTypeSize(map.dtype), &total)) {
    return absl::OutOfRangeError("the tensor map's extent overflows int64");
  }
  for (int i = 1; i < map.rank() && i - 1 < static_cast<int>(map.strides.size()); ++i) {
    int64_t part = 0;
    if (__builtin_mul_overflow(map.dims[i] - 1, map.strides[i - 1], &part) ||
        __builtin_add_overflow(total, part, &total)) {
      return absl::OutOfRangeError("the tensor map's extent overflows int64");
    }
  }
  return total;
}

namespace {

// The lists' lengths, the enums' values and the layouts they allow together.
absl::Status CheckTensorMapLayout(const TensorMapDesc& map) {
  const int rank = map.rank();
  if (rank < 1 || rank > kTensorMapMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("dims: rank ", rank, " is outside 1..5"));
  }
  if (static_cast<int>(map.strides.size()) != rank - 1) {
    return absl::InvalidArgumentError(absl::StrCat("strides: ", map.strides.size(),
                                                   " values for rank ", rank, "; need rank - 1"));
  }
  if (static_cast<int>(map.box.size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("box: ", map.box.size(), " values for rank ", rank));
  }
  if (static_cast<int>(map.element_strides.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "element_strides: ", map.element_strides.size(), " values for rank ", rank));
  }
  if (map.swizzle < 0 || map.swizzle > 3) {
    return absl::InvalidArgumentError(absl::StrCat("swizzle: unknown value ", map.swizzle));
  }
  if (map.interleave < 0 || map.interleave > 2) {
    return absl::InvalidArgumentError(absl::StrCat("interleave: unknown value ", map.interleave));
  }
  if (map.l2_promotion < 0 || map.l2_promotion > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("l2_promotion: unknown value ", map.l2_promotion));
  }
  if (map.oob_fill < 0 || map.oob_fill > 1) {
    return absl::InvalidArgumentError(absl::StrCat("oob_fill: unknown value ", map.oob_fill));
  }
  if (map.interleave == 2 && (map.swizzle != 1 || rank < 3)) {
    return absl::InvalidArgumentError(
        "interleave: INTERLEAVE_32B needs SWIZZLE_32B and rank >= 3");
  }
  if (map.interleave != 0 && rank < 3) {
    return absl::InvalidArgumentError("interleave: an interleaved layout needs rank >= 3");
  }
  return absl::OkStatus();
}

// Each dim, stride, box and element stride within the hardware's range.
absl::Status CheckTensorMapRanges(const TensorMapDesc& map) {
  const int rank = map.rank();
  for (int i = 0; i < rank; ++i) {
    if (map.dims[i] < 1 || map.dims[i] > kTensorMapMaxDim) {
      return Bad("dims", i, absl::StrCat(map.dims[i], " is outside 1..2^32"));
    }
  }
  const int64_t stride_align = map.interleave == 2 ? 32 : 16;
  for (int i = 0; i < rank - 1; ++i) {
    const int64_t s = map.strides[i];
    if (s <= 0 || s % stride_align != 0) {
      return Bad("strides", i,
                 absl::StrCat(s, " bytes is not a positive multiple of ", stride_align));
    }
    if (s >= kTensorMapStrideLimit) return Bad("strides", i, absl::StrCat(s, " is not below 2^40"));
  }
  for (int i = 0; i < rank; ++i) {
    if (map.box[i] < 1 || map.box[i] > kTensorMapMaxBox) {
      return Bad("box", i, absl::StrCat(map.box[i], " is outside 1..256"));
    }
    if (map.element_strides[i] < 1 || map.element_strides[i] > kTensorMapMaxElementStride) {
      return Bad("element_strides", i, absl::StrCat(map.element_strides[i], " is outside 1..8"));
    }
  }
  return absl::OkStatus();
}

// The box's inner row: whole 16-byte units, within the swizzle's span.
absl::Status CheckTensorMapInnerBox(const TensorMapDesc& map) {
  const int64_t elem = DTypeSize(map.dtype);
  const int64_t inner_bytes = map.box[0] * elem;
  if (map.interleave == 0 && inner_bytes % 16 != 0) {
    return Bad("box", 0,
               absl::StrCat(map.box[0], " elements x ", elem, " bytes = ", inner_bytes,
                            " bytes is not a multiple of 16"));
  }
  if (map.interleave == 0 && map.swizzle != 0) {
    const int64_t span = int64_t{16} << map.swizzle;  // 32, 64, 128
    if (inner_bytes > span) {
      return Bad("box", 0,
                 absl::StrCat(map.box[0], " elements x ", elem, " bytes = ", inner_bytes,
                              " bytes exceed the ", span, "-byte span of SWIZZLE_",
                              kSwizzleNames[map.swizzle]));
    }
  }
  return absl::OkStatus();
}

// The map's reach within its buffer of `buffer_bytes` bytes.
absl::Status CheckTensorMapExtent(const TensorMapDesc& map, int64_t buffer_bytes) {
  absl::StatusOr<int64_t> extent = TensorMapExtentBytes(map);
  if (!extent.ok()) return absl::InvalidArgumentError(absl::StrCat("dims: ", extent.status().message()));
  if (*extent > buffer_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("dims: the map reaches ", *extent, " bytes into buffer '", map.buffer,
                     "', which has ", buffer_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTensorMap(const TensorMapDesc& map, int64_t buffer_bytes) {
  KTUNE_RETURN_IF_ERROR(CheckTensorMapLayout(map));
  KTUNE_RETURN_IF_ERROR(CheckTensorMapRanges(map));
  KTUNE_RETURN_IF_ERROR(CheckTensorMapInnerBox(map));
  if (buffer_bytes < 0) return absl::OkStatus();
  return CheckTensorMapExtent(map, buffer_bytes);
}

std::string TensorMapString(const TensorMapDesc& map) {
  std::string s = absl::StrCat(DTypeName(map.dtype), " dims [", absl::StrJoin(map.dims, ", "),
                               "] strides [", absl::StrJoin(map.strides, ", "), "] box [",
                               absl::StrJoin(map.box, ", "), "]");
  if (map.swizzle > 0 && map.swizzle <= 3) absl::StrAppend(&s, " swizzle ", kSwizzleNames[map.swizzle]);
  return s;
}

}  // namespace ktune
