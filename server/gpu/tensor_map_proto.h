// A tensor map's numbers (server/base/tensor_map.h) as the protocol message that carries
// them to ktune-worker and into artifacts (manifest.proto's BoundTensorMap), and back.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_GPU_TENSOR_MAP_PROTO_H_
#define KTUNE_SERVER_GPU_TENSOR_MAP_PROTO_H_

#include "absl/status/statusor.h"
#include "ktune/v1/manifest.pb.h"
#include "server/base/tensor_map.h"

namespace ktune {

v1::BoundTensorMap TensorMapToProto(const TensorMapDesc& map);

// kInvalidArgument for an unknown dtype ("dtype: unknown 'f64'"). The numbers are taken as
// they are: CheckTensorMap judges them.
absl::StatusOr<TensorMapDesc> TensorMapFromProto(const v1::BoundTensorMap& map);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_TENSOR_MAP_PROTO_H_
