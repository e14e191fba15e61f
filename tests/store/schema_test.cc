#include "server/store/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/base/config.h"
#include "server/base/launch_spec.h"
#include "server/base/outcome.h"
#include "server/base/sha256.h"
#include "server/store/store.h"
#include "server/store/store_testing.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/golden.h"
#include "tests/testing/status_matchers.h"

namespace ktune::store {
namespace {

using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using namespace ::ktune::store::testing;  // fixtures

// The migrations' text is the file format: an edit to an old migration means files made
// by older builds no longer match what this build thinks they hold.
TEST(Schema, MatchesGolden) {
  // Never edit a released migration: append a new one to server/store/schema.cc.
  ktune::testing::ExpectMatchesGolden("tests/store/testdata/schema.golden.sql", SchemaSql(),
                                      "build/bin/store_test --gtest_filter=Schema.MatchesGolden");
}

TEST(Schema, VersionsAreConsecutiveFromOne) {
  ASSERT_THAT(Migrations(), SizeIs(6));
  for (size_t i = 0; i < Migrations().size(); ++i) {
    EXPECT_EQ(Migrations()[i].version, static_cast<int>(i) + 1);
    EXPECT_FALSE(Migrations()[i].summary.empty());
  }
  EXPECT_EQ(CurrentSchemaVersion(), 6);
}

TEST(Schema, NewFileIsCreatedAtTheCurrentVersion) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  { ASSERT_OK(OpenSqliteStore(path).status()); }
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(CurrentSchemaVersion()));
  // Reopening an up-to-date file changes nothing.
  const std::string before = ReadBytes(path);
  { ASSERT_OK(OpenSqliteStore(path).status()); }
  EXPECT_TRUE(ReadBytes(path) == before);
}

