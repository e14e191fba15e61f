// Runs the built ktuned program as an operator would: on a unix socket in a temporary
// folder with the shipped templates, from a config file, with TLS on loopback; checks that
// it serves, that its socket is 0600, that SIGTERM ends it with status 0, the exit status
// and message of flags that do not fit, and how it answers and logs a flood of bad requests.
// The worker path is made not to exist, so ktuned runs compile-only on any host (a GPU host
// included) and the test needs no GPU.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/lib/ktune_client.h"
#include "server/base/file.h"
#include "tests/ktuned/ops_testing.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/ktuned_process.h"
#include "tests/testing/raw_call.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

using testing::Ktuned;

class KtunedTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::NewTempDir(); }
  // Flags every run gets: a db in the temp folder, the shipped templates, no worker.
  std::vector<std::string> Base() const {
    return {"--db",        dir_ + "/ktune.db",
            "--templates", testing::ShippedTemplatesDir(),
            "--worker",    dir_ + "/no-such-ktune-worker"};
  }
  // Flags of a ktuned with its own store `db` (in the temp folder) on `listen`.
  std::vector<std::string> Own(const std::string& db, const std::string& listen) const {
    return {"--db",     dir_ + "/" + db, "--templates", testing::ShippedTemplatesDir(),
            "--worker", dir_ + "/no-such-ktune-worker", "--listen", listen};
  }
  std::vector<std::string> With(std::vector<std::string> more) const {
    std::vector<std::string> args = Base();
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  static absl::StatusOr<client::TemplateList> Templates(const std::string& target,
                                                        client::ClientOptions options = {}) {
    options.default_deadline = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<client::KtuneClient>> c = client::Connect(target, options);
    if (!c.ok()) return c.status();
    return (*c)->ListTemplates();
  }
  std::string dir_;
};

TEST_F(KtunedTest, ServesOnAUnixSocketAndStopsOnSigterm) {
  const std::string socket = dir_ + "/run/ktuned.sock";
  Ktuned d(dir_, With({"--listen", "unix://" + socket}));
  ASSERT_THAT(d.WaitServing(), HasSubstr(socket)) << d.Stderr();
  struct stat st;
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  absl::StatusOr<client::TemplateList> list = Templates("unix://" + socket);
  ASSERT_TRUE(list.ok()) << list.status() << "\n" << d.Stderr();
  EXPECT_GE(list->templates.size(), 1u);
  EXPECT_TRUE(list->errors.empty());
  bool has_rmsnorm = false;
  for (const client::TemplateInfo& t : list->templates) has_rmsnorm |= t.name == "rmsnorm";
  EXPECT_TRUE(has_rmsnorm);

  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("shutting down"));
}

// FALLBACK on an empty store at a row length no vector width divides (an odd vocabulary):
// the default config through the edge path (EDGE = 1, VEC kept), compiled by NVRTC, where
// the default once failed every such shape with FAILED_PRECONDITION.
TEST_F(KtunedTest, FallbackServesAnOddRowLength) {
  const std::string socket = dir_ + "/ktuned.sock";
  Ktuned d(dir_, With({"--listen", "unix://" + socket}));
  ASSERT_THAT(d.WaitServing(), HasSubstr(socket)) << d.Stderr();
  client::ClientOptions options;
  options.default_deadline = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<client::KtuneClient>> c =
      client::Connect("unix://" + socket, options);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<client::KernelArtifact> a = (*c)->GetKernel(
      {"softmax", "bf16", {{"rows", 3}, {"cols", 32001}, {"out_bytes", 2}},
       client::Policy::kFallback});
  ASSERT_TRUE(a.ok()) << a.status() << "\n" << d.Stderr();
  EXPECT_EQ(a->provenance, client::Provenance::kDefault);
  EXPECT_EQ(a->params.at("EDGE"), 1);
  EXPECT_GT(a->params.at("VEC"), 1);
  EXPECT_EQ(a->cubin.substr(0, 4), "\x7f" "ELF");
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
}

