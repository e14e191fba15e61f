// The callback-API reactors of ktuned's handlers: who finishes a unary call that several
// threads may answer (the handler, a job's completion, a resolver thread, the deadline), and
// a server stream that queues events behind the one write gRPC allows in flight.
//
// Thread-safe as each type says. A reactor deletes itself in OnDone; the shared state it
// hands out (UnaryOnce, StreamState) may outlive it, and is inert once the call finished.
#ifndef KTUNE_SERVER_SERVICE_REACTORS_H_
#define KTUNE_SERVER_SERVICE_REACTORS_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// DEADLINE_EXCEEDED when the caller's deadline passed (the tuning job goes on), else
// CANCELLED.
grpc::Status CancelStatus(grpc::CallbackServerContext* ctx);

// Who finishes a unary call: the handler, a job's completion, a resolver thread or the
// call's cancellation (deadline), whichever comes first. The winner (Claim() true) fills the
// response and calls Finish; nobody touches the reactor or the response after that, so the
// reactor may be deleted as soon as gRPC calls OnDone. Thread-safe.
struct UnaryOnce {
  absl::Mutex mu;
  bool claimed ABSL_GUARDED_BY(mu) = false;
  grpc::ServerUnaryReactor* reactor = nullptr;
  bool Claim();
  void Finish(const grpc::Status& s);
  // True once someone finished the call (the answer, or its cancellation or deadline).
  bool Claimed();
};

class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryCall(grpc::CallbackServerContext* ctx);
  const std::shared_ptr<UnaryOnce>& once() { return once_; }
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<UnaryOnce> once_;
};

// The state of one Tune stream, shared with the job's listener and completion callback
// (they may outlive the reactor). One write is in flight at a time; events queue behind it.
// Whoever decides to Finish does so exactly once, with no write in flight. Thread-safe.
struct StreamState {
  absl::Mutex mu;
  grpc::ServerWriteReactor<v1::TuneEvent>* reactor = nullptr;
  std::deque<v1::TuneEvent> pending ABSL_GUARDED_BY(mu);
  v1::TuneEvent current;  // the event being written
  bool writing ABSL_GUARDED_BY(mu) = false;
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::optional<grpc::Status> final_status ABSL_GUARDED_BY(mu);

  void Push(v1::TuneEvent event);
  void End(grpc::Status status);
  void WriteDone(bool ok);

 private:
  // Only this thread changes `writing`/`finished` between WriteDone's decision and here.
  bool writing_started(const grpc::Status&);
};

class TuneStream : public grpc::ServerWriteReactor<v1::TuneEvent> {
 public:
  explicit TuneStream(grpc::CallbackServerContext* ctx);
  const std::shared_ptr<StreamState>& state() { return state_; }
  void OnWriteDone(bool ok) override { state_->WriteDone(ok); }
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<StreamState> state_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_REACTORS_H_