TEST(Schema, CreateAtVersionRefusesAnExistingStore) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  { ASSERT_OK(OpenSqliteStore(path).status()); }
  EXPECT_THAT(CreateStoreFileAtVersionForTesting(path, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already holds")));
  EXPECT_THAT(CreateStoreFileAtVersionForTesting(dir.File("x.db"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no schema version 0")));
}

// A file an older build (schema v1) filled: jobs without strategy/error, entries without
// tuning_seconds, trials and entries without last_wave/batch/l2_flushed. Opening it
// read-write migrates it through v2 and v3 in place and keeps every row.
TEST(Schema, MigratesFromV1WithDataIntact) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK(CreateStoreFileAtVersionForTesting(path, 1));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(1));

  const std::string cubin = MakeCubin(5, 3000);
  const Config config = MakeConfig(256);
  LaunchSpec launch;
  launch.lowered_name = "_Z6kernelv";
  launch.grid = {10, 1, 1};
  launch.block = {256, 1, 1};
  launch.args = {"x"};
  const std::string v1_rows = absl::StrCat(
      "INSERT INTO devices VALUES ('H200|sm_90', 'NVIDIA H200', 9, 0, 132, 52428800, 6144, "
      "2619000, 4000.5, 'GPU-1', '580.1', 1700000000000);"
      "INSERT INTO templates VALUES ('rmsnorm', 'src-aaaa', 1700000000000);"
      "INSERT INTO jobs (id, device_model, template_id, dtype, shape, source_hash, "
      "nvrtc_version, state, done, total, created_unix_ms, updated_unix_ms) VALUES "
      "(1, 'H200|sm_90', 'rmsnorm', 'f16', 'n=1', 'src-aaaa', '12.8', 'done', 2, 2, "
      "1700000000000, 1700000000500),"
      "(2, 'H200|sm_90', 'rmsnorm', 'f32', 'n=1', 'src-aaaa', '12.8', 'running', 1, 8, "
      "1700000001000, 1700000001000);"
      "INSERT INTO trials (job_id, config, candidate_hash, outcome, compile_ms, time_ns, "
      "spread_ns, repeats, registers, spill_bytes, static_smem, dynamic_smem, occupancy, "
      "waves, gbps, gflops, ceiling_fraction, log, created_unix_ms) VALUES "
      "(1, '",
      ConfigToJson(config),
      "', 'c1', 'ok', 100, 2000, 10, 50, 32, 0, 0, 1024, 0.5, "
      "2, 3000, 10, 0.7, '', 1700000000100),"
      "(1, '",
      ConfigToJson(config),
      "', 'c2', 'compile_failed', 90, 0, 0, 0, 0, 0, 0, 0, 0, "
      "0, 0, 0, 0, 'error: too many resources', 1700000000200);"
      "INSERT INTO entries (device_model, template_id, dtype, shape, source_hash, "
      "nvrtc_version, config, cubin, cubin_sha256, launches, time_ns, spread_ns, repeats, "
      "registers, spill_bytes, static_smem, dynamic_smem, occupancy, waves, gbps, gflops, "
      "ceiling_fraction, job_id, trials_total, trials_ok, created_unix_ms) VALUES "
      "('H200|sm_90', 'rmsnorm', 'f16', 'n=1', 'src-aaaa', '12.8', '",
      ConfigToJson(config), "', X'", absl::BytesToHexString(cubin), "', '", Sha256Hex(cubin),
      "', '", LaunchesToJson({launch}),
      "', 2000, 10, 50, 32, 0, 0, 1024, 0.5, 2, 3000, 10, 0.7, "
      "1, 2, 1, 1700000000600);");
  ASSERT_OK(ExecSqlForTesting(path, v1_rows));

  // A read-only open cannot migrate, and says so without touching the file.
  const std::string before = ReadBytes(path);
  StoreOptions read_only;
  read_only.read_only = true;
  EXPECT_THAT(OpenSqliteStore(path, read_only),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("schema version 1"), HasSubstr("older"))));
  EXPECT_TRUE(ReadBytes(path) == before);

  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(CurrentSchemaVersion()));
  EXPECT_THAT(CheckIntegrity(path), IsOkAndHolds("ok"));

  ASSERT_OK_AND_ASSIGN(Device device, store->GetDevice("H200|sm_90"));
  EXPECT_EQ(device.copy_gbps, 4000.5);
  EXPECT_EQ(device.driver_version, "580.1");

  ASSERT_OK_AND_ASSIGN(Job done, store->GetJob(1));
  EXPECT_EQ(done.state, JobState::kDone);
  EXPECT_EQ(done.nvrtc_version, "12.8");
  EXPECT_EQ(done.updated_unix_ms, 1700000000500);
  EXPECT_EQ(done.strategy, "");  // v2 columns read as their defaults
  EXPECT_EQ(done.error, "");
  ASSERT_OK_AND_ASSIGN(std::vector<Job> running, store->ListJobs(JobState::kRunning));
  ASSERT_THAT(running, SizeIs(1));
  EXPECT_EQ(running[0].id, 2);
  EXPECT_EQ(running[0].key.dtype, "f32");

  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, store->ListTrials(1));
  ASSERT_THAT(trials, SizeIs(2));
  EXPECT_EQ(trials[0].config, config);
  EXPECT_EQ(trials[0].metrics.time_ns, 2000);
  EXPECT_EQ(trials[0].metrics.waves, 2);
  EXPECT_EQ(trials[0].metrics.ceiling_fraction, 0.7);
  EXPECT_EQ(trials[0].metrics.last_wave, 0);  // v3 columns read as their defaults
  EXPECT_EQ(trials[0].metrics.batch, 0);
  EXPECT_FALSE(trials[0].metrics.l2_flushed);
  EXPECT_EQ(trials[1].outcome, Outcome::kCompileFailed);
  EXPECT_EQ(trials[1].log, "error: too many resources");

  ASSERT_OK_AND_ASSIGN(
      Lookup hit,
      store->LookupEntry(MakeKey("n=1", "f16", "rmsnorm", "H200|sm_90"), "src-aaaa", "13.0"));
  EXPECT_TRUE(hit.stale);  // tuned with NVRTC 12.8
  EXPECT_TRUE(hit.entry.cubin == cubin);
  EXPECT_EQ(hit.entry.config, config);
  EXPECT_EQ(hit.entry.launches, std::vector<LaunchSpec>{launch});
  EXPECT_EQ(hit.entry.job_id, 1);
  EXPECT_EQ(hit.entry.tuning_seconds, 0);
  EXPECT_EQ(hit.entry.metrics.gbps, 3000);
  EXPECT_EQ(hit.entry.metrics.last_wave, 0);
  EXPECT_EQ(hit.entry.metrics.batch, 0);
  EXPECT_FALSE(hit.entry.metrics.l2_flushed);
  EXPECT_EQ(hit.entry.created_unix_ms, 1700000000600);

  // The new columns work on the migrated rows, and new ids do not reuse old ones.
  ASSERT_OK(store->UpdateJob(2, JobState::kFailed, 1, 8, "device lost"));
  ASSERT_OK_AND_ASSIGN(Job failed, store->GetJob(2));
  EXPECT_EQ(failed.error, "device lost");
  ASSERT_OK_AND_ASSIGN(int64_t next, store->CreateJob(MakeJob(MakeKey("n=2"))));
  EXPECT_EQ(next, 3);
}

