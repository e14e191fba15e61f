// ktuned processes sharing one redis-server of the test's own (`ktuned --remote`), driven by
// the built `ktune` as people drive them, NVRTC compiling for real and fake_ktune_worker as
// the GPU: two daemons divide a spec and tune each key once fleet-wide; a lease holder
// killed mid-tune is taken over; `ktune cache ls/stats/push/pull --remote`; bad --remote
// flags. Skips without redis-server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/base/file.h"
#include "server/fleet/redis_connection.h"
#include "server/fleet/redis_url.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_worker_env.h"
#include "tests/testing/ktuned_process.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::ktune::testing::Ktuned;
using ::ktune::testing::NewTempDir;
using ::ktune::testing::RedisServer;
using ::ktune::testing::RunResult;
using ::testing::HasSubstr;

constexpr char kKtune[] = KTUNE_BINARY_DIR "/bin/ktune";
constexpr char kKtuned[] = KTUNE_BINARY_DIR "/bin/ktuned";
constexpr char kFakeWorker[] = KTUNE_BINARY_DIR "/bin/fake_ktune_worker";

class FleetDaemonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::Installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
    dir_ = NewTempDir();
    testing::WriteTiny(dir_ + "/templates");
    // Inherited by the daemons' worker children; every set_problem (one per job that
    // really tunes) lands in one log.
    testing::UseFakeWorkerAllOk();
    setenv("FAKE_WORKER_LOG", (dir_ + "/worker.log").c_str(), 1);
    redis_ = std::make_unique<RedisServer>(dir_ + "/redis");
  }
  void TearDown() override {
    unsetenv("FAKE_WORKER_LOG");
    unsetenv("FAKE_WORKER_MEASURE_MS");
  }

  std::string Socket(const std::string& name) { return absl::StrCat("unix://", dir_, "/", name, ".sock"); }

  std::unique_ptr<Ktuned> Daemon(const std::string& name, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--listen",       Socket(name),
                                     "--db",           absl::StrCat(dir_, "/", name, ".db"),
                                     "--templates",    dir_ + "/templates",
                                     "--worker",       kFakeWorker,
                                     "--remote",       redis_->url(),
                                     "--remote-host-id", name};
    args.insert(args.end(), more.begin(), more.end());
    auto d = std::make_unique<Ktuned>(NewTempDir(), args);
    EXPECT_THAT(d->WaitServing(), HasSubstr(name)) << d->Stderr();
    return d;
  }

  std::vector<std::string> SpecArgs(const std::string& daemon) {
    return {"tune", "--spec", dir_ + "/spec.textproto", "--templates", dir_ + "/templates",
            "--budget", "3", "--daemon", Socket(daemon), "--json", "--quiet"};
  }

  RunResult Ktune(const std::vector<std::string>& args) {
    return testing::RunToEnd(kKtune, args, NewTempDir(), absl::Seconds(120));
  }

  int Tunes() {
    const std::string log = ReadFile(dir_ + "/worker.log").value_or("");
    int n = 0;
    for (absl::string_view line : absl::StrSplit(log, '\n')) n += absl::StrContains(line, " set_problem ");
    return n;
  }

  // The fleet line ktuned logs when it stops.
  static std::string StopAndFleetLine(Ktuned& d) {
    d.Terminate();
    EXPECT_EQ(d.Wait(absl::Seconds(30)), 0) << d.Stderr();
    const std::string err = d.Stderr();
    const size_t at = err.find("ktuned: fleet redis://");
    return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
  }

  // N in "..., N what, ..." of a fleet line; -1 when absent.
  static int Count(const std::string& line, const std::string& what) {
    const size_t at = line.find(" " + what);
    if (at == std::string::npos) return -1;
    const size_t start = line.rfind(' ', at - 1) + 1;
    return std::atoi(line.substr(start, at - start).c_str());
  }

  std::string dir_;
  std::unique_ptr<RedisServer> redis_;
};

// Daemons and keys: two on 8 keys (then the CLI on the tier they filled), four on 40.
class FleetSpecTest : public FleetDaemonsTest,
                      public ::testing::WithParamInterface<std::pair<int, int>> {};

