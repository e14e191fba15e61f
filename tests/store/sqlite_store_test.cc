#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/sha256.h"
#include "server/store/schema.h"
#include "server/store/store.h"
#include "server/store/store_testing.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace ktune::store {
namespace {

using ::ktune::testing::IsOk;
using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using namespace ::ktune::store::testing;  // fixtures

StoreOptions Options(bool read_only) {
  StoreOptions o;
  o.read_only = read_only;
  return o;
}
StoreOptions ReadOnly() { return Options(true); }

std::unique_ptr<Store> OpenMemory() {
  auto store = OpenSqliteStore(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

// ---- round trips ----

TEST(SqliteStore, DeviceRoundTripAndUpdate) {
  auto store = OpenMemory();
  const Device d = MakeDevice();
  ASSERT_OK(store->PutDevice(d));
  ASSERT_OK_AND_ASSIGN(Device got, store->GetDevice(d.model_key));
  EXPECT_EQ(got.model_key, d.model_key);
  EXPECT_EQ(got.name, d.name);
  EXPECT_EQ(got.cc_major, 9);
  EXPECT_EQ(got.cc_minor, 0);
  EXPECT_EQ(got.sm_count, 132);
  EXPECT_EQ(got.l2_bytes, d.l2_bytes);
  EXPECT_EQ(got.memory_bus_bits, 6144);
  EXPECT_EQ(got.memory_clock_khz, d.memory_clock_khz);
  EXPECT_EQ(got.copy_gbps, d.copy_gbps);
  EXPECT_EQ(got.uuid, d.uuid);
  EXPECT_EQ(got.driver_version, d.driver_version);

  // A second card of the model: same row, new provenance.
  Device other = d;
  other.uuid = "GPU-ffff";
  other.driver_version = "590.1";
  ASSERT_OK(store->PutDevice(other));
  ASSERT_OK(store->PutDevice(MakeDevice("A100|sm_80|108sm|5120bit")));
  ASSERT_OK_AND_ASSIGN(std::vector<Device> all, store->ListDevices());
  ASSERT_THAT(all, SizeIs(2));
  EXPECT_EQ(all[0].model_key, "A100|sm_80|108sm|5120bit");
  EXPECT_EQ(all[1].uuid, "GPU-ffff");
  EXPECT_EQ(all[1].driver_version, "590.1");

  EXPECT_THAT(store->GetDevice("RTX|sm_89"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("RTX|sm_89")));
  EXPECT_THAT(store->PutDevice(Device{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model_key")));
}

// The stored ceiling only goes up: a new model is inserted, a lower reading leaves the row
// as it is (uuid included), a higher one replaces it; each call answers what is stored.
// An explicit --db used to be created 0644 (SQLite's default): every local user could read
// the cubins and the tuning history. The store and its WAL files are born 0600.
TEST(SqliteStore, ANewStoreFileIsPrivate) {
  TempDir dir;
  const mode_t old_umask = umask(022);
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(dir.File("ktune.db")));
    ASSERT_OK(store->PutDevice(MakeDevice("H200|sm_90|132sm|6144bit")));
    for (const char* name : {"ktune.db", "ktune.db-wal"}) {
      struct stat st;
      ASSERT_EQ(stat(dir.File(name).c_str(), &st), 0) << name;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
    }
  }
  umask(old_umask);
}

TEST(SqliteStore, RaiseCopyCeilingKeepsTheHighest) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(dir.File("ktune.db")));
  Device d = MakeDevice();
  d.copy_gbps = 4000;
  EXPECT_THAT(store->RaiseCopyCeiling(d), IsOkAndHolds(4000));
  Device lower = d;
  lower.copy_gbps = 3890;
  lower.uuid = "GPU-lower";
  EXPECT_THAT(store->RaiseCopyCeiling(lower), IsOkAndHolds(4000));
  ASSERT_OK_AND_ASSIGN(Device kept, store->GetDevice(d.model_key));
  EXPECT_EQ(kept.uuid, d.uuid);
  Device higher = d;
  higher.copy_gbps = 4200;
  higher.uuid = "GPU-higher";
  EXPECT_THAT(store->RaiseCopyCeiling(higher), IsOkAndHolds(4200));
  ASSERT_OK_AND_ASSIGN(Device raised, store->GetDevice(d.model_key));
  EXPECT_EQ(raised.copy_gbps, 4200);
  EXPECT_EQ(raised.uuid, "GPU-higher");
  EXPECT_THAT(store->RaiseCopyCeiling(Device{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model_key")));
}

TEST(SqliteStore, JobRoundTripAndUpdate) {
  auto store = OpenMemory();
  const int64_t before = absl::ToUnixMillis(absl::Now());
  Job job = MakeJob(MakeKey("hidden=8192,tokens=4096"), 64);
  job.state = JobState::kQueued;
  ASSERT_OK_AND_ASSIGN(int64_t id, store->CreateJob(job));
  ASSERT_OK_AND_ASSIGN(Job got, store->GetJob(id));
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(got.key, job.key);
  EXPECT_EQ(got.source_hash, "src-aaaa");
  EXPECT_EQ(got.nvrtc_version, "13.0");
  EXPECT_EQ(got.strategy, "random:64");
  EXPECT_EQ(got.state, JobState::kQueued);
  EXPECT_EQ(got.done, 0);
  EXPECT_EQ(got.total, 64);
  EXPECT_EQ(got.error, "");
  EXPECT_GE(got.created_unix_ms, before);
  EXPECT_LE(got.created_unix_ms, absl::ToUnixMillis(absl::Now()));
  EXPECT_EQ(got.updated_unix_ms, got.created_unix_ms);

  ASSERT_OK(store->UpdateJob(id, JobState::kFailed, 12, 60, "NVRTC crashed"));
  ASSERT_OK_AND_ASSIGN(got, store->GetJob(id));
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.done, 12);
  EXPECT_EQ(got.total, 60);
  EXPECT_EQ(got.error, "NVRTC crashed");
  EXPECT_GE(got.updated_unix_ms, got.created_unix_ms);

  EXPECT_THAT(store->UpdateJob(id + 100, JobState::kDone, 1, 1, ""),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(absl::StrCat("job ", id + 100))));
  EXPECT_THAT(store->GetJob(id + 100), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no job")));
  EXPECT_THAT(store->CreateJob(MakeJob(MakeKey(""))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incomplete key")));
}

TEST(SqliteStore, ListJobsByStateOldestFirst) {
  auto store = OpenMemory();
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) {
    Job job = MakeJob(MakeKey(absl::StrCat("n=", i)));
    job.state = JobState::kQueued;
    ASSERT_OK_AND_ASSIGN(int64_t id, store->CreateJob(job));
    ids.push_back(id);
  }
  ASSERT_OK(store->UpdateJob(ids[3], JobState::kRunning, 1, 20, ""));
  ASSERT_OK(store->UpdateJob(ids[1], JobState::kRunning, 2, 20, ""));
  ASSERT_OK(store->UpdateJob(ids[2], JobState::kAbandoned, 0, 20, "daemon stopped"));

  ASSERT_OK_AND_ASSIGN(std::vector<Job> running, store->ListJobs(JobState::kRunning));
  ASSERT_THAT(running, SizeIs(2));
  EXPECT_EQ(running[0].id, ids[1]);
  EXPECT_EQ(running[1].id, ids[3]);
  EXPECT_EQ(running[1].done, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<Job> queued, store->ListJobs(JobState::kQueued));
  ASSERT_THAT(queued, SizeIs(1));
  EXPECT_EQ(queued[0].id, ids[0]);
  ASSERT_OK_AND_ASSIGN(std::vector<Job> abandoned, store->ListJobs(JobState::kAbandoned));
  ASSERT_THAT(abandoned, SizeIs(1));
  EXPECT_EQ(abandoned[0].error, "daemon stopped");
  EXPECT_THAT(store->ListJobs(JobState::kFailed), ::ktune::testing::IsOkAndHolds(IsEmpty()));
}

TEST(SqliteStore, TrialRoundTripEveryOutcome) {
  auto store = OpenMemory();
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(MakeKey("n=1"))));
  const std::vector<Outcome> outcomes = {
      Outcome::kOk,           Outcome::kCompileFailed, Outcome::kResourceLimit,
      Outcome::kLaunchFailed, Outcome::kWrongResult,   Outcome::kTimedOut,
      Outcome::kCrashed};
  std::vector<Trial> added;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    Trial t = MakeTrial(job, static_cast<int64_t>(i), outcomes[i]);
    t.metrics.l2_flushed = i % 2 == 0;  // both values of the one boolean column
    ASSERT_OK_AND_ASSIGN(t.id, store->AddTrial(t));
    added.push_back(t);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> got, store->ListTrials(job));
  ASSERT_THAT(got, SizeIs(outcomes.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].id, added[i].id);
    EXPECT_EQ(got[i].job_id, job);
    EXPECT_EQ(got[i].config, added[i].config);
    EXPECT_EQ(got[i].candidate_hash, added[i].candidate_hash);
    EXPECT_EQ(got[i].outcome, outcomes[i]);
    EXPECT_EQ(got[i].compile_ms, added[i].compile_ms);
    EXPECT_TRUE(SameMetrics(got[i].metrics, added[i].metrics));
    EXPECT_EQ(got[i].metrics.last_wave, 0.375);  // the v3 columns, by name for a clear failure
    EXPECT_EQ(got[i].metrics.batch, 4 + static_cast<int64_t>(i));
    EXPECT_EQ(got[i].metrics.l2_flushed, i % 2 == 0);
    EXPECT_EQ(got[i].log, added[i].log);
    EXPECT_EQ(got[i].created_unix_ms, added[i].created_unix_ms);
  }
  EXPECT_LT(got[0].id, got[1].id);
  EXPECT_THAT(store->ListTrials(job + 1), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store->AddTrial(MakeTrial(job + 1, 0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(absl::StrCat("job ", job + 1))));
}

TEST(SqliteStore, EntryRoundTripThroughCommitWinner) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("hidden=8192,tokens=4096");
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key, 20)));
  ASSERT_OK(store->AddTrial(MakeTrial(job, 0)).status());  // recorded before the win
  Entry entry = MakeEntry(key, job, 1);
  ASSERT_NE(entry.cubin.find('\0'), std::string::npos);
  ASSERT_OK_AND_ASSIGN(entry.id, store->CommitWinner(entry, MakeTrials(0, 19)));

  ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(key, "src-aaaa", "13.0"));
  EXPECT_FALSE(hit.stale);
  EXPECT_EQ(hit.entry.id, entry.id);
  ExpectSameEntry(hit.entry, entry);
  EXPECT_EQ(hit.entry.metrics.last_wave, 0.375);
  EXPECT_EQ(hit.entry.metrics.batch, 5);
  EXPECT_TRUE(hit.entry.metrics.l2_flushed);

  ASSERT_OK_AND_ASSIGN(Lookup by_id, store->GetEntry(entry.id));
  ExpectSameEntry(by_id.entry, entry);
  EXPECT_FALSE(by_id.stale);

  ASSERT_OK_AND_ASSIGN(Job done, store->GetJob(job));
  EXPECT_EQ(done.state, JobState::kDone);
  EXPECT_EQ(done.done, 20);
  EXPECT_EQ(done.total, 20);
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, store->ListTrials(job));
  EXPECT_THAT(trials, SizeIs(20));
  for (const Trial& t : trials) EXPECT_EQ(t.job_id, job);

  ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> list, store->ListEntries({}));
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_EQ(list[0].id, entry.id);
  EXPECT_EQ(list[0].key, key);
  EXPECT_EQ(list[0].config, entry.config);
  EXPECT_EQ(list[0].cubin_bytes, 4096);
  EXPECT_TRUE(SameMetrics(list[0].metrics, entry.metrics));
  EXPECT_EQ(list[0].metrics.batch, 5);
  EXPECT_TRUE(list[0].metrics.l2_flushed);
  EXPECT_EQ(list[0].created_unix_ms, entry.created_unix_ms);
  EXPECT_EQ(list[0].default_time_ns, entry.default_time_ns);
  EXPECT_GT(list[0].default_time_ns, 0);
}

