// An in-process fake of ktuned's gRPC service on a unix socket in a fresh temp folder, for
// client tests: each RPC runs the std::function the test sets (UNIMPLEMENTED when unset),
// and every call's "authorization" metadata is recorded.
//
// Thread-safety: set the handlers before the first call; authorizations() is safe any time.
#ifndef KTUNE_TESTS_CLIENT_FAKE_KTUNE_SERVICE_H_
#define KTUNE_TESTS_CLIENT_FAKE_KTUNE_SERVICE_H_

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ktune/v1/ktune.grpc.pb.h"
#include "server/base/sha256.h"

namespace ktune::testing {

class FakeKtuneService final : public v1::Ktune::Service {
 public:
  std::function<grpc::Status(grpc::ServerContext*, const v1::GetKernelRequest&,
                             v1::GetKernelResponse*)>
      get_kernel;
  std::function<grpc::Status(grpc::ServerContext*, const v1::GetKernelsRequest&,
                             v1::GetKernelsResponse*)>
      get_kernels;
  std::function<grpc::Status(grpc::ServerContext*, const v1::TuneRequest&,
                             grpc::ServerWriter<v1::TuneEvent>*)>
      tune;
  std::function<grpc::Status(v1::ListTemplatesResponse*)> list_templates;
  std::function<grpc::Status(v1::GetDevicesResponse*)> get_devices;

  // "authorization" of each call so far, in order; "" for a call without one.
  std::vector<std::string> authorizations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return authorizations_;
  }

  grpc::Status GetKernel(grpc::ServerContext* context, const v1::GetKernelRequest* request,
                         v1::GetKernelResponse* response) override {
    Record(context);
    return get_kernel ? get_kernel(context, *request, response) : Unimplemented();
  }
  grpc::Status GetKernels(grpc::ServerContext* context, const v1::GetKernelsRequest* request,
                          v1::GetKernelsResponse* response) override {
    Record(context);
    return get_kernels ? get_kernels(context, *request, response) : Unimplemented();
  }
  grpc::Status Tune(grpc::ServerContext* context, const v1::TuneRequest* request,
                    grpc::ServerWriter<v1::TuneEvent>* writer) override {
    Record(context);
    return tune ? tune(context, *request, writer) : Unimplemented();
  }
  grpc::Status ListTemplates(grpc::ServerContext* context, const v1::ListTemplatesRequest*,
                             v1::ListTemplatesResponse* response) override {
    Record(context);
    return list_templates ? list_templates(response) : Unimplemented();
  }
  grpc::Status GetDevices(grpc::ServerContext* context, const v1::GetDevicesRequest*,
                          v1::GetDevicesResponse* response) override {
    Record(context);
    return get_devices ? get_devices(response) : Unimplemented();
  }

 private:
  static grpc::Status Unimplemented() {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fake: no handler set");
  }
  void Record(grpc::ServerContext* context) {
    std::string value;
    auto it = context->client_metadata().find("authorization");
    if (it != context->client_metadata().end()) value.assign(it->second.data(), it->second.size());
    std::lock_guard<std::mutex> lock(mu_);
    authorizations_.push_back(value);
  }

  mutable std::mutex mu_;
  std::vector<std::string> authorizations_;
};

// The fake served on unix://<fresh temp folder>/ktuned.sock until destroyed.
class FakeKtuned {
 public:
  FakeKtuned() {
    char dir[] = "/tmp/ktune_client_test.XXXXXX";
    dir_ = mkdtemp(dir) ? dir : "/tmp";
    socket_ = dir_ + "/ktuned.sock";
  }
  ~FakeKtuned() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    std::remove(socket_.c_str());
    rmdir(dir_.c_str());
  }

  FakeKtuneService& service() { return service_; }
  // Starts serving (after the handlers are set); false if the port did not bind.
  bool Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    builder.SetMaxSendMessageSize(512 << 20);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && access(socket_.c_str(), F_OK) == 0;
  }
  std::string target() const { return "unix://" + socket_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string socket_;
  FakeKtuneService service_;
  std::unique_ptr<grpc::Server> server_;
};

// Sets the cubin and its (correct) sha256.
inline void SetCubin(v1::KernelArtifact& artifact, const std::string& cubin) {
  artifact.set_cubin(cubin);
  artifact.set_cubin_sha256(Sha256Hex(cubin));
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_CLIENT_FAKE_KTUNE_SERVICE_H_