TEST_P(FleetSpecTest, DaemonsDivideASpecAndTuneEachKeyOnceFleetWide) {
  const auto [daemons, keys] = GetParam();
  std::string values;
  for (int i = 0; i < keys; ++i) absl::StrAppend(&values, i ? ", " : "", 64 * (i + 1));
  ASSERT_OK(AtomicWriteFile(dir_ + "/spec.textproto",
                            absl::StrCat("model: \"toy\"\nentries {\n  template: \"tiny\"\n"
                                         "  dtypes: [\"f32\"]\n  dims { name: \"n\" values: [",
                                         values, "] }\n}\n")));
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Ktuned>> d;
  for (int i = 0; i < daemons; ++i) {
    names.push_back(absl::StrCat("d", i));
    d.push_back(Daemon(names.back()));
  }
  std::vector<RunResult> runs(daemons);
  std::vector<std::thread> threads;
  for (int i = 0; i < daemons; ++i) {
    threads.emplace_back([&, i] { runs[i] = Ktune(SpecArgs(names[i])); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < daemons; ++i) ASSERT_EQ(runs[i].exit_code, 0) << runs[i] << d[i]->Stderr();
  EXPECT_EQ(Tunes(), keys) << ReadFile(dir_ + "/worker.log").value_or("");

  // Every daemon answers every key from its store now: nothing left to tune.
  for (const std::string& name : names) {
    const RunResult again = Ktune(SpecArgs(name));
    ASSERT_EQ(again.exit_code, 0) << again;
    const nlohmann::json j = nlohmann::json::parse(again.out);
    EXPECT_EQ(j["cached"], keys) << name;
    EXPECT_EQ(j["tuned"], 0) << name;
  }
  EXPECT_EQ(Tunes(), keys);
  int published = 0;
  for (auto& daemon : d) {
    const std::string line = StopAndFleetLine(*daemon);
    EXPECT_THAT(line, HasSubstr("0 refused, 0 errors")) << line;
    published += Count(line, "published");
  }
  EXPECT_EQ(published, keys);
  if (daemons > 2) return;

  // The shared tier as the CLI sees it.
  const RunResult ls = Ktune({"cache", "ls", "--remote", redis_->url(), "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls;
  EXPECT_EQ(nlohmann::json::parse(ls.out).size(), static_cast<size_t>(keys));
  const RunResult stats = Ktune({"cache", "stats", "--remote", redis_->url()});
  ASSERT_EQ(stats.exit_code, 0) << stats;
  EXPECT_THAT(stats.out, HasSubstr(absl::StrCat("entries   ", keys)));
  // pull into an empty store: every record checked and imported.
  const RunResult pull = Ktune({"cache", "pull", "--remote", redis_->url(), "--db",
                                dir_ + "/pulled.db", "--templates", dir_ + "/templates"});
  ASSERT_EQ(pull.exit_code, 0) << pull;
  EXPECT_THAT(pull.out, HasSubstr(absl::StrCat(keys, " added, 0 replaced, 0 kept existing")));
  // push from that store into another Redis database: all published.
  const RunResult push = Ktune({"cache", "push", "--remote", redis_->url() + "/1", "--db",
                                dir_ + "/pulled.db"});
  ASSERT_EQ(push.exit_code, 0) << push;
  EXPECT_THAT(push.out, HasSubstr(absl::StrCat(keys, " published, 0 kept")));
  // export, then import --publish into another store and a third database.
  const RunResult exp = Ktune({"cache", "export", dir_ + "/x.json", "--db", dir_ + "/pulled.db"});
  ASSERT_EQ(exp.exit_code, 0) << exp;
  const RunResult imp = Ktune({"cache", "import", dir_ + "/x.json", "--db", dir_ + "/imported.db",
                               "--templates", dir_ + "/templates", "--publish", "--remote",
                               redis_->url() + "/2"});
  ASSERT_EQ(imp.exit_code, 0) << imp;
  EXPECT_THAT(imp.out, HasSubstr(absl::StrCat(keys, " added")));
  EXPECT_THAT(imp.out, HasSubstr(absl::StrCat("/2: ", keys, " stored, 0 kept")));
}

INSTANTIATE_TEST_SUITE_P(Fleets, FleetSpecTest,
                         ::testing::Values(std::make_pair(2, 8), std::make_pair(4, 40)));

TEST_F(FleetDaemonsTest, ALeaseHolderKilledMidTuneIsTakenOverAndTheKeyTunedOnceMore) {
  setenv("FAKE_WORKER_MEASURE_MS", "250", 1);  // a job takes a second or so
  auto a = Daemon("a", {"--remote-lease-ms", "600"});
  auto b = Daemon("b", {"--remote-lease-ms", "600"});
  const std::vector<std::string> tune = {"tune", "tiny", "--dtype", "f32", "--shape", "n=64",
                                         "--templates", dir_ + "/templates", "--budget", "3",
                                         "--quiet", "--daemon"};
  std::vector<std::string> via_a = tune, via_b = tune;
  via_a.push_back(Socket("a"));
  via_b.push_back(Socket("b"));
  testing::Subprocess client_a(kKtune, via_a, NewTempDir());
  // Waits until a holds the lease.
  fleet::RedisConnectOptions o;
  o.url = *fleet::ParseRedisUrl(redis_->url(), "--remote");
  auto conn = fleet::ConnectRedis(o);
  ASSERT_TRUE(conn.ok()) << conn.status();
  const absl::Time end = absl::Now() + absl::Seconds(30);
  bool leased = false;
  while (!leased && absl::Now() < end) {
    absl::StatusOr<fleet::RedisReply> keys = (*conn)->Command({"KEYS", "ktune:v1:lease:*"});
    leased = keys.ok() && !keys->elements.empty();
    if (!leased) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(leased) << a->Stderr();
  testing::Subprocess client_b(kKtune, via_b, NewTempDir());
  // b finds a's lease and waits (it says so), then a dies holding it.
  for (const absl::Time until = absl::Now() + absl::Seconds(30);
       absl::Now() < until && !absl::StrContains(b->Stderr(), "waiting for a, which holds");) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(b->Stderr(), HasSubstr("ktuned: fleet: waiting for a, which holds the lease on"));
  a->Signal(SIGKILL);
  EXPECT_EQ(client_b.Wait(absl::Seconds(60)), 0) << client_b.Stdout() << client_b.Stderr()
                                                 << b->Stderr();
  EXPECT_NE(client_a.Wait(absl::Seconds(30)), 0);  // its daemon died under it
  const std::string fb = StopAndFleetLine(*b);
  EXPECT_THAT(fb, HasSubstr("1 lease waits, 1 takeovers")) << fb;
  EXPECT_THAT(fb, HasSubstr("1 published")) << fb;
}

TEST(FleetFlagsTest, BadRemoteFlagsNameTheFlag) {
  const std::string dir = NewTempDir();
  RunResult r = testing::RunToEnd(kKtuned, {"--remote", "http://cache:6379", "--db", dir + "/k.db"},
                                  dir, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--remote http://cache:6379: not a redis:// or rediss:// URL"));
  r = testing::RunToEnd(kKtuned,
                        {"--remote", "redis://127.0.0.1:1", "--remote-password-file",
                         dir + "/nope", "--db", dir + "/k.db"},
                        dir, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("--remote-password-file " + dir + "/nope"));
  r = testing::RunToEnd(kKtuned, {"--remote-ca", "/etc/hostname", "--db", dir + "/k.db"}, dir,
                        absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("need --remote"));
  // The CLI: nothing listens there, exit 1 naming the URL.
  r = testing::RunToEnd(kKtune, {"cache", "ls", "--remote", "redis://127.0.0.1:1"}, dir,
                        absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("redis://127.0.0.1:1"));
  r = testing::RunToEnd(kKtune, {"cache", "import", dir + "/x.json", "--publish"}, dir,
                        absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--publish: needs --remote URL"));
}

}  // namespace
}  // namespace ktune