TEST(SqliteStore, EmptyCubinAndNoLaunchesRoundTrip) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("n=0");
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  Entry entry = MakeEntry(key, job, 2);
  entry.cubin.clear();
  entry.cubin_sha256 = Sha256Hex("");
  entry.launches.clear();
  entry.config = Config{};
  ASSERT_OK(store->CommitWinner(entry, {}).status());
  ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(key, "src-aaaa", "13.0"));
  ExpectSameEntry(hit.entry, entry);
}

TEST(SqliteStore, LookupOfUnknownKeyIsNotFound) {
  auto store = OpenMemory();
  EXPECT_THAT(store->LookupEntry(MakeKey("hidden=1"), "src", "13.0"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("hidden=1")));
  EXPECT_THAT(store->GetEntry(42), StatusIs(absl::StatusCode::kNotFound, HasSubstr("entry 42")));
}

TEST(SqliteStore, StaleBySourceHashOrNvrtcVersion) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("n=1");
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  ASSERT_OK_AND_ASSIGN(int64_t id, store->CommitWinner(MakeEntry(key, job, 1), {}));

  ASSERT_OK_AND_ASSIGN(Lookup same, store->LookupEntry(key, "src-aaaa", "13.0"));
  EXPECT_FALSE(same.stale);
  ASSERT_OK_AND_ASSIGN(Lookup new_source, store->LookupEntry(key, "src-bbbb", "13.0"));
  EXPECT_TRUE(new_source.stale);
  EXPECT_EQ(new_source.entry.id, id);  // still returned: usable while it is re-tuned
  ASSERT_OK_AND_ASSIGN(Lookup new_nvrtc, store->LookupEntry(key, "src-aaaa", "13.1"));
  EXPECT_TRUE(new_nvrtc.stale);

  // GetEntry and ListStale compare with the templates table; no row means not stale.
  ASSERT_OK_AND_ASSIGN(Lookup by_id, store->GetEntry(id));
  EXPECT_FALSE(by_id.stale);
  EXPECT_THAT(store->ListStale("13.0"), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  ASSERT_OK(store->PutTemplate("rmsnorm", "src-aaaa"));
  ASSERT_OK_AND_ASSIGN(by_id, store->GetEntry(id));
  EXPECT_FALSE(by_id.stale);
  EXPECT_THAT(store->ListStale("13.0"), ::ktune::testing::IsOkAndHolds(IsEmpty()));

  ASSERT_OK(store->PutTemplate("rmsnorm", "src-bbbb"));
  ASSERT_OK_AND_ASSIGN(by_id, store->GetEntry(id));
  EXPECT_TRUE(by_id.stale);
  ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> stale, store->ListStale("13.0"));
  ASSERT_THAT(stale, SizeIs(1));
  EXPECT_EQ(stale[0].id, id);

  ASSERT_OK(store->PutTemplate("rmsnorm", "src-aaaa"));
  ASSERT_OK_AND_ASSIGN(stale, store->ListStale("13.1"));  // only the compiler changed
  ASSERT_THAT(stale, SizeIs(1));
  EXPECT_EQ(stale[0].nvrtc_version, "13.0");
}

