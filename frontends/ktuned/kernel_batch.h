// One GetKernels call's answers, collected as its keys resolve (at once for a cache hit or a
// bad key, later from the resolver's threads) and handed on together when the last arrives.
//
// A response must fit the daemon's max message size: the results are kept in request order
// while their bytes fit `max_bytes`; a resolved key past that point is answered
// RESOURCE_EXHAUSTED with `retry` set (the caller asks for it again in another call), and a
// key whose answer alone cannot fit is answered RESOURCE_EXHAUSTED without `retry`.
//
// Thread-safe: Set may be called from any thread, once per index.
#ifndef KTUNE_SERVER_SERVICE_KERNEL_BATCH_H_
#define KTUNE_SERVER_SERVICE_KERNEL_BATCH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// OK for 1..MAX_KERNELS_PER_CALL keys; INVALID_ARGUMENT naming `requests` otherwise.
absl::Status CheckKernelBatchSize(int size);

class KernelBatch {
 public:
  using Done = std::function<void(v1::GetKernelsResponse)>;
  // `size` keys (REQUIRES: CheckKernelBatchSize(size) is OK); `max_bytes`: the most the
  // response may take on the wire.
  KernelBatch(int size, int64_t max_bytes, Done done);
  KernelBatch(const KernelBatch&) = delete;
  KernelBatch& operator=(const KernelBatch&) = delete;

  // Key `index`'s answer (its message already names the key). The last of the `size`
  // answers calls `done`, on this thread, with every result. REQUIRES: once per index.
  void Set(int index, absl::StatusOr<v1::GetKernelResponse> answer);

 private:
  // Marks the answers that do not fit max_bytes_, in request order.
  void Fit(v1::GetKernelsResponse& response) const;

  const int64_t max_bytes_;
  const Done done_;
  absl::Mutex mu_;
  v1::GetKernelsResponse response_ ABSL_GUARDED_BY(mu_);
  int left_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_KERNEL_BATCH_H_
