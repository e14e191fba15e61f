// The fleet tier on a real redis-server of the test's own (tests/testing/redis_server.h):
// records round-trip, publishing is compare-and-set, leases are exclusive and expire, and
// a server that is down, paused, full or wants a password answers with the right code
// within the timeout. Skips without redis-server.
#include "server/fleet/redis_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "server/base/file.h"
#include "server/base/sha256.h"
#include "server/fleet/fleet_tier.h"
#include "server/fleet/redis_connection.h"
#include "server/fleet/redis_url.h"
#include "tests/store/store_fixtures.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/status_matchers.h"

namespace ktune::fleet {
namespace {

using ::ktune::testing::RedisServer;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RedisUrlTest, ParsesHostPortAndDatabase) {
  ASSERT_OK_AND_ASSIGN(RedisUrl u, ParseRedisUrl("redis://cache.local:6380/3", "--remote"));
  EXPECT_FALSE(u.tls);
  EXPECT_EQ(u.host, "cache.local");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(u.ToString(), "redis://cache.local:6380/3");
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("rediss://10.0.0.1", "--remote"));
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://[::1]:7000", "--remote"));
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.ToString(), "redis://[::1]:7000");
}

TEST(RedisUrlTest, BadUrlsNameTheFlagAndWhatIsWrong) {
  const std::pair<const char*, const char*> bad[] = {
      {"http://x:1", "not a redis:// or rediss:// URL"},
      {"redis://:6379", "no host"},
      {"redis://h:0", "port \"0\" is not a number in 1..65535"},
      {"redis://h:abc", "port \"abc\""},
      {"redis://h:6379/99", "database \"99\" is not a number in 0..15"},
      {"redis://user:pw@h:6379", "use --remote-password-file"},
  };
  for (const auto& [url, why] : bad) {
    EXPECT_THAT(ParseRedisUrl(url, "--remote"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("--remote "), HasSubstr(why))))
        << url;
  }
}