TEST(SqliteStore, CommitWinnerReplacesThePreviousWinner) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("n=1");
  ASSERT_OK_AND_ASSIGN(int64_t job1, store->CreateJob(MakeJob(key)));
  ASSERT_OK_AND_ASSIGN(int64_t first, store->CommitWinner(MakeEntry(key, job1, 1), {}));
  ASSERT_OK_AND_ASSIGN(int64_t job2, store->CreateJob(MakeJob(key)));
  Entry second = MakeEntry(key, job2, 2);
  second.source_hash = "src-bbbb";
  ASSERT_OK_AND_ASSIGN(second.id, store->CommitWinner(second, MakeTrials(job2, 3)));
  EXPECT_NE(second.id, first);

  ASSERT_OK_AND_ASSIGN(std::vector<EntrySummary> list, store->ListEntries({}));
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_EQ(list[0].id, second.id);
  ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(key, "src-bbbb", "13.0"));
  ExpectSameEntry(hit.entry, second);
  EXPECT_THAT(store->GetEntry(first),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(absl::StrCat("entry ", first))));
  // The first job's history stays.
  ASSERT_OK_AND_ASSIGN(Job old_job, store->GetJob(job1));
  EXPECT_EQ(old_job.state, JobState::kDone);
}

TEST(SqliteStore, BadCubinShaOnCommitWritesNothing) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("n=1");
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  Entry entry = MakeEntry(key, job, 1);
  entry.cubin[100] ^= 0x01;
  EXPECT_THAT(store->CommitWinner(entry, MakeTrials(job, 20)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sha256")));
  EXPECT_THAT(store->ListEntries({}), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store->ListTrials(job), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(Job still, store->GetJob(job));
  EXPECT_EQ(still.state, JobState::kRunning);
}

TEST(SqliteStore, WinnerOfUnknownJobRollsBackItsTrials) {
  auto store = OpenMemory();
  const EntryKey key = MakeKey("n=1");
  EXPECT_THAT(store->CommitWinner(MakeEntry(key, 77, 1), MakeTrials(77, 3)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no job 77")));
  EXPECT_THAT(store->ListEntries({}), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store->ListTrials(77), ::ktune::testing::IsOkAndHolds(IsEmpty()));

  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  EXPECT_THAT(store->CommitWinner(MakeEntry(key, job, 1), MakeTrials(job + 1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trial of job")));
  EXPECT_THAT(store->CommitWinner(MakeEntry(key, 0, 1), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no job")));
}

TEST(SqliteStore, ListEntriesFilters) {
  auto store = OpenMemory();
  const std::vector<EntryKey> keys = {
      MakeKey("n=1", "f16", "rmsnorm", "H200"), MakeKey("n=1", "f32", "rmsnorm", "H200"),
      MakeKey("n=1", "f16", "softmax", "H200"), MakeKey("n=1", "f16", "rmsnorm", "A100"),
      MakeKey("n=2", "bf16", "softmax", "A100")};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(keys[i])));
    ASSERT_OK(store->CommitWinner(MakeEntry(keys[i], job, static_cast<int64_t>(i)), {}).status());
  }
  auto shapes = [&](const EntryFilter& f) {
    std::vector<std::string> out;
    auto list = store->ListEntries(f);
    EXPECT_TRUE(list.ok()) << list.status();
    if (!list.ok()) return out;
    for (const EntrySummary& s : *list) {
      out.push_back(absl::StrCat(s.key.device_model, ",", s.key.template_id, ",", s.key.dtype));
    }
    return out;
  };
  EXPECT_THAT(shapes({}), SizeIs(5));
  EXPECT_THAT(shapes({"H200", std::nullopt, std::nullopt}),
              ElementsAre("H200,rmsnorm,f16", "H200,rmsnorm,f32", "H200,softmax,f16"));
  EXPECT_THAT(shapes({std::nullopt, "softmax", std::nullopt}),
              ElementsAre("A100,softmax,bf16", "H200,softmax,f16"));
  EXPECT_THAT(shapes({std::nullopt, std::nullopt, "f16"}),
              ElementsAre("A100,rmsnorm,f16", "H200,rmsnorm,f16", "H200,softmax,f16"));
  EXPECT_THAT(shapes({"A100", "rmsnorm", "f16"}), ElementsAre("A100,rmsnorm,f16"));
  EXPECT_THAT(shapes({"V100", std::nullopt, std::nullopt}), IsEmpty());
}

TEST(SqliteStore, MemoryStoreCannotBeReadOnly) {
  EXPECT_THAT(OpenSqliteStore(":memory:", ReadOnly()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":memory:")));
  EXPECT_THAT(OpenSqliteStore(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

// ---- files ----

// ktuned keeps artifacts while this counter holds: it must move on every change to an
// entry, this store's or another connection's, and on nothing else, so that a running tune's
// trials do not empty that cache.
TEST(SqliteStore, EntriesChangeCounterMovesOnEntryChangesOnly) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  auto counter = [&store] { return store->EntriesChangeCounter(); };
  ASSERT_OK_AND_ASSIGN(const int64_t start, counter());
  EXPECT_THAT(counter(), IsOkAndHolds(start));

  // Everything a tune commits before its winner, and another process's writes elsewhere.
  const EntryKey key = MakeKey("n=1");
  ASSERT_OK(store->PutDevice(MakeDevice()));
  ASSERT_OK(store->PutTemplate(key.template_id, "src-1"));
  ASSERT_OK_AND_ASSIGN(const int64_t job, store->CreateJob(MakeJob(key)));
  ASSERT_OK(store->AddTrial(MakeTrial(job, 0)).status());
  ASSERT_OK(store->UpdateJob(job, JobState::kRunning, 1, 20, ""));
  ASSERT_OK(ExecSqlForTesting(path, "UPDATE devices SET name = 'renamed'"));
  EXPECT_THAT(counter(), IsOkAndHolds(start));

  // The winner, then another connection's update and delete of it: each moves it, and it grows.
  ASSERT_OK_AND_ASSIGN(const int64_t entry, store->CommitWinner(MakeEntry(key, job, 1), {}));
  ASSERT_OK_AND_ASSIGN(const int64_t after_winner, counter());
  EXPECT_GT(after_winner, start);
  EXPECT_THAT(counter(), IsOkAndHolds(after_winner));
  ASSERT_OK(
      ExecSqlForTesting(path, absl::StrCat("UPDATE entries SET time_ns = 1 WHERE id = ", entry)));
  ASSERT_OK_AND_ASSIGN(const int64_t after_update, counter());
  EXPECT_GT(after_update, after_winner);
  ASSERT_OK(store->DeleteEntries({entry}).status());
  ASSERT_OK_AND_ASSIGN(const int64_t after_delete, counter());
  EXPECT_GT(after_delete, after_update);

  // ":memory:" (one connection) counts the same way.
  auto memory = OpenMemory();
  ASSERT_OK_AND_ASSIGN(const int64_t mem_start, memory->EntriesChangeCounter());
  ASSERT_OK(memory->PutDevice(MakeDevice()));
  ASSERT_OK_AND_ASSIGN(const int64_t mem_job, memory->CreateJob(MakeJob(key)));
  ASSERT_OK(memory->AddTrial(MakeTrial(mem_job, 0)).status());
  EXPECT_THAT(memory->EntriesChangeCounter(), IsOkAndHolds(mem_start));
  ASSERT_OK(memory->CommitWinner(MakeEntry(key, mem_job, 1), {}).status());
  ASSERT_OK_AND_ASSIGN(const int64_t mem_after, memory->EntriesChangeCounter());
  EXPECT_GT(mem_after, mem_start);
}

TEST(SqliteStore, FileStoreKeepsDataAcrossReopen) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  const EntryKey key = MakeKey("n=1");
  Entry entry;
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
    ASSERT_OK(store->PutDevice(MakeDevice()));
    ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
    entry = MakeEntry(key, job, 3, 20000);
    ASSERT_OK_AND_ASSIGN(entry.id, store->CommitWinner(entry, MakeTrials(job, 20)));
  }
  EXPECT_THAT(CheckIntegrity(path), ::ktune::testing::IsOkAndHolds("ok"));
  EXPECT_THAT(ReadSchemaVersion(path), ::ktune::testing::IsOkAndHolds(CurrentSchemaVersion()));
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  ASSERT_OK_AND_ASSIGN(Lookup hit, store->LookupEntry(key, "src-aaaa", "13.0"));
  ExpectSameEntry(hit.entry, entry);
  EXPECT_THAT(store->ListTrials(entry.job_id), ::ktune::testing::IsOkAndHolds(SizeIs(20)));
  EXPECT_OK(store->GetDevice(MakeDevice().model_key).status());
}

TEST(SqliteStore, CorruptedCubinIsDataLossNeverAHit) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  const EntryKey key = MakeKey("hidden=4096");
  ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(key)));
  ASSERT_OK_AND_ASSIGN(int64_t id, store->CommitWinner(MakeEntry(key, job, 1), {}));
  ASSERT_OK(store->LookupEntry(key, "src-aaaa", "13.0").status());

  // Same length, other bytes: only the digest can tell.
  ASSERT_OK(ExecSqlForTesting(
      path, absl::StrCat("UPDATE entries SET cubin = zeroblob(length(cubin)) WHERE id = ", id)));
  EXPECT_THAT(store->LookupEntry(key, "src-aaaa", "13.0"),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(absl::StrCat("entry ", id)),
                                        HasSubstr("hidden=4096"), HasSubstr("sha256"))));
  EXPECT_THAT(store->GetEntry(id),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(absl::StrCat("entry ", id))));

  // One byte shorter.
  ASSERT_OK_AND_ASSIGN(int64_t job2, store->CreateJob(MakeJob(key)));
  ASSERT_OK_AND_ASSIGN(id, store->CommitWinner(MakeEntry(key, job2, 2), {}));
  ASSERT_OK(ExecSqlForTesting(
      path, absl::StrCat("UPDATE entries SET cubin = substr(cubin, 1, length(cubin) - 1) "
                         "WHERE id = ",
                         id)));
  EXPECT_THAT(store->LookupEntry(key, "src-aaaa", "13.0"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(absl::StrCat("entry ", id))));
  // Listing still works: it does not read the cubin.
  EXPECT_THAT(store->ListEntries({}), ::ktune::testing::IsOkAndHolds(SizeIs(1)));
}

