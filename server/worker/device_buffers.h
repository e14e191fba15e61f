// A problem's buffers filled and digested on the GPU: device_buffers.cu's kernels, loaded
// from the PTX that NVRTC made of them at build time. Fill writes what GenerateFill
// (host_buffers.h) generates for the same arguments, byte for byte, without the host
// generating and uploading it; Digest gives OutputDigest of a buffer without reading it
// back. SetProblem spent most of its time on those at 10^8 elements.
//
// Thread-compatible; every call on the current context (the one the kernels were loaded in).
#ifndef KTUNE_SERVER_WORKER_DEVICE_BUFFERS_H_
#define KTUNE_SERVER_WORKER_DEVICE_BUFFERS_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/manifest.pb.h"
#include "server/base/dtype.h"
#include "server/worker/driver.h"

namespace ktune {

class DeviceBuffers {
 public:
  // Loads the kernels (the driver JITs the PTX). An error where the driver cannot: the
  // caller then fills and digests on the host.
  static absl::StatusOr<DeviceBuffers> Load(Driver* driver, int sm_count);
  DeviceBuffers() = default;

  // Whether Fill makes `fill`: every kind but NORMAL, whose Box-Muller goes through the host
  // C library's log, sin and cos.
  static bool CanFill(const v1::Fill& fill);

  // Enqueues on `stream` the fill of `count` elements of `dtype` at `out` with
  // GenerateFill(dtype, count, fill, seed)'s bytes. kInvalidArgument for what GenerateFill
  // refuses, and for a fill CanFill says no to.
  absl::Status Fill(DType dtype, CUdeviceptr out, int64_t count, const v1::Fill& fill,
                    uint64_t seed, CUstream stream);

  // OutputDigest of the `bytes` bytes at `data` (8-byte aligned), after the work already
  // on `stream` (which this waits for).
  absl::StatusOr<std::string> Digest(CUdeviceptr data, size_t bytes, CUstream stream);

 private:
  Driver* driver_ = nullptr;
  int blocks_ = 0;
  Module module_;
  CUfunction fill_ = nullptr;
  CUfunction digest_ = nullptr;
  DeviceMemory sums_;  // the digest's two 64-bit sums
};

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_DEVICE_BUFFERS_H_
