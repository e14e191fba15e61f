// ktune-worker's tensor maps: a BoundTensorMap of a problem or candidate encoded with
// cuTensorMapEncodeTiled over the problem's device buffer, ready to be passed by value
// (kernelParams points at the 128-byte map).
//
// Thread-compatible; the encoding itself touches no device state (no context needed).
#ifndef KTUNE_SERVER_WORKER_TENSOR_MAP_H_
#define KTUNE_SERVER_WORKER_TENSOR_MAP_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/worker/driver.h"

namespace ktune {

// The map of tensor-map argument `arg` for `binary`: the binary's own evaluation (its
// tensor_maps entry for `arg`), else `fallback` (the problem's, the reference's numbers).
const v1::BoundTensorMap& TensorMapFor(const v1::KernelBinary& binary, int arg,
                                       const v1::BoundTensorMap& fallback);

// Checks `map` (CheckTensorMap, against `buffer_bytes`, and the base's 16-byte alignment)
// and encodes it over `base`. The result is heap-allocated with CUtensorMap's 64-byte
// alignment (at least 64 bytes) and must outlive the launches whose kernelParams point at it.
// kInvalidArgument naming the field for a map the driver's rules refuse; kUnavailable when
// the driver has no cuTensorMapEncodeTiled (before CUDA 12.0); the driver's error
// otherwise.
absl::StatusOr<std::unique_ptr<CUtensorMap>> EncodeTensorMap(Driver* driver,
                                                             const v1::BoundTensorMap& map,
                                                             CUdeviceptr base,
                                                             size_t buffer_bytes);

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_TENSOR_MAP_H_