TEST(SqliteStore, ReadOnlyStoreSeesWriterCommitsAndRefusesWrites) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK_AND_ASSIGN(auto writer, OpenSqliteStore(path));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenSqliteStore(path, ReadOnly()));
  EXPECT_THAT(reader->ListEntries({}), ::ktune::testing::IsOkAndHolds(IsEmpty()));

  const EntryKey key = MakeKey("n=1");
  ASSERT_OK_AND_ASSIGN(int64_t job, writer->CreateJob(MakeJob(key)));
  ASSERT_OK(writer->CommitWinner(MakeEntry(key, job, 1), MakeTrials(job, 20)).status());
  EXPECT_OK(reader->LookupEntry(key, "src-aaaa", "13.0").status());
  EXPECT_THAT(reader->ListTrials(job), ::ktune::testing::IsOkAndHolds(SizeIs(20)));

  EXPECT_THAT(reader->PutDevice(MakeDevice()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("read-only")));
  EXPECT_THAT(reader->CreateJob(MakeJob(key)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("read-only")));
  EXPECT_THAT(CheckIntegrity(path), ::ktune::testing::IsOkAndHolds("ok"));
}

// A store in a folder the reader may not write, with no -shm beside it (a clean close removes
// it): a read-only open used to fail at its first read ("attempt to write a readonly
// database", SQLite wanting to create the -shm), so `ktune cache ls` could not read it. The
// reader runs in a child that is not root (root may write any folder), as nobody when the
// test runs as root.
TEST(SqliteStore, ReadOnlyOpenReadsAStoreInAFolderItCannotWrite) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  // One winner, then a clean close.
  absl::StatusOr<std::unique_ptr<Store>> writer = OpenSqliteStore(path);
  ASSERT_OK(writer.status());
  absl::StatusOr<int64_t> job = (*writer)->CreateJob(MakeJob(MakeKey("n=1")));
  ASSERT_OK(job.status());
  ASSERT_OK((*writer)->CommitWinner(MakeEntry(MakeKey("n=1"), *job, 1), {}).status());
  writer->reset();
  ASSERT_FALSE(FileExists(path + "-shm"));
  const std::string folder = path.substr(0, path.rfind('/'));
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0555), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    absl::StatusOr<std::unique_ptr<Store>> reader = OpenSqliteStore(path, ReadOnly());
    if (!reader.ok()) {
      std::fprintf(stderr, "open: %s\n", reader.status().ToString().c_str());
      _exit(1);
    }
    absl::StatusOr<std::vector<EntrySummary>> entries = (*reader)->ListEntries({});
    if (!entries.ok()) std::fprintf(stderr, "ls: %s\n", entries.status().ToString().c_str());
    _exit(entries.ok() && entries->size() == 1 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  chmod(folder.c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_NE(WEXITSTATUS(status), 3) << "cannot become nobody";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the reader could not list the store (see stderr)";
}

TEST(SqliteStore, ReadOnlyOpenOfMissingFileFailsAndCreatesNothing) {
  TempDir dir;
  const std::string path = dir.File("absent.db");
  EXPECT_THAT(OpenSqliteStore(path, ReadOnly()),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr(path), HasSubstr("never creates"))));
  EXPECT_FALSE(FileExists(path));
  EXPECT_THAT(CheckIntegrity(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_FALSE(FileExists(path));
}

TEST(SqliteStore, ReadOnlyOpenOfEmptyOrOldFileIsRefused) {
  TempDir dir;
  const std::string empty = dir.File("empty.db");
  WriteBytes(empty, "");
  EXPECT_THAT(OpenSqliteStore(empty, ReadOnly()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a ktune store")));
  EXPECT_EQ(ReadBytes(empty), "");
}

TEST(SqliteStore, NonSqliteFileIsDataLossAndUntouched) {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  std::string text;
  uint32_t x = 12345;
  for (int i = 0; i < 8192; ++i) {
    x = x * 1103515245 + 12345;
    text.push_back(static_cast<char>(' ' + (x >> 16) % 95));
  }
  WriteBytes(path, text);
  for (bool read_only : {false, true}) {
    SCOPED_TRACE(read_only);
    EXPECT_THAT(OpenSqliteStore(path, Options(read_only)),
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr(path), HasSubstr("not an SQLite database"))));
    EXPECT_TRUE(ReadBytes(path) == text) << "the refused file changed";
  }
  EXPECT_THAT(CheckIntegrity(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
  EXPECT_TRUE(ReadBytes(path) == text);
}

TEST(SqliteStore, NewerSchemaVersionIsRefusedAndUntouched) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
    ASSERT_OK_AND_ASSIGN(int64_t job, store->CreateJob(MakeJob(MakeKey("n=1"))));
    ASSERT_OK(store->CommitWinner(MakeEntry(MakeKey("n=1"), job, 1), {}).status());
  }
  ASSERT_OK(ExecSqlForTesting(path, "PRAGMA user_version = 99"));
  const std::string before = ReadBytes(path);
  ASSERT_FALSE(before.empty());
  for (bool read_only : {false, true}) {
    SCOPED_TRACE(read_only);
    EXPECT_THAT(
        OpenSqliteStore(path, Options(read_only)),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 ::testing::AllOf(HasSubstr("schema version 99"),
                                  HasSubstr(absl::StrCat("version ", CurrentSchemaVersion())))));
    EXPECT_TRUE(ReadBytes(path) == before) << "the refused file changed";
  }
  EXPECT_THAT(ReadSchemaVersion(path), ::ktune::testing::IsOkAndHolds(99));
}