TEST_F(KtunedTest, ConfigFileSetsFlagsAndTheCommandLineWins) {
  const std::string from_file = dir_ + "/file.sock", from_flag = dir_ + "/flag.sock";
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/ktuned.conf",
                              absl::StrCat("# test config\n"
                                           "listen = \"unix://",
                                           from_file, "\"\n", "db = \"", dir_, "/conf.db\"\n",
                                           "templates = \"", testing::ShippedTemplatesDir(), "\"\n",
                                           "worker = \"", dir_, "/no-such-worker\"\n",
                                           "queue = 8\n"
                                           "reflection = true\n"))
                  .ok());
  Ktuned d(dir_, {"--config", dir_ + "/ktuned.conf", "--listen", "unix://" + from_flag});
  ASSERT_THAT(d.WaitServing(), HasSubstr(from_flag)) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr(dir_ + "/conf.db"));
  EXPECT_TRUE(Templates("unix://" + from_flag).ok());
  struct stat st;
  EXPECT_NE(stat(from_file.c_str(), &st), 0);
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
}

TEST_F(KtunedTest, ConfigFileWithAnUnknownKeyIsUsage) {
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/bad.conf", "lisen = \"unix:///tmp/x.sock\"\n").ok());
  Ktuned d(dir_, With({"--config", dir_ + "/bad.conf"}));
  EXPECT_EQ(d.Wait(absl::Seconds(10)), 2) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("lisen"));
}

// --pch: on keeps NVRTC's precompiled headers in a scratch folder that goes with the daemon
// (auto: from 8 compile threads; this machine may have fewer); anything else is usage.
TEST_F(KtunedTest, PrecompiledHeadersFlag) {
  Ktuned bad(dir_, With({"--pch", "sometimes"}));
  EXPECT_EQ(bad.Wait(absl::Seconds(10)), 2) << bad.Stderr();
  EXPECT_THAT(bad.Stderr(), HasSubstr("--pch"));

  Ktuned d(dir_, With({"--listen", "unix://" + dir_ + "/k.sock", "--pch", "on"}));
  ASSERT_FALSE(d.WaitServing().empty()) << d.Stderr();
  const std::string err = d.Stderr();
  const size_t at = err.find("precompiled headers in ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string folder = err.substr(at + 23, err.find('\n', at) - at - 23);
  EXPECT_TRUE(IsDir(folder)) << folder;
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
  EXPECT_FALSE(IsDir(folder)) << folder;
}

// --idle-compile: on starts the helpers' pool whatever the threads (auto: from 8 compile
// threads; this machine may have fewer), off never; anything else is usage.
TEST_F(KtunedTest, IdleCompileFlag) {
  Ktuned bad(dir_, With({"--idle-compile", "sometimes"}));
  EXPECT_EQ(bad.Wait(absl::Seconds(10)), 2) << bad.Stderr();
  EXPECT_THAT(bad.Stderr(), HasSubstr("--idle-compile"));

  for (const std::string mode : {"on", "off"}) {
    Ktuned d(dir_, With({"--listen", "unix://" + dir_ + "/k-" + mode + ".sock",
                         "--idle-compile", mode}));
    ASSERT_FALSE(d.WaitServing().empty()) << d.Stderr();
    EXPECT_THAT(d.Stderr(), HasSubstr("idle compiles " + mode + ",")) << mode;
    d.Terminate();
    EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
  }
}

TEST_F(KtunedTest, TlsWithAUnixSocketIsUsage) {
  Ktuned d(dir_, With({"--listen", "unix://" + dir_ + "/k.sock", "--tls-cert", "c.pem", "--tls-key",
                       "k.pem"}));
  EXPECT_EQ(d.Wait(absl::Seconds(10)), 2) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("unix socket, which stays plaintext"));
}

TEST_F(KtunedTest, MissingPemNamesTheFlagAndTheFile) {
  const std::string missing = dir_ + "/no-such-cert.pem";
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/key.pem", "-----BEGIN PRIVATE KEY-----\n").ok());
  Ktuned d(dir_, With({"--listen", "127.0.0.1:0", "--tls-cert", missing, "--tls-key",
                       dir_ + "/key.pem"}));
  EXPECT_EQ(d.Wait(absl::Seconds(10)), 1) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("--tls-cert " + missing));
}

