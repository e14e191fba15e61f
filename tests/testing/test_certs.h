// A throwaway CA with a server and a client certificate, made by the openssl program at test
// time: for ktuned's TLS listener (tests/ktuned) and the fleet tier's rediss:// (tests/fleet).
//
// Not thread-safe; one test at a time.
#ifndef KTUNE_TESTS_TESTING_TEST_CERTS_H_
#define KTUNE_TESTS_TESTING_TEST_CERTS_H_

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
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

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_TEST_CERTS_H_
