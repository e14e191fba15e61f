// Hosts of a test fleet (tests/testing/fleet_host.h) over one FakeRemoteTier: a key tuned on
// one host is served EXACT by another without tuning; a record that fails the check is
// never served; a job waits on another host's lease and takes the winner, or takes the
// lease over when it expires; an outage fails nothing.
#include "server/tuning/fleet_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "server/base/sha256.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_remote_tier.h"
#include "tests/testing/fleet_host.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::FleetHost;
using ::ktune::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

class FleetSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
  }
  std::unique_ptr<FleetHost> Host(const std::string& name,
                                  absl::Duration lease_ttl = absl::Seconds(30)) {
    fleet::FleetOptions o;
    o.host_id = name;
    o.lease_ttl = lease_ttl;
    o.poll = absl::Milliseconds(20);
    o.retry_after = absl::Milliseconds(100);
    return std::make_unique<FleetHost>(registry_.get(),
                                       std::make_unique<testing::FakeRemoteTier>(state_), o,
                                       &log_);
  }
  // The record of `n` as host `a` published it.
  fleet::RemoteRecord Published(FleetHost& a, int64_t n) {
    absl::MutexLock lock(&state_->mu);
    return state_->records.at(fleet::RemoteKeyString(a.Key(n)));
  }
  void Plant(const fleet::RemoteRecord& r) {
    absl::MutexLock lock(&state_->mu);
    state_->records[fleet::RemoteKeyString(fleet::RemoteKeyOf(r.bundle.entry))] = r;
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::shared_ptr<testing::FakeTierState> state_ = std::make_shared<testing::FakeTierState>();
  std::vector<std::string> log_;
};

TEST_F(FleetSyncTest, AWinnerTunedOnOneHostIsServedExactByAnotherWithoutTuning) {
  auto a = Host("a");
  auto b = Host("b");
  ASSERT_OK_AND_ASSIGN(TuneResult tuned, a->Tune(1000));
  EXPECT_EQ(a->tier->stats().publishes, 1);
  const fleet::RemoteRecord r = Published(*a, 1000);
  EXPECT_EQ(r.publisher, "a");
  EXPECT_EQ(r.bundle.trials.size(), tuned.trials.size());
  ASSERT_TRUE(r.device.has_value());

  ASSERT_OK_AND_ASSIGN(ResolvedKernel hit, b->Resolve(1000, KernelPolicy::kCacheOnly));
  EXPECT_EQ(hit.provenance, KernelProvenance::kExact);
  EXPECT_FALSE(hit.stale);
  EXPECT_EQ(hit.entry.cubin, tuned.entry.cubin);
  EXPECT_EQ(hit.entry.config.params, tuned.entry.config.params);
  EXPECT_EQ(b->gpu.problems, 0);  // b never tuned
  EXPECT_EQ(b->tier->stats().hits, 1);
  // Now in b's own store: the next lookup does not ask the tier.
  const int calls = state_->Calls();
  ASSERT_OK(b->Resolve(1000, KernelPolicy::kCacheOnly).status());
  EXPECT_EQ(state_->Calls(), calls);
  // b's trials are a's, imported with the entry.
  ASSERT_OK_AND_ASSIGN(std::vector<store::Trial> trials, b->store->ListTrials(hit.entry.job_id));
  EXPECT_EQ(trials.size(), tuned.trials.size());
  // A TUNE on b takes the shared winner too.
  ASSERT_OK_AND_ASSIGN(TuneResult again, b->Tune(1000));
  EXPECT_EQ(again.entry.cubin, tuned.entry.cubin);
  EXPECT_EQ(b->gpu.problems, 0);
}