// A FIFO (SQLite would block on it until a writer came) or a folder as the store: refused
// at once, naming it, whether opened to write or to read.
TEST(SqliteStore, AFifoOrAFolderIsNotAStore) {
  TempDir dir;
  const std::string fifo = dir.File("fifo.db");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = dir.File("folder.db");
  ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
  StoreOptions read_only;
  read_only.read_only = true;
  for (const std::string& path : {fifo, folder}) {
    EXPECT_THAT(OpenSqliteStore(path),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         ::testing::AllOf(HasSubstr(path), HasSubstr("not a regular file"))));
    EXPECT_THAT(OpenSqliteStore(path, read_only),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a regular file")));
  }
}

TEST(SqliteStore, ForeignSqliteFileIsNotAKtuneStore) {
  TempDir dir;
  const std::string path = dir.File("other.db");
  ASSERT_OK(ExecSqlForTesting(path,
                              "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"
                              "INSERT INTO notes (body) VALUES ('hello');"));
  const std::string before = ReadBytes(path);
  EXPECT_THAT(OpenSqliteStore(path),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr(path), HasSubstr("not a ktune store"))));
  EXPECT_TRUE(ReadBytes(path) == before) << "the refused file changed";

  // Another program's file that sets user_version is told apart by its application_id.
  const std::string versioned = dir.File("versioned.db");
  ASSERT_OK(ExecSqlForTesting(versioned, "CREATE TABLE t (x); PRAGMA user_version = 1;"));
  EXPECT_THAT(OpenSqliteStore(versioned),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("application_id")));
}

