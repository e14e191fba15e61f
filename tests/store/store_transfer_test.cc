// The store's side of `ktune cache`: Stats, ImportEntries (conflict rules, all or nothing),
// DeleteEntries (entries, their jobs and trials, all or nothing) and the export file format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/store/export_file.h"
#include "server/store/store.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace ktune::store {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using namespace ::ktune::store::testing;  // fixtures

// An entry with its job and `n` trials, as an export holds it.
EntryBundle MakeBundle(const EntryKey& key, int64_t seed, int n) {
  EntryBundle b;
  b.job = MakeJob(key);
  b.job.state = JobState::kDone;
  b.job.created_unix_ms = 1700000000000 + seed;
  b.job.updated_unix_ms = 1700000005000 + seed;
  b.trials = MakeTrials(0, n);
  b.trials.push_back(MakeTrial(0, n, Outcome::kCrashed));
  b.entry = MakeEntry(key, 0, seed);
  b.entry.default_time_ns = 2000.5 + seed;
  return b;
}

class StoreTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = OpenSqliteStore(dir_.File("ktune.db"));
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTransferTest, ImportAddsEntriesJobsTrialsAndUnknownDevices) {
  Device mine = MakeDevice();
  mine.copy_gbps = 1000;
  ASSERT_OK(store_->PutDevice(mine));
  Device theirs = MakeDevice();
  theirs.copy_gbps = 4000;
  Device other = MakeDevice("other|sm_80");
  ASSERT_OK_AND_ASSIGN(auto results,
                       store_->ImportEntries({theirs, other},
                                             {MakeBundle(MakeKey("a=1"), 1, 3),
                                              MakeBundle(MakeKey("a=2"), 2, 2)},
                                             ConflictRule::kKeepFaster));
  ASSERT_THAT(results, SizeIs(2));
  EXPECT_EQ(results[0].action, ImportResult::Action::kAdded);
  ASSERT_OK_AND_ASSIGN(Lookup got, store_->GetEntry(results[0].entry_id));
  EXPECT_EQ(got.entry.default_time_ns, 2001.5);
  ASSERT_OK_AND_ASSIGN(Job job, store_->GetJob(got.entry.job_id));
  EXPECT_EQ(job.state, JobState::kDone);
  EXPECT_EQ(job.created_unix_ms, 1700000000001);
  ASSERT_OK_AND_ASSIGN(auto trials, store_->ListTrials(got.entry.job_id));
  EXPECT_THAT(trials, SizeIs(4));
  // The host's own ceiling stays; a model it never saw is added.
  EXPECT_THAT(store_->GetDevice(mine.model_key), ::ktune::testing::IsOkAndHolds(
                                                     ::testing::Field(&Device::copy_gbps, 1000)));
  EXPECT_OK(store_->GetDevice("other|sm_80").status());
  ASSERT_OK_AND_ASSIGN(StoreStats stats, store_->Stats());
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.jobs, 2);
  EXPECT_EQ(stats.trials, 7);
  EXPECT_EQ(stats.trials_by_outcome,
            (std::vector<std::pair<std::string, int64_t>>{{"crashed", 2}, {"ok", 5}}));
  EXPECT_GT(stats.file_bytes, 0);
}

TEST_F(StoreTransferTest, ConflictRules) {
  const EntryKey key = MakeKey("a=1");
  EntryBundle slow = MakeBundle(key, 5, 1);  // time 1005.25
  EntryBundle fast = MakeBundle(key, 1, 1);  // time 1001.25
  ASSERT_OK(store_->ImportEntries({}, {slow}, ConflictRule::kKeepFaster).status());
  ASSERT_OK_AND_ASSIGN(auto r, store_->ImportEntries({}, {fast}, ConflictRule::kKeepExisting));
  EXPECT_EQ(r[0].action, ImportResult::Action::kKeptExisting);
  EXPECT_EQ(r[0].existing_time_ns, slow.entry.metrics.time_ns);
  ASSERT_OK_AND_ASSIGN(r, store_->ImportEntries({}, {fast}, ConflictRule::kKeepFaster));
  EXPECT_EQ(r[0].action, ImportResult::Action::kReplaced);
  ASSERT_OK_AND_ASSIGN(r, store_->ImportEntries({}, {slow}, ConflictRule::kKeepFaster));
  EXPECT_EQ(r[0].action, ImportResult::Action::kKeptExisting);
  ASSERT_OK_AND_ASSIGN(r, store_->ImportEntries({}, {fast}, ConflictRule::kKeepFaster));
  EXPECT_EQ(r[0].action, ImportResult::Action::kKeptExisting) << "a tie keeps the existing";
  ASSERT_OK_AND_ASSIGN(r, store_->ImportEntries({}, {slow}, ConflictRule::kReplace));
  EXPECT_EQ(r[0].action, ImportResult::Action::kReplaced);
  ASSERT_OK_AND_ASSIGN(auto entries, store_->ListEntries({}));
  ASSERT_THAT(entries, SizeIs(1));
  EXPECT_EQ(entries[0].metrics.time_ns, slow.entry.metrics.time_ns);
}

