#include "server/worker/device_buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/worker/device_buffers_ptx.h"
#include "server/worker/host_buffers.h"
#include "server/worker/kernel_dtype.h"

namespace ktune {
namespace {

constexpr unsigned kThreads = 256;

}  // namespace

absl::StatusOr<DeviceBuffers> DeviceBuffers::Load(Driver* driver, int sm_count) {
  DeviceBuffers d;
  d.driver_ = driver;
  d.blocks_ = std::max(1, sm_count) * 8;
  KTUNE_ASSIGN_OR_RETURN(d.module_, Module::Load(driver, kDeviceBuffersPtx));
  KTUNE_ASSIGN_OR_RETURN(d.fill_, d.module_.Function("ktune_fill"));
  KTUNE_ASSIGN_OR_RETURN(d.digest_, d.module_.Function("ktune_digest"));
  KTUNE_ASSIGN_OR_RETURN(d.sums_, DeviceMemory::Allocate(driver, 2 * sizeof(uint64_t)));
  return d;
}

bool DeviceBuffers::CanFill(const v1::Fill& fill) { return fill.kind() != v1::Fill::NORMAL; }

absl::Status DeviceBuffers::Fill(DType dtype, CUdeviceptr out, int64_t count,
                                 const v1::Fill& fill, uint64_t seed, CUstream stream) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("negative count ", count));
  KTUNE_RETURN_IF_ERROR(ValidateFill(fill));
  if (!CanFill(fill)) {
    return absl::InvalidArgumentError("a NORMAL fill is generated on the host only");
  }
  if (count == 0) return absl::OkStatus();
  unsigned long long n = static_cast<unsigned long long>(count);
  int type = KernelTypeCode(dtype);
  unsigned long long key = seed;
  const bool zero = fill.kind() == v1::Fill::ZERO || fill.kind() == v1::Fill::ZERO_ONCE;
  double lo = zero ? 0.0 : fill.lo(), hi = fill.hi();
  int uniform = fill.kind() == v1::Fill::UNIFORM ? 1 : 0;
  void* params[] = {&out, &n, &type, &key, &lo, &hi, &uniform};
  return KTUNE_CU(driver_, LaunchKernel, fill_, static_cast<unsigned>(blocks_), 1, 1, kThreads, 1,
                  1, 0, stream, params, nullptr);
}

absl::StatusOr<std::string> DeviceBuffers::Digest(CUdeviceptr data, size_t bytes,
                                                  CUstream stream) {
  CUdeviceptr sums = sums_.ptr();
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, sums, 0u, 4, stream));
  if (bytes > 0) {
    unsigned long long n = bytes;
    void* params[] = {&data, &n, &sums};
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, LaunchKernel, digest_, static_cast<unsigned>(blocks_),
                                   1, 1, kThreads, 1, 1, 0, stream, params, nullptr));
  }
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, StreamSynchronize, stream));
  uint64_t host[2];
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoH, host, sums, sizeof(host)));
  return FormatDigest(host[0], host[1], bytes);
}

}  // namespace ktune
