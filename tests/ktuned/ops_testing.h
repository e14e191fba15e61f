// Helpers for the operator-side tests of ktuned: a throwaway CA with a server and a client
// certificate made by the openssl program at test time, and gRPC health checking without
// the generated health stubs (Debian's gRPC ships no grpc/health/v1 headers).
//
// Not thread-safe; one test at a time.
#ifndef KTUNE_TESTS_SERVICE_OPS_TESTING_H_
#define KTUNE_TESTS_SERVICE_OPS_TESTING_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <future>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/file.h"

namespace ktune::testing {

// PEM files (and their text) under `dir`: ca.pem signs server.pem (SAN localhost,
// 127.0.0.1) and client.pem (clientAuth).
struct TestCerts {
  std::string dir;
  std::string ca_pem, server_pem, server_key, client_pem, client_key;
  // Not empty when there is no openssl program: the reason to skip.
  std::string skip_reason;
  // Not empty when openssl failed: what it said (a test failure).
  std::string error;
};

inline TestCerts MakeTestCerts(const std::string& dir) {
  TestCerts c;
  c.dir = dir;
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    c.skip_reason = "no openssl program on PATH (deploy/install-deps.sh installs it)";
    return c;
  }
  // EC keys: a second or less for all three, where RSA takes several.
  const std::string script = R"(set -e
k="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $k -days 2 -subj /CN=ktune-test-ca -keyout ca.key -out ca.pem
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
printf 'extendedKeyUsage=clientAuth\n' >client.ext
for who in server client; do
  openssl req $k -subj /CN=ktune-test-$who -keyout $who.key -out $who.csr
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile $who.ext -out $who.pem
done
)";
  if (!AtomicWriteFile(dir + "/make-certs.sh", script).ok() ||
      std::system(absl::StrCat("cd '", dir, "' && sh make-certs.sh >openssl.log 2>&1").c_str()) !=
          0) {
    c.error = absl::StrCat("openssl failed to make test certificates: ",
                           ReadFile(dir + "/openssl.log").value_or("(no log)"));
    return c;
  }
  c.ca_pem = ReadFile(dir + "/ca.pem").value_or("");
  c.server_pem = ReadFile(dir + "/server.pem").value_or("");
  c.server_key = ReadFile(dir + "/server.key").value_or("");
  c.client_pem = ReadFile(dir + "/client.pem").value_or("");
  c.client_key = ReadFile(dir + "/client.key").value_or("");
  return c;
}

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
