#include "frontends/ktuned/reactors.h"

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ktune {

grpc::Status CancelStatus(grpc::CallbackServerContext* ctx) {
  if (absl::FromChrono(ctx->deadline()) <= absl::Now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "the caller's deadline passed first; the tuning job goes on");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
}

bool UnaryOnce::Claim() {
  absl::MutexLock lock(&mu);
  if (claimed) return false;
  claimed = true;
  return true;
}

bool UnaryOnce::Claimed() {
  absl::MutexLock lock(&mu);
  return claimed;
}

void UnaryOnce::Finish(const grpc::Status& s) {
  if (Claim()) reactor->Finish(s);
}

UnaryCall::UnaryCall(grpc::CallbackServerContext* ctx)
    : ctx_(ctx), once_(std::make_shared<UnaryOnce>()) {
  once_->reactor = this;
}

void UnaryCall::OnCancel() { once_->Finish(CancelStatus(ctx_)); }

void StreamState::Push(v1::TuneEvent event) {
  {
    absl::MutexLock lock(&mu);
    if (finished || final_status) return;
    pending.push_back(std::move(event));
    if (writing) return;
    writing = true;
    current = std::move(pending.front());
    pending.pop_front();
  }
  reactor->StartWrite(&current);
}

void StreamState::End(grpc::Status status) {
  {
    absl::MutexLock lock(&mu);
    if (finished || final_status) return;
    final_status = std::move(status);
    if (writing) return;  // OnWriteDone finishes
    finished = true;
  }
  reactor->Finish(*final_status);
}

void StreamState::WriteDone(bool ok) {
  grpc::Status finish;
  {
    absl::MutexLock lock(&mu);
    writing = false;
    if (finished) return;
    if (ok && !pending.empty()) {
      writing = true;
      current = std::move(pending.front());
      pending.pop_front();
    } else if (!ok || final_status) {
      finished = true;
      finish = ok ? *final_status
                  : grpc::Status(grpc::StatusCode::CANCELLED, "the stream was broken");
    } else {
      return;  // idle until the next Push or End
    }
  }
  if (writing_started(finish)) {
    reactor->StartWrite(&current);
  } else {
    reactor->Finish(finish);
  }
}

bool StreamState::writing_started(const grpc::Status&) {
  absl::MutexLock lock(&mu);
  return writing;
}

TuneStream::TuneStream(grpc::CallbackServerContext* ctx)
    : ctx_(ctx), state_(std::make_shared<StreamState>()) {
  state_->reactor = this;
}

void TuneStream::OnCancel() { state_->End(CancelStatus(ctx_)); }

}  // namespace ktune