TEST_F(KtunedTest, MutualTlsOnLoopback) {
  testing::TestCerts certs = testing::MakeTestCerts(dir_);
  if (!certs.skip_reason.empty()) GTEST_SKIP() << certs.skip_reason;
  ASSERT_TRUE(certs.error.empty()) << certs.error;
  Ktuned d(dir_, With({"--listen", "127.0.0.1:0", "--tls-cert", dir_ + "/server.pem", "--tls-key",
                       dir_ + "/server.key", "--tls-client-ca", dir_ + "/ca.pem"}));
  const std::string serving = d.WaitServing();
  ASSERT_THAT(serving, HasSubstr("(mutual TLS)")) << d.Stderr();
  const std::string target = serving.substr(0, serving.find(' '));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(target.substr(target.rfind(':') + 1), &port)) << serving;
  ASSERT_GT(port, 0);

  client::ClientOptions no_cert;
  no_cert.tls_root_certs_pem = certs.ca_pem;
  EXPECT_FALSE(Templates(target, no_cert).ok());
  EXPECT_FALSE(Templates(target, {}).ok());  // plaintext
  client::ClientOptions with_cert = no_cert;
  with_cert.tls_client_cert_chain_pem = certs.client_pem;
  with_cert.tls_client_key_pem = certs.client_key;
  absl::StatusOr<client::TemplateList> list = Templates(target, with_cert);
  EXPECT_TRUE(list.ok()) << list.status() << "\n" << d.Stderr();

  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
}

// 0.0.0.0 and unix-abstract: used to start plaintext with no token and no word; an empty
// --token used to mean no authentication.
TEST_F(KtunedTest, AnExposedListenerWithoutTlsOrTokenIsUsage) {
  Ktuned open(dir_, With({"--listen", "0.0.0.0:0"}));
  EXPECT_EQ(open.Wait(absl::Seconds(10)), 2) << open.Stderr();
  EXPECT_THAT(open.Stderr(), HasSubstr("--listen 0.0.0.0:0 can be reached from other hosts"));
  EXPECT_THAT(open.Stderr(), HasSubstr("--insecure"));
  Ktuned abstract(dir_, With({"--listen", "unix-abstract:ktune-test"}));
  EXPECT_EQ(abstract.Wait(absl::Seconds(10)), 2) << abstract.Stderr();
  EXPECT_THAT(abstract.Stderr(), HasSubstr("every local user"));
  Ktuned empty_token(dir_, With({"--listen", "0.0.0.0:0", "--token", ""}));
  EXPECT_EQ(empty_token.Wait(absl::Seconds(10)), 2) << empty_token.Stderr();
  EXPECT_THAT(empty_token.Stderr(), HasSubstr("--token: empty"));
}

TEST_F(KtunedTest, InsecureServesAnExposedListenerAndSaysSo) {
  Ktuned d(dir_, With({"--listen", "0.0.0.0:0", "--insecure"}));
  ASSERT_THAT(d.WaitServing(), HasSubstr("0.0.0.0:")) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("WARNING: --insecure"));
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
  Ktuned guarded(dir_, With({"--listen", "0.0.0.0:0", "--token", "s3cret"}));
  ASSERT_THAT(guarded.WaitServing(), HasSubstr("0.0.0.0:")) << guarded.Stderr();
  EXPECT_THAT(guarded.Stderr(), ::testing::Not(HasSubstr("WARNING")));
  guarded.Terminate();
  EXPECT_EQ(guarded.Wait(absl::Seconds(5)), 0) << guarded.Stderr();
}

// A --max-message-bytes below an artifact used to start and then fail every call; a
// --templates folder with no loadable template used to start and serve nothing.
TEST_F(KtunedTest, AStartThatCouldServeNothingIsRefused) {
  Ktuned small(dir_, With({"--listen", "unix://" + dir_ + "/s.sock", "--max-message-bytes",
                           "1000"}));
  EXPECT_EQ(small.Wait(absl::Seconds(10)), 2) << small.Stderr();
  EXPECT_THAT(small.Stderr(), HasSubstr("--max-message-bytes: 1000 is below the floor"));
  MakeDirs(dir_ + "/empty-templates").IgnoreError();
  Ktuned none(dir_, {"--db", dir_ + "/none.db", "--templates", dir_ + "/empty-templates",
                     "--worker", dir_ + "/no-such-ktune-worker", "--listen",
                     "unix://" + dir_ + "/n.sock"});
  EXPECT_EQ(none.Wait(absl::Seconds(10)), 1) << none.Stderr();
  EXPECT_THAT(none.Stderr(), HasSubstr("--templates " + dir_ + "/empty-templates"));
  EXPECT_THAT(none.Stderr(), HasSubstr("no template loaded"));
}