TEST_F(FleetSyncTest, APoisonedRecordIsRefusedAndNeverServed) {
  auto a = Host("a");
  ASSERT_OK(a->Tune(1000).status());
  const fleet::RemoteRecord good = Published(*a, 1000);
  struct Poison {
    const char* what;
    std::function<void(fleet::RemoteRecord&)> spoil;
    const char* why;
  };
  const Poison poisons[] = {
      {"bad sha256", [](fleet::RemoteRecord& r) { r.bundle.entry.cubin_sha256 = std::string(64, 'a'); },
       "cubin_sha256"},
      {"truncated cubin",
       [](fleet::RemoteRecord& r) {
         r.bundle.entry.cubin.resize(r.bundle.entry.cubin.size() / 2);
         r.bundle.entry.cubin_sha256 = Sha256Hex(r.bundle.entry.cubin);
       },
       "cubin"},
      {"not ELF",
       [](fleet::RemoteRecord& r) {
         r.bundle.entry.cubin = "#!/bin/sh\nrm -rf /\n";
         r.bundle.entry.cubin_sha256 = Sha256Hex(r.bundle.entry.cubin);
       },
       "cubin"},
      {"another device model",
       [](fleet::RemoteRecord& r) { r.bundle.entry.key.device_model = "NVIDIA A100|sm_80|108sm|5120bit"; },
       "device model"},
  };
  for (const Poison& p : poisons) {
    SCOPED_TRACE(p.what);
    auto b = Host(absl::StrCat("b-", p.what));
    fleet::RemoteRecord bad = good;
    p.spoil(bad);
    {
      // Stored under the key b asks for, whatever the record says inside.
      absl::MutexLock lock(&state_->mu);
      state_->records[fleet::RemoteKeyString(b->Key(1000))] = bad;
    }
    EXPECT_THAT(b->Resolve(1000, KernelPolicy::kCacheOnly),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("no entry for tiny f32 n=1000")));
    EXPECT_EQ(b->tier->stats().refused, 1);
    EXPECT_EQ(b->tier->stats().hits, 0);
    EXPECT_THAT(log_, Contains(::testing::AllOf(HasSubstr("refused a record"), HasSubstr(p.why))));
    ASSERT_OK_AND_ASSIGN(std::vector<store::EntrySummary> entries, b->store->ListEntries({}));
    EXPECT_TRUE(entries.empty());
  }
}

