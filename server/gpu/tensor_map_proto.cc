#include "server/gpu/tensor_map_proto.h"

#include "absl/strings/str_cat.h"

namespace ktune {

v1::BoundTensorMap TensorMapToProto(const TensorMapDesc& map) {
  v1::BoundTensorMap p;
  p.set_buffer(map.buffer);
  p.set_buffer_arg(map.buffer_arg);
  p.set_dtype(std::string(DTypeName(map.dtype)));
  for (int64_t v : map.dims) p.add_dims(v);
  for (int64_t v : map.strides) p.add_strides(v);
  for (int64_t v : map.box) p.add_box(v);
  for (int64_t v : map.element_strides) p.add_element_strides(v);
  p.set_swizzle(static_cast<v1::TensorMap::Swizzle>(map.swizzle));
  p.set_interleave(static_cast<v1::TensorMap::Interleave>(map.interleave));
  p.set_l2_promotion(static_cast<v1::TensorMap::L2Promotion>(map.l2_promotion));
  p.set_oob_fill(static_cast<v1::TensorMap::OobFill>(map.oob_fill));
  return p;
}

absl::StatusOr<TensorMapDesc> TensorMapFromProto(const v1::BoundTensorMap& p) {
  TensorMapDesc map;
  std::optional<DType> dtype = ParseDType(p.dtype());
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("dtype: unknown '", p.dtype(), "'"));
  map.dtype = *dtype;
  map.buffer = p.buffer();
  map.buffer_arg = p.buffer_arg();
  map.dims.assign(p.dims().begin(), p.dims().end());
  map.strides.assign(p.strides().begin(), p.strides().end());
  map.box.assign(p.box().begin(), p.box().end());
  map.element_strides.assign(p.element_strides().begin(), p.element_strides().end());
  map.swizzle = p.swizzle();
  map.interleave = p.interleave();
  map.l2_promotion = p.l2_promotion();
  map.oob_fill = p.oob_fill();
  return map;
}

}  // namespace ktune