// A second ktuned on the same unix socket path used to unlink and take it, leaving the first
// running and unreachable: now it exits 1 naming the lock and the holder, and the first
// keeps serving. Once the first is gone, the path is free again.
TEST_F(KtunedTest, ASecondKtunedOnTheSameSocketIsRefused) {
  const std::string socket = dir_ + "/run/ktuned.sock";
  MakeDirs(dir_ + "/first").IgnoreError();
  MakeDirs(dir_ + "/second").IgnoreError();
  Ktuned first(dir_ + "/first", Own("first.db", "unix://" + socket));
  ASSERT_THAT(first.WaitServing(), HasSubstr(socket)) << first.Stderr();
  {
    Ktuned second(dir_ + "/second", Own("second.db", "unix://" + socket));
    EXPECT_EQ(second.Wait(absl::Seconds(20)), 1) << second.Stderr();
    EXPECT_THAT(second.Stderr(), HasSubstr(socket + ".lock is held by another process (pid " +
                                           std::to_string(first.pid()) + ")"));
  }
  EXPECT_TRUE(Templates("unix://" + socket).ok()) << "the first lost its socket";
  first.Terminate();
  EXPECT_EQ(first.Wait(absl::Seconds(5)), 0) << first.Stderr();
  Ktuned third(dir_ + "/second", Own("second.db", "unix://" + socket));
  EXPECT_THAT(third.WaitServing(), HasSubstr(socket)) << third.Stderr();
  third.Terminate();
  EXPECT_EQ(third.Wait(absl::Seconds(5)), 0) << third.Stderr();
}

// Two ktuned on one TCP port used to both listen (SO_REUSEPORT) and split the connections.
TEST_F(KtunedTest, ASecondKtunedOnTheSameTcpPortIsRefused) {
  MakeDirs(dir_ + "/first").IgnoreError();
  MakeDirs(dir_ + "/second").IgnoreError();
  Ktuned first(dir_ + "/first", Own("first.db", "127.0.0.1:0"));
  const std::string serving = first.WaitServing();
  ASSERT_THAT(serving, HasSubstr("127.0.0.1:")) << first.Stderr();
  const std::string address = serving.substr(0, serving.find_first_of(", "));
  Ktuned second(dir_ + "/second", Own("second.db", address));
  EXPECT_EQ(second.Wait(absl::Seconds(20)), 1) << second.Stderr();
  EXPECT_THAT(second.Stderr(), HasSubstr("cannot listen on " + address)) << second.Stderr();
  EXPECT_TRUE(Templates(address).ok());
  first.Terminate();
  EXPECT_EQ(first.Wait(absl::Seconds(5)), 0) << first.Stderr();
}

// Two daemons writing one store file: the second is refused, naming the store's lock.
TEST_F(KtunedTest, ASecondKtunedOnTheSameStoreIsRefused) {
  MakeDirs(dir_ + "/first").IgnoreError();
  MakeDirs(dir_ + "/second").IgnoreError();
  Ktuned first(dir_ + "/first", With({"--listen", "unix://" + dir_ + "/a.sock"}));
  ASSERT_THAT(first.WaitServing(), HasSubstr("a.sock")) << first.Stderr();
  Ktuned second(dir_ + "/second", With({"--listen", "unix://" + dir_ + "/b.sock"}));
  EXPECT_EQ(second.Wait(absl::Seconds(20)), 1) << second.Stderr();
  EXPECT_THAT(second.Stderr(), HasSubstr("store " + dir_ + "/ktune.db is served by another ktuned"));
  EXPECT_THAT(second.Stderr(), HasSubstr(dir_ + "/ktune.db.lock is held by another process"));
  first.Terminate();
  EXPECT_EQ(first.Wait(absl::Seconds(5)), 0) << first.Stderr();
}

