// Test helper: a call to a ktuned method by its path with the request as raw bytes, as a
// client that does not use ktune.proto's stubs could make it (another version's, a fuzzer):
// one message, then the half-close, the answers counted. It serves unary and
// server-streaming methods alike: on the wire they differ only in how many answers come.
#ifndef KTUNE_TESTS_TESTING_RAW_CALL_H_
#define KTUNE_TESTS_TESTING_RAW_CALL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ktune::testing {

// Bytes no protobuf message parses from: a field tag whose varint never ends.
inline const std::string kUnparsableBytes(11, '\xff');

// Each Ktune method's path and the request type its bytes must parse as; Tune is the
// server-streaming one.
inline const std::pair<std::string, std::string> kKtuneMethods[] = {
    {"/ktune.v1.Ktune/GetKernel", "ktune.v1.GetKernelRequest"},
    {"/ktune.v1.Ktune/GetKernels", "ktune.v1.GetKernelsRequest"},
    {"/ktune.v1.Ktune/Tune", "ktune.v1.TuneRequest"},
    {"/ktune.v1.Ktune/ListTemplates", "ktune.v1.ListTemplatesRequest"},
    {"/ktune.v1.Ktune/ListEntries", "ktune.v1.ListEntriesRequest"},
    {"/ktune.v1.Ktune/GetDevices", "ktune.v1.GetDevicesRequest"},
};

struct RawReply {
  grpc::Status status;
  int answers = 0;  // response messages received
};

// `bytes` as the one request of `method` on `channel`; with `token`, the bearer metadata.
inline RawReply RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                        const std::string& bytes, const std::string& token = "",
                        absl::Duration deadline = absl::Seconds(10)) {
  class Call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    Call(grpc::GenericStub* stub, grpc::ClientContext* ctx, const std::string& method,
         const std::string& bytes) {
      grpc::Slice slice(bytes);
      request_ = grpc::ByteBuffer(&slice, 1);
      stub->PrepareBidiStreamingCall(ctx, method, grpc::StubOptions(), this);
      StartWriteLast(&request_, grpc::WriteOptions());
      StartRead(&answer_);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (!ok) return;
      ++reply_.answers;
      StartRead(&answer_);
    }
    // gRPC's last touch of the call: it may be destroyed once Wait returns.
    void OnDone(const grpc::Status& status) override {
      reply_.status = status;
      done_.Notify();
    }
    RawReply Wait() {
      done_.WaitForNotification();
      return reply_;
    }

   private:
    grpc::ByteBuffer request_, answer_;
    // Written by one reaction at a time, all before OnDone; read after it.
    RawReply reply_;
    absl::Notification done_;
  };
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  Call call(&stub, &ctx, method, bytes);
  return call.Wait();
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_RAW_CALL_H_
