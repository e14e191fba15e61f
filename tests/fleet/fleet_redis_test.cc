// Hosts of a test fleet (tests/testing/fleet_host.h) sharing one redis-server of the test's
// own: a spec's keys divided between 2 and 4 hosts through the leases, each tuned exactly
// once fleet-wide and then answered EXACT everywhere; Redis killed mid-run (no failed
// request, the winners of the outage published when it returns); a poisoned record refused;
// rediss:// with a throwaway CA. Skips without redis-server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "server/base/sha256.h"
#include "server/fleet/redis_tier.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fleet_host.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"

namespace ktune {
namespace {

using ::ktune::testing::FleetHost;
using ::ktune::testing::RedisServer;
using ::testing::Contains;
using ::testing::HasSubstr;

class FleetRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::Installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
    dir_ = testing::NewTempDir();
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
  }
  void StartRedis(std::vector<std::string> extra = {}, int port = 0) {
    redis_ = std::make_unique<RedisServer>(dir_ + "/redis", std::move(extra), port);
  }
  fleet::RedisTierOptions TierOptions() {
    fleet::RedisTierOptions o;
    o.connect.url = *fleet::ParseRedisUrl(redis_->url(), "--remote");
    o.connect.timeout = absl::Milliseconds(300);
    return o;
  }
  std::unique_ptr<FleetHost> Host(const std::string& name, fleet::RedisTierOptions tier = {}) {
    if (tier.connect.url.host.empty()) tier = TierOptions();
    fleet::FleetOptions o;
    o.host_id = name;
    o.poll = absl::Milliseconds(20);
    o.retry_after = absl::Milliseconds(100);
    auto host = std::make_unique<FleetHost>(registry_.get(), fleet::NewRedisTier(tier), o, &log_);
    // A candidate takes a little GPU time, so that hosts overlap.
    host->gpu.script = [](const std::string& name) {
      absl::SleepFor(absl::Microseconds(300));
      return testing::OkMeasurement(1000 + static_cast<double>(std::hash<std::string>()(name) % 500));
    };
    return host;
  }

  std::string dir_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<RedisServer> redis_;
  std::vector<std::string> log_;
};

class FleetSizeTest : public FleetRedisTest, public ::testing::WithParamInterface<int> {};

TEST_P(FleetSizeTest, EveryKeyIsTunedOnceFleetWideAndServedExactEverywhere) {
  StartRedis();
  std::vector<std::unique_ptr<FleetHost>> hosts;
  for (int i = 0; i < GetParam(); ++i) hosts.push_back(Host(absl::StrCat("host-", i)));
  std::vector<int64_t> keys;
  for (int i = 0; i < 40; ++i) keys.push_back(1024 + 64 * i);
  EXPECT_THAT(testing::RunSpecOnHosts(hosts, keys), ::testing::IsEmpty());

  int tuned = 0, takeovers = 0, busy_hosts = 0;
  for (const auto& h : hosts) {
    tuned += h->gpu.problems;  // one reference run per job that really tuned
    takeovers += static_cast<int>(h->tier->stats().takeovers);
    busy_hosts += h->gpu.problems > 0;
  }
  EXPECT_EQ(tuned, 40);
  EXPECT_EQ(takeovers, 0);
  EXPECT_GT(busy_hosts, 1);  // the keys were divided
  for (const auto& h : hosts) {
    for (int64_t n : keys) {
      ASSERT_OK_AND_ASSIGN(ResolvedKernel r, h->Resolve(n, KernelPolicy::kCacheOnly));
      EXPECT_EQ(r.provenance, KernelProvenance::kExact);
      EXPECT_FALSE(r.stale);
    }
    EXPECT_EQ(h->tier->stats().errors, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Hosts, FleetSizeTest, ::testing::Values(2, 4));

TEST_F(FleetRedisTest, RedisKilledMidRunFailsNothingAndTheOutagesWinnersArePublishedAfter) {
  StartRedis();
  auto a = Host("a");
  auto b = Host("b");
  ASSERT_OK(a->Tune(1024).status());
  redis_->Stop();
  for (int64_t n : {2048, 4096}) {
    ASSERT_OK(a->Tune(n).status());
    ASSERT_OK(a->Resolve(n, KernelPolicy::kCacheOnly).status());  // the local store serves
  }
  ASSERT_OK(b->Resolve(1024, KernelPolicy::kFallback).status());  // answers, tunes behind
  EXPECT_TRUE(a->tier->stats().degraded);
  EXPECT_EQ(a->tier->stats().queued, 2);
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(),
                          [](const std::string& l) { return absl::StrContains(l, "a: shared tier"); }),
            1);
  // b's background tune of 1024 finishes, its winner queued too.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end && !b->store->LookupEntry(b->Key(1024).key, b->Key(1024).source_hash,
                                                     "13.0").ok()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  redis_->Start();  // an empty Redis on the same port
  ASSERT_TRUE(a->tier->Flush(absl::Seconds(10)));
  ASSERT_TRUE(b->tier->Flush(absl::Seconds(10)));
  EXPECT_FALSE(a->tier->stats().degraded);
  EXPECT_FALSE(b->tier->stats().degraded);
  for (int64_t n : {2048, 4096}) {
    ASSERT_OK_AND_ASSIGN(ResolvedKernel r, b->Resolve(n, KernelPolicy::kCacheOnly));
    EXPECT_EQ(r.provenance, KernelProvenance::kExact);
  }
  EXPECT_EQ(b->gpu.problems, 1);  // only its own background tune of 1024
  EXPECT_THAT(log_, Contains(HasSubstr("a: shared tier redis://127.0.0.1")));
  EXPECT_THAT(log_, Contains(HasSubstr("is back; publishing 2 queued winners")));
}