// A file the previous build (schema v2) filled, with its strategy, error and
// tuning_seconds set. Opening it read-write adds the v3 columns, keeps every row and value,
// and the migrated file then stores and returns the new fields.
TEST(Schema, MigratesFromV2WithDataIntact) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK(CreateStoreFileAtVersionForTesting(path, 2));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(2));

  const std::string cubin = MakeCubin(6, 2500);
  const Config config = MakeConfig(512);
  LaunchSpec launch;
  launch.lowered_name = "_Z6kernelv";
  launch.grid = {264, 1, 1};
  launch.block = {512, 1, 1};
  launch.args = {"x", "y"};
  const std::string v2_rows = absl::StrCat(
      "INSERT INTO templates VALUES ('rmsnorm', 'src-aaaa', 1700000000000);"
      "INSERT INTO jobs (id, device_model, template_id, dtype, shape, source_hash, "
      "nvrtc_version, state, done, total, created_unix_ms, updated_unix_ms, strategy, error) "
      "VALUES (1, 'H200|sm_90', 'rmsnorm', 'f16', 'n=1', 'src-aaaa', '13.0', 'done', 2, 2, "
      "1700000000000, 1700000000500, 'random:64', ''),"
      "(2, 'H200|sm_90', 'rmsnorm', 'bf16', 'n=1', 'src-aaaa', '13.0', 'failed', 1, 8, "
      "1700000001000, 1700000001200, 'exhaustive', 'device lost');"
      "INSERT INTO trials (job_id, config, candidate_hash, outcome, compile_ms, time_ns, "
      "spread_ns, repeats, registers, spill_bytes, static_smem, dynamic_smem, occupancy, "
      "waves, gbps, gflops, ceiling_fraction, log, created_unix_ms) VALUES (1, '",
      ConfigToJson(config),
      "', 'c1', 'ok', 120, 1500, 15, 40, 30, 4, 256, 2048, 0.625, 1.25, 3500, 20, 0.85, '', "
      "1700000000100);"
      "INSERT INTO entries (device_model, template_id, dtype, shape, source_hash, "
      "nvrtc_version, config, cubin, cubin_sha256, launches, time_ns, spread_ns, repeats, "
      "registers, spill_bytes, static_smem, dynamic_smem, occupancy, waves, gbps, gflops, "
      "ceiling_fraction, job_id, trials_total, trials_ok, tuning_seconds, created_unix_ms) "
      "VALUES ('H200|sm_90', 'rmsnorm', 'f16', 'n=1', 'src-aaaa', '13.0', '",
      ConfigToJson(config), "', X'", absl::BytesToHexString(cubin), "', '", Sha256Hex(cubin),
      "', '", LaunchesToJson({launch}),
      "', 1500, 15, 40, 30, 4, 256, 2048, 0.625, 1.25, 3500, 20, 0.85, 1, 2, 1, 42.5, "
      "1700000000600);");
  ASSERT_OK(ExecSqlForTesting(path, v2_rows));

  const std::string before = ReadBytes(path);
  StoreOptions read_only;
  read_only.read_only = true;
  EXPECT_THAT(OpenSqliteStore(path, read_only),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("schema version 2"), HasSubstr("older"))));
  EXPECT_TRUE(ReadBytes(path) == before);

  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(CurrentSchemaVersion()));
  EXPECT_THAT(CheckIntegrity(path), IsOkAndHolds("ok"));

  ASSERT_OK_AND_ASSIGN(Job done, store->GetJob(1));
  EXPECT_EQ(done.strategy, "random:64");
  EXPECT_EQ(done.updated_unix_ms, 1700000000500);
  ASSERT_OK_AND_ASSIGN(Job failed, store->GetJob(2));
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.strategy, "exhaustive");
  EXPECT_EQ(failed.error, "device lost");

  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, store->ListTrials(1));
  ASSERT_THAT(trials, SizeIs(1));
  EXPECT_EQ(trials[0].config, config);
  EXPECT_EQ(trials[0].candidate_hash, "c1");
  EXPECT_EQ(trials[0].compile_ms, 120);
  EXPECT_EQ(trials[0].metrics.time_ns, 1500);
  EXPECT_EQ(trials[0].metrics.spill_bytes, 4);
  EXPECT_EQ(trials[0].metrics.occupancy, 0.625);
  EXPECT_EQ(trials[0].metrics.waves, 1.25);
  EXPECT_EQ(trials[0].metrics.ceiling_fraction, 0.85);
  EXPECT_EQ(trials[0].metrics.last_wave, 0);  // not recorded before v3
  EXPECT_EQ(trials[0].metrics.batch, 0);
  EXPECT_FALSE(trials[0].metrics.l2_flushed);
  EXPECT_EQ(trials[0].created_unix_ms, 1700000000100);

  const EntryKey key = MakeKey("n=1", "f16", "rmsnorm", "H200|sm_90");
  ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(key, "src-aaaa", "13.0"));
  EXPECT_FALSE(hit.stale);
  EXPECT_TRUE(hit.entry.cubin == cubin);
  EXPECT_EQ(hit.entry.config, config);
  EXPECT_EQ(hit.entry.launches, std::vector<LaunchSpec>{launch});
  EXPECT_EQ(hit.entry.metrics.time_ns, 1500);
  EXPECT_EQ(hit.entry.metrics.gflops, 20);
  EXPECT_EQ(hit.entry.metrics.last_wave, 0);
  EXPECT_EQ(hit.entry.metrics.batch, 0);
  EXPECT_FALSE(hit.entry.metrics.l2_flushed);
  EXPECT_EQ(hit.entry.job_id, 1);
  EXPECT_EQ(hit.entry.tuning_seconds, 42.5);
  EXPECT_EQ(hit.entry.created_unix_ms, 1700000000600);

  // The migrated file stores the v3 fields: a re-tune replaces the winner with them set.
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  Trial trial = MakeTrial(job, 0);
  trial.metrics.last_wave = 0.5;
  trial.metrics.batch = 8;
  trial.metrics.l2_flushed = true;
  Entry entry = MakeEntry(key, job, 3);
  entry.metrics = trial.metrics;
  ASSERT_OK(store->CommitWinner(entry, {trial}).status());
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> retuned, store->ListTrials(job));
  ASSERT_THAT(retuned, SizeIs(1));
  EXPECT_TRUE(SameMetrics(retuned[0].metrics, trial.metrics));
  ASSERT_OK_AND_ASSIGN(hit, store->LookupEntry(key, "src-aaaa", "13.0"));
  EXPECT_EQ(hit.entry.metrics.last_wave, 0.5);
  EXPECT_EQ(hit.entry.metrics.batch, 8);
  EXPECT_TRUE(hit.entry.metrics.l2_flushed);
  ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> list, store->ListEntries({}));
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_TRUE(SameMetrics(list[0].metrics, trial.metrics));
}

