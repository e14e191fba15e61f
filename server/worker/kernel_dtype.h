// How the worker's own kernels (output_check.cu, device_buffers.cu) number element types:
// they include nothing, so each writes the same enum, and the host passes this code.
#ifndef KTUNE_SERVER_WORKER_KERNEL_DTYPE_H_
#define KTUNE_SERVER_WORKER_KERNEL_DTYPE_H_

#include "server/base/dtype.h"

namespace ktune {

inline int KernelTypeCode(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 3;
    case DType::kF8E4M3:
      return 4;
    case DType::kF8E5M2:
      return 5;
  }
  return 0;
}

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_KERNEL_DTYPE_H_