TEST_F(FleetRedisTest, APoisonedRecordInRedisIsNeverServed) {
  StartRedis();
  auto a = Host("a");
  ASSERT_OK_AND_ASSIGN(TuneResult tuned, a->Tune(1024));
  // A faster record whose cubin does not match its sha256 replaces the good one.
  auto writer = fleet::NewRedisTier(TierOptions());
  ASSERT_OK_AND_ASSIGN(std::optional<fleet::RemoteRecord> r, writer->Get(a->Key(1024)));
  ASSERT_TRUE(r.has_value());
  r->bundle.entry.metrics.time_ns /= 2;
  r->bundle.entry.cubin[100] ^= 0x55;
  r->publisher = "mallory";
  ASSERT_OK_AND_ASSIGN(fleet::PublishOutcome out, writer->Publish(*r));
  EXPECT_EQ(out, fleet::PublishOutcome::kStored);
  auto b = Host("b");
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(b->Resolve(1024, KernelPolicy::kCacheOnly),
                testing::StatusIs(absl::StatusCode::kNotFound, HasSubstr("no entry")));
  }
  EXPECT_EQ(b->tier->stats().refused, 2);
  // Logged once: a poisoned key asked for often does not flood the log.
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(),
                          [](const std::string& l) { return absl::StrContains(l, "b: refused"); }),
            1);
  EXPECT_THAT(log_, Contains(::testing::AllOf(HasSubstr("b: refused a record"),
                                              HasSubstr("mallory"), HasSubstr("sha256"))));
}

TEST_F(FleetRedisTest, RedissWithAThrowawayCa) {
  testing::TestCerts certs = testing::MakeTestCerts(dir_);
  if (!certs.skip_reason.empty()) GTEST_SKIP() << certs.skip_reason;
  ASSERT_EQ(certs.error, "");
  const int port = RedisServer::FreePort();
  StartRedis({"--port", "0", "--tls-port", absl::StrCat(port), "--tls-cert-file",
              dir_ + "/server.pem", "--tls-key-file", dir_ + "/server.key", "--tls-ca-cert-file",
              dir_ + "/ca.pem", "--tls-auth-clients", "no"},
             port);
  fleet::RedisTierOptions o = TierOptions();
  o.connect.url = *fleet::ParseRedisUrl(absl::StrCat("rediss://localhost:", port), "--remote");
  o.connect.ca_file = dir_ + "/ca.pem";
  auto a = Host("a", o);
  auto b = Host("b", o);
  ASSERT_OK(a->Tune(1024).status());
  EXPECT_EQ(a->tier->stats().publishes, 1);
  ASSERT_OK_AND_ASSIGN(ResolvedKernel r, b->Resolve(1024, KernelPolicy::kCacheOnly));
  EXPECT_EQ(r.provenance, KernelProvenance::kExact);
  // Without the CA the server's certificate is not trusted: refused, as an outage.
  fleet::RedisTierOptions untrusted = o;
  untrusted.connect.ca_file.clear();
  EXPECT_THAT(fleet::NewRedisTier(untrusted)->Get(a->Key(1024)),
              testing::StatusIs(absl::StatusCode::kUnavailable, HasSubstr("TLS handshake failed")));
  // Plain redis:// to a TLS port never gets an answer: the timeout says so.
  fleet::RedisTierOptions plain = o;
  plain.connect.url.tls = false;
  EXPECT_FALSE(fleet::NewRedisTier(plain)->Get(a->Key(1024)).ok());
}

}  // namespace
}  // namespace ktune