// v6 over a v5 file with a job: the job is kept, its stop reason empty until one is set.
TEST(Schema, MigratesFromV5WithJobsKept) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  int64_t job = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
    ASSERT_OK_AND_ASSIGN(job, store->CreateJob(MakeJob(MakeKey("n=1"))));
  }
  ASSERT_OK(ExecSqlForTesting(path,
                              "ALTER TABLE jobs DROP COLUMN stop_reason; PRAGMA user_version = 5;"));
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(6));
  ASSERT_OK_AND_ASSIGN(Job got, store->GetJob(job));
  EXPECT_EQ(got.strategy, "random:64");
  EXPECT_EQ(got.stop_reason, "");
  ASSERT_OK(store->SetJobStopReason(job, "budget of 64 reached"));
  ASSERT_OK_AND_ASSIGN(got, store->GetJob(job));
  EXPECT_EQ(got.stop_reason, "budget of 64 reached");
  EXPECT_THAT(store->SetJobStopReason(job + 1, "x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no job")));
}

// v5's counter over a file that already has entries: they are kept, and a change to one of
// them moves the counter like a change to a new one.
TEST(Schema, MigratesFromV4WithEntriesWatched) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  const EntryKey key = MakeKey("n=1");
  int64_t entry = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
    ASSERT_OK_AND_ASSIGN(const int64_t job, store->CreateJob(MakeJob(key)));
    ASSERT_OK_AND_ASSIGN(entry, store->CommitWinner(MakeEntry(key, job, 1), {}));
  }
  // Back to what v4 created: no counter table, no triggers.
  ASSERT_OK(ExecSqlForTesting(path,
                              "DROP TRIGGER entries_generation_on_insert;"
                              "DROP TRIGGER entries_generation_on_update;"
                              "DROP TRIGGER entries_generation_on_delete;"
                              "DROP TABLE entries_generation;"
                              "ALTER TABLE jobs DROP COLUMN stop_reason; PRAGMA user_version = 4;"));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(4));

  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(CurrentSchemaVersion()));
  EXPECT_THAT(CheckIntegrity(path), IsOkAndHolds("ok"));
  ASSERT_OK_AND_ASSIGN(const Lookup kept, store->GetEntry(entry));
  EXPECT_EQ(kept.entry.key.shape, "n=1");
  ASSERT_OK_AND_ASSIGN(const int64_t before, store->EntriesChangeCounter());
  ASSERT_OK(ExecSqlForTesting(path, "UPDATE entries SET time_ns = 1"));
  ASSERT_OK_AND_ASSIGN(const int64_t after, store->EntriesChangeCounter());
  EXPECT_GT(after, before);
}

TEST(Schema, TwoOpensOfANewFileMigrateOnce) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK_AND_ASSIGN(auto first, OpenSqliteStore(path));
  ASSERT_OK_AND_ASSIGN(auto second, OpenSqliteStore(path));
  ASSERT_OK_AND_ASSIGN(int64_t job, first->CreateJob(MakeJob(MakeKey("n=1"))));
  EXPECT_THAT(second->GetJob(job), IsOkAndHolds(::testing::Field(&Job::id, job)));
  EXPECT_THAT(ReadSchemaVersion(path), IsOkAndHolds(CurrentSchemaVersion()));
}

}  // namespace
}  // namespace ktune::store
