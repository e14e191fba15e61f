// Helpers for the operator-side tests of ktuned: a fixture with the test template "tiny", a
// SQLite store and a FakeCompiler to serve; a throwaway CA (tests/testing/test_certs.h); and
// gRPC health checking without the generated health stubs (Debian's gRPC ships no
// grpc/health/v1 headers).
//
// Not thread-safe; one test at a time.
#ifndef KTUNE_TESTS_SERVICE_OPS_TESTING_H_
#define KTUNE_TESTS_SERVICE_OPS_TESTING_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "frontends/ktuned/ktune_server.h"
#include "server/base/file.h"
#include "server/store/store.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/test_certs.h"

namespace ktune::testing {

// A fresh temporary folder holding a SQLite store, the test templates, a FakeCompiler, and
// the ServerOptions of a ktuned over them (no GPU: the test adds its gpu_factory).
class TinyServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    auto registry = LoadTemplateRegistry(TestTemplatesDir());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    auto store = store::OpenSqliteStore(dir_ + "/ktune.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  ServerOptions BaseOptions(const std::string& listen) {
    ServerOptions o;
    o.listen = listen;
    o.registry = registry_.get();
    o.store = store_.get();
    o.compiler = &compiler_;
    o.compile_threads = 2;
    return o;
  }

  std::string dir_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<store::Store> store_;
  FakeCompiler compiler_;
};

// grpc.health.v1.Health/Check for `service` over `channel`: 1 SERVING, 2 NOT_SERVING,
// 3 SERVICE_UNKNOWN (as HealthCheckResponse.ServingStatus); -1 when the call failed.
// The two one-field messages are written and read by hand.
inline int HealthStatus(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  std::string request;
  if (!service.empty()) {
    request = absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service);
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  if (!done.get_future().get().ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!resp.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return 0;  // UNKNOWN (the default value is not sent)
  if (bytes.size() != 2 || bytes[0] != '\x08') return -1;
  return bytes[1];
}

// grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo asked to list the services
// over `channel`, with "authorization: Bearer <token>" unless `token` is empty: the call's
// status, and in *answered whether a response came. The one-field request is written by hand.
inline grpc::Status ReflectionListServices(const std::shared_ptr<grpc::Channel>& channel,
                                           const std::string& token, bool* answered) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&] { return cq.Next(&tag, &ok) && ok; };
  call->StartCall(nullptr);
  step();
  grpc::Slice slice(std::string("\x3a\x00", 2));  // list_services: ""
  grpc::ByteBuffer request(&slice, 1), response;
  call->Write(request, nullptr);
  step();
  call->WritesDone(nullptr);
  step();
  call->Read(&response, nullptr);
  *answered = step();
  grpc::Status status;
  call->Finish(&status, nullptr);
  step();
  return status;
}

// A plain TCP connection to 127.0.0.1:port that says nothing (the descriptor; -1 when
// connect fails). The caller closes it.
inline int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True iff the peer closes `fd` (end of stream or a reset) within `timeout`; what it sends
// meanwhile is read and dropped.
inline bool ClosedByPeerWithin(int fd, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  char buf[256];
  while (absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now()))) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
  return false;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_SERVICE_OPS_TESTING_H_
