// ktuned's operator side in process: TLS and mutual TLS on a loopback TCP listener (with a
// throwaway CA made by openssl), and gRPC health following the GPU's health. Fakes at the
// compiler and GPU seams, the test template "tiny", a SQLite file in a temporary folder.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/lib/ktune_client.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "frontends/ktuned/ktune_server.h"
#include "frontends/ktuned/listener_probe.h"
#include "tests/ktuned/ops_testing.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

constexpr int kServing = 1;
constexpr int kNotServing = 2;

// A FakeGpu whose Info() the test can make fail (and recover) while the server runs: the
// flag is atomic, since the GPU's queue thread reads it.
class FlakyFakeGpu : public testing::FakeGpu {
 public:
  std::atomic<bool> fail{false};
  absl::StatusOr<v1::DeviceInfo> Info() override {
    if (fail) return absl::UnavailableError("ktune-worker for GPU 0 exited: planted failure");
    return FakeGpu::Info();
  }
};

class OpsServerTest : public testing::TinyServerTest {
 protected:
  void TearDown() override {
    if (server_) server_->Shutdown();
    server_.reset();
  }

  ServerOptions Options(const std::string& listen, bool with_gpu) {
    ServerOptions o = BaseOptions(listen);
    if (with_gpu) {
      o.gpu_factory = [this](int ordinal) -> absl::StatusOr<std::unique_ptr<Gpu>> {
        if (ordinal > 0) return absl::NotFoundError("no such GPU");
        auto gpu = std::make_unique<FlakyFakeGpu>();
        gpu_ = gpu.get();
        return gpu;
      };
    }
    return o;
  }
  void Start(ServerOptions o) {
    auto server = StartKtuneServer(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::string Target() const { return absl::StrCat("127.0.0.1:", server_->port()); }

  // ListTemplates through libktune_client with `options` (short deadline: a refused
  // handshake shows as UNAVAILABLE when it passes or at once).
  absl::Status ListTemplates(client::ClientOptions options) {
    options.default_deadline = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<client::KtuneClient>> c = client::Connect(Target(), options);
    if (!c.ok()) return c.status();
    absl::StatusOr<client::TemplateList> list = (*c)->ListTemplates();
    if (!list.ok()) return list.status();
    if (list->templates.size() != 1 || list->templates[0].name != "tiny") {
      return absl::InternalError("unexpected template list");
    }
    return absl::OkStatus();
  }

  FlakyFakeGpu* gpu_ = nullptr;
  std::unique_ptr<KtuneServer> server_;
};

TEST_F(OpsServerTest, TlsServesTlsClientsOnly) {
  testing::TestCerts certs = testing::MakeTestCerts(dir_);
  if (!certs.skip_reason.empty()) GTEST_SKIP() << certs.skip_reason;
  ASSERT_TRUE(certs.error.empty()) << certs.error;
  ServerOptions o = Options("127.0.0.1:0", /*with_gpu=*/false);
  o.tls_cert_pem = certs.server_pem;
  o.tls_key_pem = certs.server_key;
  Start(std::move(o));
  ASSERT_GT(server_->port(), 0);

  client::ClientOptions tls;
  tls.tls_root_certs_pem = certs.ca_pem;
  EXPECT_OK(ListTemplates(tls));
  // The listener probe speaks TLS to it (a ClientHello, answered by a ServerHello).
  EXPECT_OK(ProbeListener(Target(), server_->port(), /*tls=*/true, absl::Seconds(5)));
  // A TLS client that does not trust the CA, and a plaintext client, are both refused.
  client::ClientOptions other_roots;
  other_roots.tls_root_certs_pem = certs.client_pem;  // not a CA
  EXPECT_THAT(ListTemplates(other_roots),
              testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(ListTemplates({}), testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST_F(OpsServerTest, MutualTlsNeedsTheClientCertificate) {
  testing::TestCerts certs = testing::MakeTestCerts(dir_);
  if (!certs.skip_reason.empty()) GTEST_SKIP() << certs.skip_reason;
  ASSERT_TRUE(certs.error.empty()) << certs.error;
  ServerOptions o = Options("127.0.0.1:0", /*with_gpu=*/false);
  o.tls_cert_pem = certs.server_pem;
  o.tls_key_pem = certs.server_key;
  o.tls_client_ca_pem = certs.ca_pem;
  Start(std::move(o));

  client::ClientOptions no_cert;
  no_cert.tls_root_certs_pem = certs.ca_pem;
  EXPECT_THAT(ListTemplates(no_cert),
              testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  client::ClientOptions with_cert = no_cert;
  with_cert.tls_client_cert_chain_pem = certs.client_pem;
  with_cert.tls_client_key_pem = certs.client_key;
  EXPECT_OK(ListTemplates(with_cert));
}

TEST_F(OpsServerTest, TlsSettingsThatDoNotFitAreRefused) {
  ServerOptions unix_tls = Options("unix://" + dir_ + "/ktuned.sock", false);
  unix_tls.tls_cert_pem = "cert";
  unix_tls.tls_key_pem = "key";
  EXPECT_THAT(StartKtuneServer(std::move(unix_tls)).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unix socket")));
  ServerOptions half = Options("127.0.0.1:0", false);
  half.tls_cert_pem = "cert";
  EXPECT_THAT(StartKtuneServer(std::move(half)).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("private key")));
  ServerOptions ca_only = Options("127.0.0.1:0", false);
  ca_only.tls_client_ca_pem = "ca";
  EXPECT_THAT(StartKtuneServer(std::move(ca_only)).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mTLS")));
}

// 0.0.0.0 and unix-abstract: used to start plaintext with no token and no word.
TEST_F(OpsServerTest, AnExposedListenerNeedsTlsATokenOrInsecure) {
  EXPECT_THAT(StartKtuneServer(Options("0.0.0.0:0", false)).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("neither TLS nor a token")));
  EXPECT_THAT(StartKtuneServer(Options("unix-abstract:ktune-test-" + std::to_string(getpid()),
                                       false))
                  .status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("insecure")));
  ServerOptions with_token = Options("0.0.0.0:0", false);
  with_token.token = "s3cret";
  Start(std::move(with_token));
  EXPECT_GT(server_->port(), 0);
  server_->Shutdown();
  server_.reset();
  ServerOptions insecure = Options("0.0.0.0:0", false);
  insecure.insecure = true;
  Start(std::move(insecure));
  EXPECT_GT(server_->port(), 0);
}

TEST_F(OpsServerTest, HealthFollowsTheGpu) {
  Start(Options("unix://" + dir_ + "/run/ktuned.sock", /*with_gpu=*/true));
  ASSERT_FALSE(server_->compile_only());
  auto channel = grpc::CreateChannel("unix://" + dir_ + "/run/ktuned.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Ktune::NewStub(channel);
  auto devices = [&] {
    grpc::ClientContext ctx;
    v1::GetDevicesResponse r;
    EXPECT_TRUE(stub->GetDevices(&ctx, {}, &r).ok());
    EXPECT_EQ(r.devices_size(), 1);
    return r.devices_size() == 1 ? r.devices(0) : v1::Device();
  };
  auto tune = [&](int64_t n) {
    v1::GetKernelRequest req;
    req.set_template_id("tiny");
    req.set_dtype("f32");
    (*req.mutable_shape())["n"] = n;
    req.set_policy(v1::TUNE);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    v1::GetKernelResponse resp;
    return stub->GetKernel(&ctx, req, &resp);
  };

  EXPECT_TRUE(server_->serving());
  EXPECT_EQ(testing::HealthStatus(channel, ""), kServing);
  EXPECT_EQ(testing::HealthStatus(channel, "ktune.v1.Ktune"), kServing);
  EXPECT_TRUE(devices().healthy());
  ASSERT_TRUE(tune(1000).ok());

  // The worker dies: the next job fails on Info() and the only GPU turns unhealthy.
  gpu_->fail = true;
  grpc::Status failed = tune(2000);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE) << failed.error_message();
  EXPECT_FALSE(server_->serving());
  EXPECT_EQ(testing::HealthStatus(channel, ""), kNotServing);
  EXPECT_EQ(testing::HealthStatus(channel, "ktune.v1.Ktune"), kNotServing);
  v1::Device sick = devices();
  EXPECT_FALSE(sick.healthy());
  EXPECT_THAT(sick.status(), HasSubstr("planted failure"));
  // Lookups still serve.
  {
    v1::GetKernelRequest req;
    req.set_template_id("tiny");
    req.set_dtype("f32");
    (*req.mutable_shape())["n"] = 1000;
    req.set_policy(v1::CACHE_ONLY);
    grpc::ClientContext ctx;
    v1::GetKernelResponse resp;
    EXPECT_TRUE(stub->GetKernel(&ctx, req, &resp).ok());
  }

  // It comes back: the next job's Info() succeeds and the GPU is healthy again.
  gpu_->fail = false;
  grpc::Status ok = tune(3000);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_TRUE(server_->serving());
  EXPECT_EQ(testing::HealthStatus(channel, ""), kServing);
  v1::Device well = devices();
  EXPECT_TRUE(well.healthy());
  EXPECT_EQ(well.status(), "");
}

TEST_F(OpsServerTest, CompileOnlyIsAlwaysServing) {
  Start(Options("unix://" + dir_ + "/ktuned.sock", /*with_gpu=*/false));
  ASSERT_TRUE(server_->compile_only());
  auto channel =
      grpc::CreateChannel("unix://" + dir_ + "/ktuned.sock", grpc::InsecureChannelCredentials());
  EXPECT_TRUE(server_->serving());
  EXPECT_EQ(testing::HealthStatus(channel, ""), kServing);
  EXPECT_EQ(testing::HealthStatus(channel, "ktune.v1.Ktune"), kServing);
}

// A TCP socket on loopback that listens and never accepts (*port: its port; -1 on failure):
// the kernel completes handshakes into its backlog and nobody reads them, like gRPC 1.51's
// listener after an EMFILE.
int WedgedListener(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A connection that never speaks HTTP/2 used to hold a descriptor for gRPC's default 120 s
// handshake timeout; now for ServerOptions::first_frame_timeout.
TEST_F(OpsServerTest, AnIdleConnectionIsClosedAfterTheFirstFrameTimeout) {
  ServerOptions o = Options("127.0.0.1:0", /*with_gpu=*/false);
  o.first_frame_timeout = absl::Seconds(1);
  Start(std::move(o));
  const int fd = testing::ConnectIdle(server_->port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(testing::ClosedByPeerWithin(fd, absl::Seconds(8)));
  close(fd);
  EXPECT_OK(ListTemplates({}));  // the listener itself goes on
}

// The listener probe: a server that answers is alive; a socket that takes connections but
// never reads them (what gRPC 1.51 leaves after an EMFILE) and a closed port are not.
TEST_F(OpsServerTest, ListenerProbeTellsAnAnsweringServerFromAWedgedOne) {
  Start(Options("127.0.0.1:0", /*with_gpu=*/false));
  EXPECT_OK(ProbeListener("127.0.0.1:0", server_->port(), false, absl::Seconds(5)));
  const std::string socket = dir_ + "/probe.sock";
  ServerOptions on_unix = Options("unix://" + socket, /*with_gpu=*/false);
  absl::StatusOr<std::unique_ptr<KtuneServer>> second = StartKtuneServer(std::move(on_unix));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_OK(ProbeListener("unix://" + socket, 0, false, absl::Seconds(5)));
  (*second)->Shutdown();

  int port = 0;
  const int wedged = WedgedListener(&port);
  ASSERT_GE(wedged, 0);
  EXPECT_THAT(ProbeListener("127.0.0.1:0", port, false, absl::Seconds(1)),
              testing::StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("took the connection but: no answer in time")));
  close(wedged);
  EXPECT_THAT(ProbeListener("127.0.0.1:0", port, false, absl::Seconds(1)),
              testing::StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connect")));
}

// Three failed probes in a row make the listener dead, and the callback says why; a server
// whose probes are answered stays up.
TEST_F(OpsServerTest, ListenerWatchFindsAWedgedListenerButNotAnAnsweringOne) {
  // The watch probes the wrong port: a listener that never answers, seen from the server.
  int port = 0;
  const int wedged = WedgedListener(&port);
  ASSERT_GE(wedged, 0);
  absl::Notification dead;
  std::string why;
  ListenerWatchOptions w;
  w.listen = "127.0.0.1:0";
  w.port = port;
  w.interval = absl::Milliseconds(100);
  std::unique_ptr<ListenerWatch> watch = StartListenerWatch(w, [&](const std::string& reason) {
    why = reason;
    dead.Notify();
  });
  ASSERT_TRUE(dead.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_THAT(why, HasSubstr("3 probes in a row failed"));
  close(wedged);

  ServerOptions o = Options("127.0.0.1:0", /*with_gpu=*/false);
  o.listener_probe_interval = absl::Milliseconds(100);
  absl::Notification server_dead;
  o.on_listener_dead = [&](const std::string&) { server_dead.Notify(); };
  Start(std::move(o));
  auto channel = grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(testing::HealthStatus(channel, ""), kServing);
  absl::SleepFor(absl::Seconds(1));  // several probes, all answered
  EXPECT_FALSE(server_dead.HasBeenNotified());
  EXPECT_TRUE(server_->serving());
}

// The server's own probe, end to end: its unix socket's path taken over by a listener that
// never answers (what its clients would meet after gRPC 1.51's listener died), the server
// turns NOT_SERVING and calls on_listener_dead.
TEST_F(OpsServerTest, AServerWhoseListenerStopsAnsweringTurnsNotServing) {
  const std::string socket = dir_ + "/w.sock";
  ServerOptions o = Options("unix://" + socket, /*with_gpu=*/false);
  o.listener_probe_interval = absl::Milliseconds(100);
  absl::Notification dead;
  std::string why;
  o.on_listener_dead = [&](const std::string& reason) {
    why = reason;
    dead.Notify();
  };
  Start(std::move(o));
  EXPECT_TRUE(server_->serving());
  ASSERT_EQ(unlink(socket.c_str()), 0);
  const int wedged = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(wedged, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket.size(), sizeof(addr.sun_path));
  memcpy(addr.sun_path, socket.data(), socket.size());
  ASSERT_EQ(bind(wedged, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(wedged, 16), 0);
  EXPECT_TRUE(dead.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_THAT(why, HasSubstr("took the connection but: no answer in time"));
  EXPECT_FALSE(server_->serving());
  close(wedged);
}

// gRPC's reflection service used to answer without the token; now a reflection call without
// it is cancelled unanswered, and with it answered.
TEST_F(OpsServerTest, ReflectionWantsTheToken) {
  ServerOptions o = Options("127.0.0.1:0", /*with_gpu=*/false);
  o.token = "s3cret";
  o.reflection = true;
  Start(std::move(o));
  auto channel = grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials());
  bool answered = true;
  EXPECT_FALSE(testing::ReflectionListServices(channel, "", &answered).ok());
  EXPECT_FALSE(answered);
  EXPECT_FALSE(testing::ReflectionListServices(channel, "wrong", &answered).ok());
  EXPECT_FALSE(answered);
  const grpc::Status with_token = testing::ReflectionListServices(channel, "s3cret", &answered);
  EXPECT_TRUE(with_token.ok()) << with_token.error_message();
  EXPECT_TRUE(answered);
  EXPECT_EQ(testing::HealthStatus(channel, ""), kServing);  // health stays open
}

}  // namespace
}  // namespace ktune
