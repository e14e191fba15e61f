// The check of a candidate's outputs on the GPU: output_check.cu's kernel, loaded from the
// PTX that NVRTC made of it at build time, over one buffer against the reference's copy.
// It gives what CompareBuffers (host_buffers.h) gives for the same bytes, without reading
// the buffer back: the worker's check was most of a measurement at 10^7-10^8 elements.
//
// Thread-compatible; every call on the current context (the one the check was loaded in).
#ifndef KTUNE_SERVER_WORKER_OUTPUT_CHECK_H_
#define KTUNE_SERVER_WORKER_OUTPUT_CHECK_H_

#include <cuda.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "server/base/dtype.h"
#include "server/worker/driver.h"
#include "server/worker/host_buffers.h"

namespace ktune {

class OutputCheck {
 public:
  // Loads the kernel (the driver JITs the PTX) and its fp8 decode tables. An error where
  // the driver cannot: the caller then checks on the host.
  static absl::StatusOr<OutputCheck> Load(Driver* driver, int sm_count);
  OutputCheck() = default;

  // `count` elements of `dtype` at `got` against `want`, with ElementPasses' rule, after
  // the work already on `stream` (which this waits for). The first mismatch's two values
  // are read back; nothing else is.
  absl::StatusOr<Comparison> Compare(DType dtype, CUdeviceptr got, CUdeviceptr want,
                                     size_t count, double atol, double rtol, CUstream stream);

 private:
  Driver* driver_ = nullptr;
  int blocks_ = 0;
  Module module_;
  CUfunction function_ = nullptr;
  DeviceMemory result_;      // one CheckResult (output_check.cu)
  DeviceMemory fp8_tables_;  // 256 doubles for f8e4m3, then 256 for f8e5m2
};

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_OUTPUT_CHECK_H_