TEST_F(StoreTransferTest, AnImportWithOneBadEntryWritesNothing) {
  EntryBundle bad = MakeBundle(MakeKey("a=2"), 2, 1);
  bad.entry.cubin[10] ^= 1;
  EXPECT_THAT(store_->ImportEntries({}, {MakeBundle(MakeKey("a=1"), 1, 1), bad},
                                    ConflictRule::kReplace),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cubin sha256")));
  EXPECT_THAT(store_->ImportEntries(
                  {}, {MakeBundle(MakeKey("a=1"), 1, 1), MakeBundle(MakeKey("a=1"), 2, 1)},
                  ConflictRule::kReplace),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  ASSERT_OK_AND_ASSIGN(StoreStats stats, store_->Stats());
  EXPECT_EQ(stats.entries + stats.jobs + stats.trials, 0);
}

TEST_F(StoreTransferTest, DeleteEntriesTakesTheirJobsAndTrials) {
  ASSERT_OK_AND_ASSIGN(auto r, store_->ImportEntries({},
                                                     {MakeBundle(MakeKey("a=1"), 1, 3),
                                                      MakeBundle(MakeKey("a=2"), 2, 2)},
                                                     ConflictRule::kKeepFaster));
  EXPECT_THAT(store_->DeleteEntries({r[0].entry_id, 999}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no entry 999")));
  ASSERT_OK_AND_ASSIGN(StoreStats before, store_->Stats());
  EXPECT_EQ(before.entries, 2) << "a failed delete removes nothing";
  ASSERT_OK_AND_ASSIGN(DeleteResult d, store_->DeleteEntries({r[0].entry_id}));
  EXPECT_EQ(d.entries, 1);
  EXPECT_EQ(d.jobs, 1);
  EXPECT_EQ(d.trials, 4);
  ASSERT_OK_AND_ASSIGN(StoreStats after, store_->Stats());
  EXPECT_EQ(after.entries, 1);
  EXPECT_EQ(after.jobs, 1);
  EXPECT_EQ(after.trials, 3);
}

TEST(ExportFile, RoundTripsEveryField) {
  ExportFile f;
  f.exported_unix_ms = 1700000009999;
  f.devices = {MakeDevice()};
  f.entries = {MakeBundle(MakeKey("a=1"), 1, 2), MakeBundle(MakeKey("b=7", "bf16"), 3, 1)};
  f.entries[1].job.error = "none \"quoted\"\n";
  const std::string json = ExportToJson(f);
  ASSERT_OK_AND_ASSIGN(ExportFile back, ExportFromJson(json, "x.json"));
  EXPECT_EQ(back.exported_unix_ms, f.exported_unix_ms);
  ASSERT_THAT(back.devices, SizeIs(1));
  EXPECT_EQ(back.devices[0].uuid, f.devices[0].uuid);
  EXPECT_EQ(back.devices[0].copy_gbps, f.devices[0].copy_gbps);
  ASSERT_THAT(back.entries, SizeIs(2));
  for (size_t i = 0; i < 2; ++i) {
    const EntryBundle& a = f.entries[i];
    const EntryBundle& b = back.entries[i];
    EXPECT_TRUE(a.entry.key == b.entry.key);
    EXPECT_TRUE(a.entry.cubin == b.entry.cubin);
    EXPECT_EQ(a.entry.cubin_sha256, b.entry.cubin_sha256);
    EXPECT_TRUE(a.entry.config == b.entry.config);
    EXPECT_TRUE(a.entry.launches == b.entry.launches);
    EXPECT_TRUE(SameMetrics(a.entry.metrics, b.entry.metrics));
    EXPECT_EQ(a.entry.tuning_seconds, b.entry.tuning_seconds);
    EXPECT_EQ(a.entry.default_time_ns, b.entry.default_time_ns);
    EXPECT_EQ(a.job.error, b.job.error);
    EXPECT_EQ(a.job.strategy, b.job.strategy);
    ASSERT_EQ(a.trials.size(), b.trials.size());
    for (size_t k = 0; k < a.trials.size(); ++k) {
      EXPECT_TRUE(SameMetrics(a.trials[k].metrics, b.trials[k].metrics));
      EXPECT_EQ(a.trials[k].outcome, b.trials[k].outcome);
      EXPECT_EQ(a.trials[k].log, b.trials[k].log);
    }
  }
  EXPECT_EQ(ExportToJson(back), json);
}

TEST(ExportFile, BadInputNamesTheField) {
  EXPECT_THAT(ExportFromJson("[1]", "x.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.json is not a ktune export")));
  EXPECT_THAT(ExportFromJson(R"({"format":"ktune-cache-export","version":2})", "x.json"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("export version 2")));
  ExportFile f;
  f.entries = {MakeBundle(MakeKey("a=1"), 1, 1)};
  std::string json = ExportToJson(f);
  json.replace(json.find("\"outcome\": \"ok\""), 15, "\"outcome\": \"meh\"");
  EXPECT_THAT(ExportFromJson(json, "x.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.json: entries[0].trials[0].outcome: unknown outcome \"meh\"")));
}

}  // namespace
}  // namespace ktune::store
