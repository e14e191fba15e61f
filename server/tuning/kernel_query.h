// KernelQuery: one checked kernel request (template, dtype, shape, GPU), as the kernel
// resolver takes it. ktuned's request_validation.h makes one from a proto request.
//
// Plain value; thread-compatible.
#ifndef KTUNE_SERVER_TUNING_KERNEL_QUERY_H_
#define KTUNE_SERVER_TUNING_KERNEL_QUERY_H_

#include <functional>
#include <memory>

#include "server/base/dtype.h"
#include "server/templates/instance.h"
#include "server/templates/kernel_template.h"
#include "server/templates/shape.h"

namespace ktune {

struct KernelQuery {
  std::shared_ptr<const KernelTemplate> tmpl;
  DType dtype = DType::kF32;
  Shape shape;
  int gpu = 0;
  // The reference bound for this shape on the GPU's target: validation needs its buffers'
  // sizes, and every answer takes its argument list from it, so it is bound once.
  Instance reference;
  // True once nobody waits for the answer any more (the call was cancelled, or its
  // deadline passed): queued work for it is skipped. Empty: always wanted. Thread-safe.
  std::function<bool()> abandoned;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_KERNEL_QUERY_H_