TEST_F(FleetSyncTest, AJobWaitsOnAnotherHostsLeaseAndTakesItsWinner) {
  auto a = Host("a");
  auto b = Host("b");
  // "a" holds the lease as if it were tuning now.
  ASSERT_OK_AND_ASSIGN(fleet::LeaseState held, a->tier->AcquireLease(a->Key(1000)));
  ASSERT_TRUE(held.acquired);
  std::shared_ptr<TuningJob> waiting = b->StartTune(1000);
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       absl::Now() < end && b->tier->stats().lease_waits == 0;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(b->tier->stats().lease_waits, 1);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(waiting->finished());
  // a tunes for real under the same host id: its job re-takes its own lease.
  ASSERT_OK_AND_ASSIGN(TuneResult tuned, a->Tune(1000));
  ASSERT_OK_AND_ASSIGN(TuneResult got, waiting->Wait(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(got.entry.cubin, tuned.entry.cubin);
  EXPECT_EQ(b->gpu.problems, 0);
  EXPECT_EQ(a->gpu.problems, 1);
  EXPECT_EQ(b->tier->stats().takeovers, 0);
  EXPECT_THAT(log_, Contains(HasSubstr("b: waiting for a, which holds the lease on Fake GPU")));
}

TEST_F(FleetSyncTest, FallbackAnswersAtOnceWhileAnotherHostHoldsTheLease) {
  auto a = Host("a");
  auto b = Host("b");
  ASSERT_OK(a->tier->AcquireLease(a->Key(1000)).status());
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(ResolvedKernel now, b->Resolve(1000, KernelPolicy::kFallback));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(now.provenance, KernelProvenance::kDefault);
  EXPECT_GT(now.tuning_job_id, 0);  // b's background job waits on a's lease
  ASSERT_OK_AND_ASSIGN(TuneResult tuned, a->Tune(1000));
  // b's background job takes a's winner: b answers EXACT without having tuned.
  absl::StatusOr<ResolvedKernel> hit = absl::NotFoundError("not yet");
  for (const absl::Time end = absl::Now() + absl::Seconds(10); absl::Now() < end;) {
    hit = b->Resolve(1000, KernelPolicy::kCacheOnly);
    if (hit.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_OK(hit.status());
  EXPECT_EQ(hit->entry.cubin, tuned.entry.cubin);
  EXPECT_EQ(b->gpu.problems, 0);
}

TEST_F(FleetSyncTest, AnExpiredLeaseIsTakenOverAndTheKeyTunedOnce) {
  auto dead = Host("dead", absl::Milliseconds(300));
  auto b = Host("b");
  ASSERT_OK_AND_ASSIGN(fleet::LeaseState held, dead->tier->AcquireLease(dead->Key(1000)));
  ASSERT_TRUE(held.acquired);
  dead.reset();  // dies holding it; nobody renews
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(TuneResult tuned, b->Tune(1000));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(b->gpu.problems, 1);
  fleet::FleetStats s = b->tier->stats();
  EXPECT_EQ(s.lease_waits, 1);
  EXPECT_EQ(s.takeovers, 1);
  EXPECT_EQ(s.publishes, 1);
  EXPECT_THAT(log_, Contains(::testing::AllOf(HasSubstr("b: took over the lease on"),
                                              HasSubstr("expired without a winner"))));
}

TEST_F(FleetSyncTest, YieldToLeaseEndsAtOnceWithAborted) {
  auto a = Host("a");
  auto b = Host("b");
  ASSERT_OK(a->tier->AcquireLease(a->Key(1000)).status());
  EXPECT_THAT(b->Tune(1000, /*yield_to_lease=*/true),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("is being tuned by a")));
  EXPECT_EQ(b->gpu.problems, 0);
}

TEST_F(FleetSyncTest, AnOutageFailsNothingAndTheWinnerIsPublishedWhenTheTierReturns) {
  auto a = Host("a");
  state_->SetDown(true);
  ASSERT_OK(a->Tune(1000).status());
  ASSERT_OK(a->Resolve(1000, KernelPolicy::kCacheOnly).status());  // the local store serves
  EXPECT_THAT(a->Resolve(2000, KernelPolicy::kCacheOnly), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no entry")));
  fleet::FleetStats s = a->tier->stats();
  EXPECT_TRUE(s.degraded);
  EXPECT_EQ(s.queued, 1);
  EXPECT_EQ(state_->Records(), 0u);
  // FALLBACK answers now and tunes behind, with the tier still out.
  ASSERT_OK_AND_ASSIGN(ResolvedKernel now, a->Resolve(2000, KernelPolicy::kFallback));
  EXPECT_EQ(now.provenance, KernelProvenance::kNearest);  // from n=1000, local
  state_->SetDown(false);
  // Both winners (the TUNE's and the background tune's) reach the tier.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end && state_->Records() < 2) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(state_->Records(), 2u);
  ASSERT_TRUE(a->tier->Flush(absl::Seconds(5)));
  EXPECT_EQ(a->tier->stats().publishes, 2);
  EXPECT_FALSE(a->tier->stats().degraded);
  EXPECT_THAT(log_, Contains(HasSubstr("is back")));
}

TEST_F(FleetSyncTest, AStaleLocalEntryGivesWayToAFreshSharedOne) {
  auto a = Host("a");
  auto b = Host("b");
  ASSERT_OK(a->Tune(1000).status());
  // b holds an entry of an older template source for the key.
  fleet::RemoteRecord old = Published(*a, 1000);
  old.bundle.entry.source_hash = "older-source";
  old.bundle.job.source_hash = "older-source";
  ASSERT_OK(b->store->ImportEntries({}, {old.bundle}, store::ConflictRule::kReplace).status());
  ASSERT_OK_AND_ASSIGN(ResolvedKernel hit, b->Resolve(1000, KernelPolicy::kCacheOnly));
  EXPECT_FALSE(hit.stale);
  EXPECT_EQ(hit.entry.source_hash, (*registry_->Get("tiny"))->source_hash());
}

}  // namespace
}  // namespace ktune
