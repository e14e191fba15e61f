#include "frontends/ktuned/kernel_batch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "frontends/ktuned/convert.h"

namespace ktune {
namespace {

// What a result costs on the wire beyond its response's own bytes: its tag, length, code
// and message are far below this.
constexpr int64_t kResultOverheadBytes = 8 << 10;

}  // namespace

absl::Status CheckKernelBatchSize(int size) {
  if (size == 0) return absl::InvalidArgumentError("requests: empty; give at least one key");
  if (size > v1::MAX_KERNELS_PER_CALL) {
    return absl::InvalidArgumentError(absl::StrCat("requests: ", size, " keys; at most ",
                                                   v1::MAX_KERNELS_PER_CALL,
                                                   " per call (split them over several calls)"));
  }
  return absl::OkStatus();
}

KernelBatch::KernelBatch(int size, int64_t max_bytes, Done done)
    : max_bytes_(max_bytes), done_(std::move(done)), left_(size) {
  for (int i = 0; i < size; ++i) response_.add_results();
}

void KernelBatch::Set(int index, absl::StatusOr<v1::GetKernelResponse> answer) {
  v1::GetKernelsResponse finished;
  {
    absl::MutexLock lock(&mu_);
    v1::KernelResult* r = response_.mutable_results(index);
    if (answer.ok()) {
      *r->mutable_response() = *std::move(answer);
    } else {
      // The same code and cut message GetKernel would have answered with.
      const grpc::Status s = ToGrpcStatus(answer.status());
      r->set_code(s.error_code());
      r->set_message(s.error_message());
    }
    if (--left_ > 0) return;
    finished.Swap(&response_);
  }
  Fit(finished);
  done_(std::move(finished));
}

void KernelBatch::Fit(v1::GetKernelsResponse& response) const {
  int64_t used = 0;
  for (int i = 0; i < response.results_size(); ++i) {
    v1::KernelResult* r = response.mutable_results(i);
    if (!r->has_response()) continue;
    const int64_t bytes = static_cast<int64_t>(r->response().ByteSizeLong()) + kResultOverheadBytes;
    if (used + bytes <= max_bytes_) {
      used += bytes;
      continue;
    }
    const bool alone_too_big = bytes > max_bytes_;
    r->clear_response();
    r->set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
    r->set_retry(!alone_too_big);
    r->set_message(absl::StrCat(
        "requests[", i, "]: its artifact (", bytes - kResultOverheadBytes, " bytes) ",
        alone_too_big ? "is larger than the daemon's max message size"
                      : "did not fit in this response; ask for it again in another call"));
  }
}

}  // namespace ktune
