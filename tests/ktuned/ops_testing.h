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

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_SERVICE_OPS_TESTING_H_