// ktuned raises its soft open files limit to the hard one at start: every connection holds a
// descriptor. It used to keep whatever soft limit it was started with (often 1024).
TEST_F(KtunedTest, RaisesTheOpenFilesSoftLimitToTheHardOne) {
  Ktuned d(dir_, With({"--listen", "unix://" + dir_ + "/l.sock"}), "-Sn 256");
  ASSERT_THAT(d.WaitServing(), HasSubstr("l.sock")) << d.Stderr();
  const std::string limits = ReadFile(absl::StrCat("/proc/", d.pid(), "/limits")).value_or("");
  const size_t at = limits.find("Max open files");
  ASSERT_NE(at, std::string::npos) << limits;
  std::vector<std::string> fields = absl::StrSplit(
      limits.substr(at + 14, limits.find('\n', at) - at - 14), ' ', absl::SkipEmpty());
  ASSERT_GE(fields.size(), 2u) << limits;
  EXPECT_NE(fields[0], "256") << limits;
  EXPECT_EQ(fields[0], fields[1]) << limits;
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
}

// gRPC 1.51 stops accepting on a listener for good after one EMFILE. Under a low hard limit,
// idle connections use up ktuned's descriptors; once they are closed the listener still takes
// none (the kernel completes handshakes nobody reads). ktuned used to stay up like that,
// unreachable and looking alive; now its listener probe finds it, and it exits 3 for its unit
// to restart it.
TEST_F(KtunedTest, AListenerThatStopsAcceptingEndsKtunedWithStatus3) {
  Ktuned d(dir_, With({"--listen", "127.0.0.1:0", "--listener-probe-ms", "300"}), "-n 64");
  const std::string serving = d.WaitServing();
  ASSERT_THAT(serving, HasSubstr("127.0.0.1:")) << d.Stderr();
  const std::string target = serving.substr(0, serving.find_first_of(", "));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(target.substr(target.rfind(':') + 1), &port)) << serving;
  ASSERT_TRUE(Templates(target).ok()) << d.Stderr();

  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = testing::ConnectIdle(port);
    if (fd >= 0) idle.push_back(fd);
  }
  absl::SleepFor(absl::Seconds(1));  // ktuned accepts what it can, then hits EMFILE
  for (int fd : idle) close(fd);
  EXPECT_GT(idle.size(), 64u);

  EXPECT_EQ(d.Wait(absl::Seconds(40)), 3) << d.Stderr();
  EXPECT_THAT(d.Stderr(), HasSubstr("the listener takes no connections"));
}

// A client looping on request bytes that do not parse: every call answered
// INVALID_ARGUMENT, ktuned serving on, and its log holding a line per method every 10 s
// (with how many it held back), not a line per call.
TEST_F(KtunedTest, UnparsableRequestsAreAnsweredAndLoggedSparingly) {
  const std::string socket = dir_ + "/ktuned.sock";
  Ktuned d(dir_, With({"--listen", "unix://" + socket}));
  ASSERT_THAT(d.WaitServing(), HasSubstr(socket)) << d.Stderr();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
  constexpr int kCalls = 1000;
  int invalid = 0;
  std::string other;  // the first answer that was not INVALID_ARGUMENT
  for (int i = 0; i < kCalls && d.Running(); ++i) {
    const std::string& method = testing::kKtuneMethods[i % 2].first;
    testing::RawReply r = testing::RawCall(channel, method, testing::kUnparsableBytes);
    if (r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      ++invalid;
    } else if (other.empty()) {
      other = absl::StrCat(method, ": ", r.status.error_code(), " '", r.status.error_message(),
                           "'");
    }
  }
  EXPECT_EQ(invalid, kCalls) << other;
  EXPECT_TRUE(Templates("unix://" + socket).ok()) << d.Stderr();
  d.Terminate();
  EXPECT_EQ(d.Wait(absl::Seconds(5)), 0) << d.Stderr();
  const std::vector<std::string> lines = absl::StrSplit(d.Stderr(), '\n');
  int logged = 0;
  for (const std::string& line : lines) logged += absl::StrContains(line, "do not parse as");
  // Two methods: a line each at once, and two more per 10 s should the calls take longer.
  EXPECT_GE(logged, 1) << d.Stderr();
  EXPECT_LE(logged, 6) << d.Stderr();
}

}  // namespace
}  // namespace ktune
