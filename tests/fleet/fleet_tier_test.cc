// FleetTier's degraded mode over a FakeRemoteTier: an outage is one warning, reads miss at
// once, winners queue (bounded) and go out when the tier returns; counters for all of it.
#include "server/fleet/fleet_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/fake_remote_tier.h"

namespace ktune::fleet {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

RemoteRecord Record(const std::string& shape, double time_ns) {
  using namespace store::testing;
  RemoteRecord r;
  r.bundle.entry = MakeEntry(MakeKey(shape), 1, 1);
  r.bundle.entry.metrics.time_ns = time_ns;
  r.bundle.job = MakeJob(r.bundle.entry.key);
  return r;
}

class FleetTierTest : public ::testing::Test {
 protected:
  FleetTierTest() {
    FleetOptions o;
    o.host_id = "host-a";
    o.retry_after = absl::Seconds(1);  // longer than the test takes to its first check
    o.max_queued = 3;
    o.log = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      log_.push_back(line);
    };
    tier_ = std::make_unique<FleetTier>(std::make_unique<testing::FakeRemoteTier>(state_), o);
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

  std::shared_ptr<testing::FakeTierState> state_ = std::make_shared<testing::FakeTierState>();
  absl::Mutex mu_;
  std::vector<std::string> log_;
  std::unique_ptr<FleetTier> tier_;
};

TEST_F(FleetTierTest, AnOutageWarnsOnceQueuesWinnersAndPublishesThemWhenTheTierReturns) {
  EXPECT_FALSE(tier_->Get(RemoteKeyOf(Record("tokens=1", 1).bundle.entry)).has_value());
  EXPECT_EQ(tier_->stats().misses, 1);
  state_->SetDown(true);
  for (int i = 0; i < 2; ++i) tier_->Publish(Record(absl::StrCat("tokens=", i), 100));
  EXPECT_FALSE(tier_->Get(RemoteKeyOf(Record("tokens=1", 1).bundle.entry)).has_value());
  EXPECT_FALSE(tier_->AcquireLease(RemoteKeyOf(Record("tokens=1", 1).bundle.entry)).ok());
  FleetStats s = tier_->stats();
  EXPECT_TRUE(s.degraded);
  EXPECT_EQ(s.queued, 2);
  EXPECT_EQ(s.misses, 1);  // an outage is not a miss
  // Inside the retry period nothing goes to the network: one failing call, not four.
  EXPECT_LE(state_->Calls(), 4);
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("shared tier fake://tier is out"));
  EXPECT_THAT(log[0], HasSubstr("serving from the local store"));

  state_->SetDown(false);
  ASSERT_TRUE(tier_->Flush(absl::Seconds(5)));
  s = tier_->stats();
  EXPECT_FALSE(s.degraded);
  EXPECT_EQ(s.queued, 0);
  EXPECT_EQ(s.publishes, 2);
  EXPECT_EQ(state_->Records(), 2u);
  EXPECT_THAT(Log(), Contains(HasSubstr("is back; publishing 2 queued winners")));
  EXPECT_EQ(Log().size(), 2u);
}

TEST_F(FleetTierTest, AFullTierIsAnOutageAndTheQueueIsBounded) {
  state_->SetFull(true);
  for (int i = 0; i < 5; ++i) tier_->Publish(Record(absl::StrCat("tokens=", i), 100));
  FleetStats s = tier_->stats();
  EXPECT_TRUE(s.degraded);
  EXPECT_EQ(s.queued, 3);
  EXPECT_EQ(s.dropped, 2);
  state_->SetFull(false);
  ASSERT_TRUE(tier_->Flush(absl::Seconds(5)));
  EXPECT_EQ(tier_->stats().publishes, 3);
}

TEST_F(FleetTierTest, PublishingKeepsTheFasterRecord) {
  tier_->Publish(Record("tokens=1", 100));
  tier_->Publish(Record("tokens=1", 120));
  tier_->Publish(Record("tokens=1", 90));
  FleetStats s = tier_->stats();
  EXPECT_EQ(s.publishes, 2);
  EXPECT_EQ(s.kept_faster, 1);
  std::optional<RemoteRecord> r = tier_->Get(RemoteKeyOf(Record("tokens=1", 1).bundle.entry));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bundle.entry.metrics.time_ns, 90);
}

}  // namespace
}  // namespace ktune::fleet