// A reader thread looks entries up in a loop while a writer commits winners: every read
// succeeds (or finds nothing yet) and every entry it sees is whole: its cubin matches, its
// fields belong to one commit, and its job is done with all its trials.
TEST(SqliteStore, ConcurrentReaderNeverSeesAPartialEntry) {
  TempDir dir;
  const std::string path = dir.File("ktune.db");
  ASSERT_OK_AND_ASSIGN(auto store, OpenSqliteStore(path));
  constexpr int kKeys = 4;
  constexpr int kCommits = 120;
  constexpr int kTrials = 5;

  std::atomic<bool> writing{true};
  std::atomic<int> reads{0};
  std::atomic<int> hits{0};
  std::vector<std::string> problems;  // reader thread only, read after join
  std::thread reader([&] {
    while (writing.load() || reads.load() < 50) {
      for (int k = 0; k < kKeys; ++k) {
        absl::StatusOr<Lookup> hit =
            store->LookupEntry(MakeKey(absl::StrCat("n=", k)), "src-aaaa", "13.0");
        reads.fetch_add(1);
        if (!hit.ok()) {
          if (hit.status().code() != absl::StatusCode::kNotFound) {
            problems.push_back(hit.status().ToString());
          }
          continue;
        }
        hits.fetch_add(1);
        const Entry& e = hit->entry;
        // MakeEntry(key, job, seed = job): every field derives from the job id.
        const Entry want = MakeEntry(e.key, e.job_id, e.job_id, 20000);
        if (e.cubin != want.cubin || !(e.config == want.config) ||
            !SameMetrics(e.metrics, want.metrics) || !(e.launches == want.launches)) {
          problems.push_back(absl::StrCat("entry ", e.id, " mixes commits"));
        }
        absl::StatusOr<std::vector<Trial>> trials = store->ListTrials(e.job_id);
        absl::StatusOr<Job> job = store->GetJob(e.job_id);
        if (!trials.ok() || !job.ok()) {
          problems.push_back(absl::StrCat("entry ", e.id, ": ", trials.status().ToString(), " ",
                                          job.status().ToString()));
        } else if (static_cast<int>(trials->size()) != kTrials || job->state != JobState::kDone) {
          problems.push_back(absl::StrCat("entry ", e.id, " has ", trials->size(),
                                          " trials, job state ", JobStateName(job->state)));
        }
      }
      if (problems.size() > 10) return;
    }
  });
  for (int i = 0; i < kCommits; ++i) {
    const EntryKey key = MakeKey(absl::StrCat("n=", i % kKeys));
    absl::StatusOr<int64_t> job = store->CreateJob(MakeJob(key, kTrials));
    absl::Status committed = job.status();
    if (job.ok()) {
      committed = store->CommitWinner(MakeEntry(key, *job, *job, 20000), MakeTrials(*job, kTrials))
                      .status();
    }
    if (!committed.ok()) {
      ADD_FAILURE() << committed;  // no ASSERT: the reader thread must still be joined
      break;
    }
  }
  writing.store(false);
  reader.join();
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_GT(hits.load(), 0) << "the reader never saw an entry; " << reads.load() << " reads";
  EXPECT_THAT(store->ListEntries({}), ::ktune::testing::IsOkAndHolds(SizeIs(kKeys)));
}

}  // namespace
}  // namespace ktune::store