TEST(OpenRedisFleetTest, UnreadablePasswordFileAndCaWithoutTlsNameTheirFlags) {
  EXPECT_THAT(OpenRedisFleet("redis://h:1", "/nonexistent/pass", "", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--remote-password-file /nonexistent/pass")));
  EXPECT_THAT(OpenRedisFleet("redis://h:1", "", "/etc/hostname", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--remote-ca")));
  EXPECT_THAT(OpenRedisFleet("redis:/h", "", "", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--remote redis:/h")));
}

RemoteRecord Record(int64_t seed, double time_ns, const std::string& publisher = "host-a") {
  using namespace store::testing;
  RemoteRecord r;
  r.bundle.entry = MakeEntry(MakeKey("tokens=16"), 1, seed);
  r.bundle.entry.metrics.time_ns = time_ns;
  r.bundle.job = MakeJob(r.bundle.entry.key);
  r.bundle.job.state = store::JobState::kDone;
  r.bundle.trials = MakeTrials(1, 3);
  r.device = MakeDevice();
  r.publisher = publisher;
  return r;
}

class RedisTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::Installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
    dir_ = testing::NewTempDir();
    redis_ = std::make_unique<RedisServer>(dir_ + "/redis", extra_);
  }
  std::unique_ptr<RemoteTier> Tier(const std::string& password = "") {
    RedisTierOptions o;
    o.connect.url = *ParseRedisUrl(redis_->url(), "--remote");
    o.connect.password = password;
    o.connect.timeout = absl::Milliseconds(300);
    return NewRedisTier(o);
  }
  RedisConnectOptions Connect() {
    RedisConnectOptions o;
    o.url = *ParseRedisUrl(redis_->url(), "--remote");
    return o;
  }

  std::vector<std::string> extra_;
  std::string dir_;
  std::unique_ptr<RedisServer> redis_;
};

TEST_F(RedisTierTest, PublishedRecordComesBackWhole) {
  auto tier = Tier();
  const RemoteRecord r = Record(1, 900);
  ASSERT_OK_AND_ASSIGN(std::optional<RemoteRecord> none, tier->Get(RemoteKeyOf(r.bundle.entry)));
  EXPECT_FALSE(none.has_value());
  ASSERT_OK_AND_ASSIGN(PublishOutcome out, tier->Publish(r));
  EXPECT_EQ(out, PublishOutcome::kStored);
  ASSERT_OK_AND_ASSIGN(std::optional<RemoteRecord> got, tier->Get(RemoteKeyOf(r.bundle.entry)));
  ASSERT_TRUE(got.has_value());
  store::testing::ExpectSameEntry(got->bundle.entry, r.bundle.entry, /*same_job=*/false);
  EXPECT_EQ(got->bundle.trials.size(), 3u);
  ASSERT_TRUE(got->device.has_value());
  EXPECT_EQ(got->device->model_key, r.device->model_key);
  EXPECT_EQ(got->publisher, "host-a");
  // Another source hash is another key.
  RemoteKey other = RemoteKeyOf(r.bundle.entry);
  other.source_hash = "src-bbbb";
  ASSERT_OK_AND_ASSIGN(none, tier->Get(other));
  EXPECT_FALSE(none.has_value());
}

TEST_F(RedisTierTest, OnlyAFasterWinnerReplacesTheRecord) {
  auto tier = Tier();
  ASSERT_OK_AND_ASSIGN(PublishOutcome out, tier->Publish(Record(1, 900, "a")));
  EXPECT_EQ(out, PublishOutcome::kStored);
  ASSERT_OK_AND_ASSIGN(out, tier->Publish(Record(2, 950, "b")));  // slower
  EXPECT_EQ(out, PublishOutcome::kKeptFaster);
  ASSERT_OK_AND_ASSIGN(out, tier->Publish(Record(3, 900, "c")));  // a tie keeps the first
  EXPECT_EQ(out, PublishOutcome::kKeptFaster);
  ASSERT_OK_AND_ASSIGN(out, tier->Publish(Record(4, 800, "d")));  // faster
  EXPECT_EQ(out, PublishOutcome::kStored);
  int64_t undecodable = -1;
  ASSERT_OK_AND_ASSIGN(std::vector<RemoteRecord> all, tier->List(&undecodable));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(undecodable, 0);
  EXPECT_EQ(all[0].publisher, "d");
  EXPECT_EQ(all[0].bundle.entry.metrics.time_ns, 800);
}

TEST_F(RedisTierTest, LeasesAreExclusiveRenewableAndExpire) {
  auto a = Tier();
  auto b = Tier();
  const RemoteKey key = RemoteKeyOf(Record(1, 900).bundle.entry);
  ASSERT_OK_AND_ASSIGN(LeaseState s, a->AcquireLease(key, "a", absl::Seconds(10)));
  EXPECT_TRUE(s.acquired);
  ASSERT_OK_AND_ASSIGN(s, b->AcquireLease(key, "b", absl::Seconds(10)));
  EXPECT_FALSE(s.acquired);
  EXPECT_EQ(s.holder, "a");
  EXPECT_GT(s.left, absl::Seconds(5));
  ASSERT_OK_AND_ASSIGN(bool renewed, b->RenewLease(key, "b", absl::Seconds(10)));
  EXPECT_FALSE(renewed);
  ASSERT_OK(b->ReleaseLease(key, "b"));  // not b's: left alone
  ASSERT_OK_AND_ASSIGN(s, b->AcquireLease(key, "b", absl::Seconds(10)));
  EXPECT_FALSE(s.acquired);
  ASSERT_OK_AND_ASSIGN(renewed, a->RenewLease(key, "a", absl::Milliseconds(150)));
  EXPECT_TRUE(renewed);
  // a dies: its lease runs out and b takes it.
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK_AND_ASSIGN(s, b->AcquireLease(key, "b", absl::Seconds(10)));
  EXPECT_TRUE(s.acquired);
  ASSERT_OK(b->ReleaseLease(key, "b"));
  ASSERT_OK_AND_ASSIGN(s, a->AcquireLease(key, "a", absl::Seconds(10)));
  EXPECT_TRUE(s.acquired);
}

TEST_F(RedisTierTest, ARecordThatDoesNotDecodeIsDataLoss) {
  auto tier = Tier();
  const RemoteRecord r = Record(1, 900);
  ASSERT_OK(tier->Publish(r).status());
  ASSERT_OK_AND_ASSIGN(auto conn, ConnectRedis(Connect()));
  ASSERT_OK(conn->Command({"HSET", "ktune:v1:entry:" + RemoteKeyString(RemoteKeyOf(r.bundle.entry)),
                           "record", "{not json"})
                .status());
  EXPECT_THAT(tier->Get(RemoteKeyOf(r.bundle.entry)), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("record")));
  int64_t undecodable = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<RemoteRecord> all, tier->List(&undecodable));
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(undecodable, 1);
}

TEST_F(RedisTierTest, DownAndPausedServersAnswerWithinTheTimeoutThenRecover) {
  auto tier = Tier();
  const RemoteKey key = RemoteKeyOf(Record(1, 900).bundle.entry);
  ASSERT_OK(tier->Get(key).status());
  redis_->Pause();  // accepts, never answers: slow
  absl::Time start = absl::Now();
  EXPECT_THAT(tier->Get(key), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("timed out")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  redis_->Resume();
  ASSERT_OK(tier->Get(key).status());  // a new connection
  redis_->Stop();
  start = absl::Now();
  EXPECT_THAT(tier->Get(key), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("127.0.0.1")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  redis_->Start();
  ASSERT_OK(tier->Get(key).status());
}

class FullRedisTest : public RedisTierTest {
 protected:
  FullRedisTest() { extra_ = {"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"}; }
};

TEST_F(FullRedisTest, AFullServerIsResourceExhausted) {
  auto tier = Tier();
  RemoteRecord big = Record(1, 900);
  big.bundle.entry.cubin = std::string(4 << 20, 'x');
  big.bundle.entry.cubin_sha256 = Sha256Hex(big.bundle.entry.cubin);
  EXPECT_THAT(tier->Publish(big), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("OOM")));
}

class PasswordRedisTest : public RedisTierTest {
 protected:
  PasswordRedisTest() { extra_ = {"--requirepass", "s3cret"}; }
};

TEST_F(PasswordRedisTest, AuthWithTheRightPasswordOnly) {
  const RemoteKey key = RemoteKeyOf(Record(1, 900).bundle.entry);
  EXPECT_THAT(Tier()->Get(key), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("NOAUTH")));
  EXPECT_THAT(Tier("wrong")->Get(key), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("AUTH")));
  EXPECT_OK(Tier("s3cret")->Get(key).status());
  // Through the flag's file, as ktuned reads it (a trailing newline is not the password's).
  ASSERT_OK(AtomicWriteFile(dir_ + "/pass", "s3cret\n"));
  FleetOptions o;
  o.host_id = "a";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FleetTier> fleet,
                       OpenRedisFleet(redis_->url(), dir_ + "/pass", "", o));
  EXPECT_FALSE(fleet->Get(key).has_value());
  EXPECT_EQ(fleet->stats().misses, 1);
  EXPECT_EQ(fleet->stats().errors, 0);
}

}  // namespace
}  // namespace ktune::fleet
