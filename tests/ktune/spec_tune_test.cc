// Runs the built `ktune tune --spec` as a user would, with NVRTC compiling for real and the
// GPU played by fake_ktune_worker (FAKE_WORKER_ANY_OK: every candidate measures ok, at a
// time fixed by its name): the summary and --json, skipping fresh keys, exit statuses, a
// SIGKILL in the middle of a spec and the rerun that resumes it, and the same spec through
// a ktuned on a unix socket.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/file.h"
#include "server/store/store.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_worker_env.h"
#include "tests/testing/ktuned_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::ktune::testing::NewTempDir;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

constexpr char kKtune[] = KTUNE_BINARY_DIR "/bin/ktune";
constexpr char kFakeWorker[] = KTUNE_BINARY_DIR "/bin/fake_ktune_worker";

using Result = testing::RunResult;

class SpecTuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    testing::WriteTiny(dir_ + "/templates");
    testing::UseFakeWorkerAllOk();  // inherited by ktune's (and ktuned's) worker child
  }

  // A spec over tiny with the given n values (f32).
  std::string WriteSpec(const std::string& values, const std::string& extra = "") {
    const std::string path = dir_ + "/spec.textproto";
    EXPECT_TRUE(AtomicWriteFile(path, absl::StrCat("model: \"toy\"\nentries {\n  template: \"tiny\"\n"
                                                   "  dtypes: [\"f32\"]\n  dims { name: \"n\" values: [",
                                                   values, "] }\n}\n", extra))
                    .ok());
    return path;
  }

  // ktune tune --spec with this test's templates, store, cache and the fake worker; the
  // same folder every run, so reruns see the store and the cubin cache.
  std::vector<std::string> Args(const std::string& spec, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"tune",     "--spec",      spec,
                                     "--db",     dir_ + "/ktune.db", "--templates",
                                     dir_ + "/templates",       "--worker",
                                     kFakeWorker, "--budget",   "3", "--threads", "2"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  Result Run(const std::vector<std::string>& args) {
    return testing::RunToEnd(kKtune, args, NewTempDir(), absl::Seconds(120));
  }

  static std::map<std::string, nlohmann::json> ByShape(const nlohmann::json& j) {
    std::map<std::string, nlohmann::json> out;
    for (const nlohmann::json& k : j["keys"]) {
      out[absl::StrCat(k["dtype"].get<std::string>(), " n=", k["shape"]["n"].get<int64_t>())] = k;
    }
    return out;
  }

  std::string dir_;
};

TEST_F(SpecTuneTest, TunesEveryKeyThenFindsThemFresh) {
  const std::string spec = WriteSpec("64, 128");
  const Result first = Run(Args(spec));
  ASSERT_EQ(first.exit_code, 0) << first;
  // The table: a header, one row per key with its winner, default time and speed-up.
  EXPECT_THAT(first.out, ContainsRegex("(^|\n)key +status +winner .*default_us +speedup\n"));
  EXPECT_THAT(first.out, HasSubstr("tiny f32 n=64"));
  EXPECT_THAT(first.out, HasSubstr("tiny f32 n=128"));
  EXPECT_THAT(first.out, HasSubstr("toy: 2 keys: 2 tuned, 0 fresh in the store, 0 failed"));
  // Not a terminal: plain lines, one per finished key.
  EXPECT_THAT(first.err, HasSubstr("[1/2] tiny f32 n=64: tuned in"));
  EXPECT_THAT(first.err, HasSubstr("[2/2] tiny f32 n=128: tuned in"));
  EXPECT_THAT(first.err, Not(HasSubstr("\033[")));

  const Result again = Run(Args(spec, {"--json"}));
  ASSERT_EQ(again.exit_code, 0) << again;
  const nlohmann::json j = nlohmann::json::parse(again.out);
  EXPECT_EQ(j["model"], "toy");
  EXPECT_EQ(j["where"], "local");
  EXPECT_EQ(j["total"], 2);
  EXPECT_EQ(j["cached"], 2);
  EXPECT_EQ(j["tuned"], 0);
  EXPECT_EQ(j["failed"], 0);
  for (const nlohmann::json& k : j["keys"]) {
    EXPECT_EQ(k["status"], "cached");
    EXPECT_EQ(k["template"], "tiny");
    EXPECT_EQ(k["trials"], 3);
    EXPECT_GT(k["time_ns"].get<double>(), 0);
    // The default config is always measured (first), so its time and the speed-up are known.
    ASSERT_TRUE(k["default_time_ns"].is_number()) << k;
    EXPECT_GE(k["default_time_ns"].get<double>(), k["time_ns"].get<double>());
    EXPECT_NEAR(k["speedup"].get<double>(),
                k["default_time_ns"].get<double>() / k["time_ns"].get<double>(), 1e-9);
    EXPECT_TRUE(k["params"].contains("BLOCK"));
    EXPECT_GT(k["entry_id"].get<int64_t>(), 0);
  }

  // --force tunes them again.
  const Result forced = Run(Args(spec, {"--json", "--force", "--quiet"}));
  ASSERT_EQ(forced.exit_code, 0) << forced;
  EXPECT_EQ(nlohmann::json::parse(forced.out)["tuned"], 2);
  EXPECT_EQ(forced.err, "");
}

TEST_F(SpecTuneTest, BadSpecIsExit2NamingLineAndFieldBeforeAnyTuning) {
  const std::string spec = WriteSpec("64, 2000000");  // tiny's n stops at 1048576
  const Result r = Run(Args(spec));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("spec.textproto:5: entries[0].dims: dim 'n' = 2000000 is outside"));
  EXPECT_FALSE(FileExists(dir_ + "/ktune.db")) << "nothing may be tuned for a bad spec";

  EXPECT_EQ(Run(Args(dir_ + "/missing.textproto")).exit_code, 2);
  const Result both = Run({"tune", "tiny", "--spec", spec});
  EXPECT_EQ(both.exit_code, 2) << both;
  EXPECT_THAT(both.err, HasSubstr("TEMPLATE: not with --spec"));
  const Result json_alone = Run({"tune", "tiny", "--dtype", "f32", "--shape", "n=64", "--json"});
  EXPECT_EQ(json_alone.exit_code, 2);
  EXPECT_THAT(json_alone.err, HasSubstr("--json: only with --spec"));
}

// --only and --skip pick a spec's keys by template (SelectSpecKeys covers the picking); a
// name no key has, or a choice that leaves nothing, is exit 2 before anything is tuned.
TEST_F(SpecTuneTest, OnlyAndSkipPickKeysByTemplate) {
  const std::string spec = WriteSpec("64, 128");
  const Result nothing_left = Run(Args(spec, {"--skip", "tiny"}));
  EXPECT_EQ(nothing_left.exit_code, 2) << nothing_left;
  EXPECT_THAT(nothing_left.err, HasSubstr("--only and --skip leave no key of the spec"));
  const Result unknown = Run(Args(spec, {"--only", "tiny,gemm"}));
  EXPECT_EQ(unknown.exit_code, 2) << unknown;
  EXPECT_THAT(unknown.err, HasSubstr("--only: no key of the spec is of template 'gemm' "
                                     "(its templates: tiny)"));
  EXPECT_FALSE(FileExists(dir_ + "/ktune.db")) << "nothing may be tuned for a bad flag";
  const Result alone = Run({"tune", "tiny", "--dtype", "f32", "--shape", "n=64", "--skip", "x"});
  EXPECT_EQ(alone.exit_code, 2) << alone;
  EXPECT_THAT(alone.err, HasSubstr("--skip: only with --spec"));

  const Result only = Run(Args(spec, {"--only", "tiny", "--json", "--quiet"}));
  ASSERT_EQ(only.exit_code, 0) << only;
  EXPECT_EQ(nlohmann::json::parse(only.out)["tuned"], 2);
}

// With no GPU (here: no worker program) `ktune tune` used to create the store, then fail;
// now it fails first and leaves no file behind, for a spec and for one key alike.
TEST_F(SpecTuneTest, NoGpuFailsBeforeTheStoreIsCreated) {
  std::vector<std::string> spec_args = Args(WriteSpec("64"));
  spec_args[8] = dir_ + "/no-such-worker";  // --worker
  const Result spec = Run(spec_args);
  EXPECT_NE(spec.exit_code, 0) << spec;
  EXPECT_THAT(spec.err, HasSubstr("no-such-worker"));
  EXPECT_FALSE(FileExists(dir_ + "/ktune.db")) << spec;
  const Result one = Run({"tune", "tiny", "--dtype", "f32", "--shape", "n=64", "--db",
                          dir_ + "/one.db", "--templates", dir_ + "/templates", "--worker",
                          dir_ + "/no-such-worker"});
  EXPECT_NE(one.exit_code, 0) << one;
  EXPECT_THAT(one.err, HasSubstr("no-such-worker"));
  EXPECT_FALSE(FileExists(dir_ + "/one.db")) << one;
}

TEST_F(SpecTuneTest, AFailingKeyIsReportedAndTheOthersStillRun) {
  // A template whose source does not compile: its key fails when its job starts (the
  // reference), and the keys after it still run.
  const std::string broken = dir_ + "/templates/broken";
  ASSERT_TRUE(MakeDirs(broken).ok());
  std::string manifest = *ReadFile(dir_ + "/templates/tiny/tiny.textproto");
  manifest.replace(manifest.find("name: \"tiny\""), 12, "name: \"broken\"");
  ASSERT_TRUE(AtomicWriteFile(broken + "/broken.textproto", manifest).ok());
  ASSERT_TRUE(AtomicWriteFile(broken + "/broken.cu", "this is not CUDA\n").ok());
  const std::string spec = WriteSpec(
      "64", "entries { template: \"broken\" dtypes: [\"f32\"] dims { name: \"n\" values: [64] } }\n"
            "entries { template: \"tiny\" dtypes: [\"f32\"] dims { name: \"n\" values: [128] } }\n");
  const Result r = Run(Args(spec, {"--json"}));
  EXPECT_EQ(r.exit_code, 1) << r;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tuned"], 2);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["keys"][1]["status"], "failed");
  EXPECT_THAT(j["keys"][1]["error"].get<std::string>(), HasSubstr("reference does not compile"));
  EXPECT_EQ(j["keys"][2]["status"], "tuned");
}

// The number of entries and the progress of the running job, read from the store while
// ktune writes it.
struct StoreView {
  size_t entries = 0;
  int64_t running_done = 0;
};
StoreView Look(const std::string& db) {
  StoreView v;
  if (!FileExists(db)) return v;
  store::StoreOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<store::Store>> s = store::OpenSqliteStore(db, options);
  if (!s.ok()) return v;
  if (auto e = (*s)->ListEntries({}); e.ok()) v.entries = e->size();
  if (auto jobs = (*s)->ListJobs(store::JobState::kRunning); jobs.ok()) {
    for (const store::Job& j : *jobs) v.running_done = std::max(v.running_done, j.done);
  }
  return v;
}

TEST_F(SpecTuneTest, KilledInTheMiddleResumesWithoutRedoingFinishedKeys) {
  // Slow enough to be caught mid-job: 3 candidates of ~150 ms per key.
  setenv("FAKE_WORKER_MEASURE_MS", "150", 1);
  const std::string spec = WriteSpec("64, 128, 256, 512");
  const std::string db = dir_ + "/ktune.db";
  std::map<std::string, int64_t> first_ids;
  {
    testing::Subprocess p(kKtune, Args(spec, {"--json"}), NewTempDir());
    // Kill once two keys are stored and the third key's job has a trial recorded.
    const absl::Time end = absl::Now() + absl::Seconds(120);
    StoreView v;
    while (absl::Now() < end && p.Running()) {
      v = Look(db);
      if (v.entries >= 2 && v.running_done >= 1) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(p.Running()) << "finished before it could be killed:\n" << p.Stderr();
    ASSERT_EQ(v.entries, 2u) << p.Stderr();
    p.Signal(SIGKILL);
    EXPECT_EQ(p.Wait(absl::Seconds(10)), -1);  // died of the signal
  }
  unsetenv("FAKE_WORKER_MEASURE_MS");
  const Result rerun = Run(Args(spec, {"--json"}));
  ASSERT_EQ(rerun.exit_code, 0) << rerun;
  const nlohmann::json j = nlohmann::json::parse(rerun.out);
  EXPECT_EQ(j["cached"], 2);  // the two finished keys: found, not tuned again
  EXPECT_EQ(j["tuned"], 2);
  auto keys = ByShape(j);
  EXPECT_EQ(keys["f32 n=64"]["status"], "cached");
  EXPECT_EQ(keys["f32 n=128"]["status"], "cached");
  EXPECT_EQ(keys["f32 n=256"]["status"], "tuned");
  EXPECT_EQ(keys["f32 n=512"]["status"], "tuned");
  // The killed job resumed from its recorded trials: it measured only what was left, and
  // no key has more trials than its budget.
  EXPECT_GE(keys["f32 n=256"]["resumed_trials"].get<int64_t>(), 1);
  EXPECT_EQ(keys["f32 n=512"]["resumed_trials"], 0);
  for (const auto& [name, k] : keys) EXPECT_EQ(k["trials"], 3) << name;
}

// Every entry in `db` is whole: the file passes integrity_check, every entry's cubin matches
// its sha256 (GetEntry re-checks it), and every finished job has exactly the trials it
// counted. What a SIGKILL at any point may leave; returns how many entries there are.
size_t ExpectWholeStore(const std::string& db) {
  if (!FileExists(db)) return 0;
  EXPECT_THAT(store::CheckIntegrity(db), testing::IsOkAndHolds("ok"));
  store::StoreOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<store::Store>> s = store::OpenSqliteStore(db, options);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return 0;
  absl::StatusOr<std::vector<store::EntrySummary>> entries = (*s)->ListEntries({});
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (!entries.ok()) return 0;
  for (const store::EntrySummary& e : *entries) {
    absl::StatusOr<store::Lookup> whole = (*s)->GetEntry(e.id);
    EXPECT_TRUE(whole.ok()) << "entry " << e.id << ": " << whole.status();
  }
  absl::StatusOr<std::vector<store::Job>> done = (*s)->ListJobs(store::JobState::kDone);
  EXPECT_TRUE(done.ok()) << done.status();
  for (const store::Job& job : done.value_or(std::vector<store::Job>{})) {
    absl::StatusOr<std::vector<store::Trial>> trials = (*s)->ListTrials(job.id);
    EXPECT_TRUE(trials.ok() && static_cast<int64_t>(trials->size()) == job.done)
        << "job " << job.id << " is done at " << job.done << " trials but holds "
        << (trials.ok() ? trials->size() : 0);
  }
  return entries->size();
}

// The crash loop's pieces (#17): the kills, counted, and the export file the imports read.
struct CrashLoopCounts {
  int kills = 0, tunes = 0, imports = 0, daemons = 0;
  int landed[3] = {0, 0, 0};  // kills that found a tune, an import, a daemon still running
};

class SpecTuneCrashTest : public SpecTuneTest {
 protected:
  // 37 keys (the loop's six among them) tuned into a store of their own and exported, so
  // that an import takes long enough to be killed in the middle. The export file's path.
  std::string ExportOf37Keys() {
    const std::string source = dir_ + "/source.db", exported = dir_ + "/export.json";
    std::string many = "64";
    for (int n = 65; n < 96; ++n) absl::StrAppend(&many, ", ", n);
    std::vector<std::string> to_source =
        Args(WriteSpec(many + ", 128, 256, 512, 1024, 2048"), {"--quiet"});
    to_source[4] = source;  // --db
    EXPECT_EQ(Run(to_source).exit_code, 0);
    const Result export_run = Run({"cache", "export", "--db", source, exported});
    EXPECT_EQ(export_run.exit_code, 0) << export_run;
    return exported;
  }

  // `ktune tune --spec` (fake worker), `ktune cache import` of `exported` and a ktuned serving
  // a `ktune tune --daemon`, in turn on the store `db`, each SIGKILLed after a random while,
  // 90 times or for 60 s; after every kill the store is whole (ExpectWholeStore).
  CrashLoopCounts RunCrashLoop(const std::string& db, const std::string& spec,
                               const std::string& exported) {
    const std::string socket = dir_ + "/run/ktuned.sock";
    std::mt19937 random(20261130);
    CrashLoopCounts c;
    auto kill_after = [&](testing::Subprocess& p, int max_ms, int kind) {
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, max_ms)(random)));
      c.landed[kind] += p.Running();
      p.Signal(SIGKILL);
      p.Wait(absl::Seconds(10));
    };
    setenv("FAKE_WORKER_MEASURE_MS", "40", 1);
    const absl::Time end = absl::Now() + absl::Seconds(60);
    for (int round = 0; c.kills < 90 && absl::Now() < end; ++round) {
      SCOPED_TRACE(absl::StrCat("round ", round, ", kill ", c.kills));
      if (round % 3 == 0) {
        testing::Subprocess tune(kKtune, Args(spec, {"--force", "--quiet"}), NewTempDir());
        kill_after(tune, 1500, 0);
        ++c.tunes;
      } else if (round % 3 == 1) {
        testing::Subprocess import(kKtune,
                                   {"cache", "import", "--db", db, "--templates",
                                    dir_ + "/templates", "--on-conflict", "replace", exported},
                                   NewTempDir());
        kill_after(import, 60, 1);
        ++c.imports;
      } else {
        testing::Ktuned ktuned(NewTempDir(), {"--listen", "unix://" + socket, "--db", db,
                                              "--templates", dir_ + "/templates", "--worker",
                                              kFakeWorker});
        EXPECT_THAT(ktuned.WaitServing(), HasSubstr(socket)) << ktuned.Stderr();
        testing::Subprocess client(
            kKtune, Args(spec, {"--daemon", "unix://" + socket, "--force", "--quiet"}),
            NewTempDir());
        kill_after(ktuned, 1500, 2);
        ++c.daemons;
      }
      ++c.kills;
      ExpectWholeStore(db);
      if (HasFailure()) break;
    }
    return c;
  }

  // Runs `spec` (which has the key n=4096 the loop never tuned) and SIGKILLs it once that
  // key's job has recorded a trial.
  void KillANewKeysTuneAfterItsFirstTrial(const std::string& db, const std::string& spec) {
    auto new_key_progress = [&db] {
      store::StoreOptions options;
      options.read_only = true;
      absl::StatusOr<std::unique_ptr<store::Store>> s = store::OpenSqliteStore(db, options);
      int64_t done = 0;
      if (!s.ok()) return done;
      absl::StatusOr<std::vector<store::Job>> running = (*s)->ListJobs(store::JobState::kRunning);
      for (const store::Job& job : running.value_or(std::vector<store::Job>{})) {
        if (job.key.shape == "n=4096") done = std::max(done, job.done);
      }
      return done;
    };
    testing::Subprocess p(kKtune, Args(spec, {"--quiet"}), NewTempDir());
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (absl::Now() < until && p.Running() && new_key_progress() < 1) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(p.Running()) << "finished before it could be killed:\n" << p.Stderr();
    p.Signal(SIGKILL);
    p.Wait(absl::Seconds(10));
  }
};

// The crash loop (#17): every kill of a tune, an import or a daemon leaves a whole store.
// Then a tune killed once its job for a new key has recorded a trial resumes from it, and
// the spec finishes with every key at its budget.
TEST_F(SpecTuneCrashTest, CrashLoopOfTunesImportsAndDaemonsLeavesAWholeStore) {
  const std::string db = dir_ + "/ktune.db";
  const std::string exported = ExportOf37Keys();
  ASSERT_FALSE(HasFailure());
  const CrashLoopCounts c =
      RunCrashLoop(db, WriteSpec("64, 128, 256, 512, 1024, 2048"), exported);
  ASSERT_FALSE(HasFailure());
  EXPECT_GE(c.kills, 30) << "the loop is too slow to test much";
  EXPECT_GE(c.landed[0] + c.landed[1] + c.landed[2], c.kills / 2) << "most kills came too late";

  const std::string spec = WriteSpec("64, 128, 256, 512, 1024, 2048, 4096, 8192");
  KillANewKeysTuneAfterItsFirstTrial(db, spec);
  ASSERT_FALSE(HasFailure());
  ExpectWholeStore(db);
  // The rerun measures only what is left of n=4096, and every key ends at its budget.
  unsetenv("FAKE_WORKER_MEASURE_MS");
  const Result rerun = Run(Args(spec, {"--json"}));
  ASSERT_EQ(rerun.exit_code, 0) << rerun;
  const nlohmann::json j = nlohmann::json::parse(rerun.out);
  EXPECT_EQ(j["failed"], 0);
  std::map<std::string, nlohmann::json> keys = ByShape(j);
  EXPECT_EQ(keys["f32 n=4096"]["status"], "tuned");
  EXPECT_GE(keys["f32 n=4096"]["resumed_trials"].get<int64_t>(), 1);
  for (const auto& [name, k] : keys) EXPECT_EQ(k["trials"], 3) << name;
  EXPECT_GE(ExpectWholeStore(db), 8u);  // the spec's, and the export's when an import finished
  EXPECT_EQ(keys.size(), 8u);
  std::printf("crash loop: %d kills (%d tunes, %d imports, %d daemons; %d, %d, %d of them "
              "still running)\n", c.kills, c.tunes, c.imports, c.daemons, c.landed[0],
              c.landed[1], c.landed[2]);
}

// --min-sample-us reaches every measurement the worker is asked for, with one key or a spec,
// and --decide-sample-us the deciding ones; a negative value, or one with --daemon, is
// refused before anything is tuned.
// --idle-compile on: the helpers beside ktune compile the rest of the space into the cache
// while the job measures (how much depends on idle cores, so only what must hold is checked).
TEST_F(SpecTuneTest, IdleCompilesRunBesideTheJob) {
  const std::string spec = WriteSpec("64, 128");
  const std::string cache = dir_ + "/cubins";
  const Result r = Run(Args(spec, {"--json", "--cache-dir", cache, "--idle-compile", "on"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tuned"], 2);
  absl::StatusOr<std::vector<std::string>> cubins = ListDir(cache);
  ASSERT_TRUE(cubins.ok()) << cubins.status();
  EXPECT_GE(cubins->size(), 3u);  // at least what the first key measured

  // Asked for, but with no helper beside the program: refused before anything is tuned.
  const std::string lone = dir_ + "/lone";
  ASSERT_TRUE(MakeDirs(lone).ok());
  absl::StatusOr<std::string> program = ReadFile(kKtune);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_TRUE(AtomicWriteFile(lone + "/ktune", *program).ok());
  ASSERT_EQ(::chmod((lone + "/ktune").c_str(), 0755), 0);
  const Result missing =
      testing::RunToEnd(lone + "/ktune", Args(spec, {"--force", "--idle-compile", "on"}),
                        NewTempDir(), absl::Seconds(120));
  EXPECT_NE(missing.exit_code, 0) << missing;
  EXPECT_THAT(missing.err, HasSubstr("lone/ktune-warm (No such file"));
}

TEST_F(SpecTuneTest, MinSampleUsReachesTheWorker) {
  const std::string log = dir_ + "/worker.log";
  setenv("FAKE_WORKER_LOG", log.c_str(), 1);
  auto measures = [&] {
    std::ifstream in(log);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      if (absl::StrContains(line, " measure ")) out.push_back(line);
    }
    return out;
  };
  const Result one = Run({"tune", "tiny", "--dtype", "f32", "--shape", "n=64", "--db",
                          dir_ + "/one.db", "--templates", dir_ + "/templates", "--worker",
                          kFakeWorker, "--budget", "2", "--quiet", "--min-sample-us", "0.5"});
  ASSERT_EQ(one.exit_code, 0) << one;
  ASSERT_THAT(measures(), Not(IsEmpty()));
  for (const std::string& m : measures()) EXPECT_THAT(m, HasSubstr(" min_sample_us=0.5"));
  // The search's two measurements check outputs; the leaders' and finalists' retimes of
  // binaries that passed do not.
  int checked = 0, retimed = 0;
  for (const std::string& m : measures()) ++(absl::StrContains(m, " skip_check") ? retimed : checked);
  EXPECT_EQ(checked, 2);
  EXPECT_GT(retimed, 0);

  // --decide-sample-us: the leaders' and finalists' retimes at their own sample length, the
  // search at --min-sample-us's.
  ASSERT_EQ(::unlink(log.c_str()), 0);
  const Result decide = Run({"tune", "tiny", "--dtype", "f32", "--shape", "n=64", "--db",
                             dir_ + "/decide.db", "--templates", dir_ + "/templates", "--worker",
                             kFakeWorker, "--budget", "2", "--quiet", "--min-sample-us", "0.5",
                             "--decide-sample-us", "100"});
  ASSERT_EQ(decide.exit_code, 0) << decide;
  checked = retimed = 0;
  for (const std::string& m : measures()) {
    const bool retime = absl::StrContains(m, " skip_check");
    ++(retime ? retimed : checked);
    EXPECT_THAT(m, HasSubstr(retime ? " min_sample_us=100" : " min_sample_us=0.5")) << m;
  }
  EXPECT_EQ(checked, 2);
  EXPECT_GT(retimed, 0);

  ASSERT_EQ(::unlink(log.c_str()), 0);
  const Result spec = Run(Args(WriteSpec("64"), {"--quiet", "--min-sample-us", "0.001"}));
  ASSERT_EQ(spec.exit_code, 0) << spec;
  ASSERT_THAT(measures(), Not(IsEmpty()));
  for (const std::string& m : measures()) EXPECT_THAT(m, HasSubstr(" min_sample_us=0.001"));
  unsetenv("FAKE_WORKER_LOG");

  for (const std::string flag : {"--min-sample-us", "--decide-sample-us"}) {
    const Result negative = Run(Args(WriteSpec("64"), {flag, "-1"}));
    EXPECT_EQ(negative.exit_code, 2) << negative;
    EXPECT_THAT(negative.err, HasSubstr(flag + ": must be >= 0"));
    const Result daemon =
        Run(Args(WriteSpec("64"), {"--daemon", "unix:///nowhere.sock", flag, "1"}));
    EXPECT_EQ(daemon.exit_code, 2) << daemon;
    EXPECT_THAT(daemon.err, HasSubstr(flag + ": not supported with --daemon"));
  }
}

// --gpus: the keys spread over two GPUs (both workers measure), and when one GPU is lost
// mid-spec its key resumes on the other: every key is still tuned, with one lost worker.
TEST_F(SpecTuneTest, KeysSpreadOverGpusAndMoveOffALostOne) {
  const std::string log = dir_ + "/worker.log";
  setenv("FAKE_WORKER_LOG", log.c_str(), 1);
  auto lines_with = [&](const std::string& what) {
    std::ifstream in(log);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += absl::StrContains(line, what);
    return n;
  };
  const Result spread = Run(Args(WriteSpec("64, 128, 256, 512"), {"--json", "--gpus", "0,1"}));
  ASSERT_EQ(spread.exit_code, 0) << spread;
  EXPECT_EQ(nlohmann::json::parse(spread.out)["tuned"], 4);
  EXPECT_GT(lines_with(" gpu 0"), 0);
  EXPECT_GT(lines_with(" gpu 1"), 0);

  ASSERT_EQ(::unlink(log.c_str()), 0);
  setenv("FAKE_WORKER_DIE_ORDINAL", "1", 1);
  setenv("FAKE_WORKER_DIE_AFTER", "1", 1);
  setenv("FAKE_WORKER_DIE_MARK", (dir_ + "/gpu1.lost").c_str(), 1);
  const Result lost = Run(Args(WriteSpec("1024, 2048, 4096"), {"--json", "--gpus", "0,1"}));
  unsetenv("FAKE_WORKER_DIE_ORDINAL");
  unsetenv("FAKE_WORKER_DIE_AFTER");
  unsetenv("FAKE_WORKER_DIE_MARK");
  unsetenv("FAKE_WORKER_LOG");
  ASSERT_EQ(lost.exit_code, 0) << lost;
  EXPECT_EQ(nlohmann::json::parse(lost.out)["tuned"], 3);
  EXPECT_EQ(lines_with("dying on GPU 1"), 1);
  EXPECT_THAT(lost.err, HasSubstr("a GPU was lost tuning"));

  const Result bad = Run(Args(WriteSpec("64"), {"--gpus", "0,x"}));
  EXPECT_EQ(bad.exit_code, 2) << bad;
  EXPECT_THAT(bad.err, HasSubstr("--gpus: 'x' is not a GPU ordinal"));
}

TEST_F(SpecTuneTest, ThroughADaemonOnAUnixSocket) {
  const std::string socket = dir_ + "/run/ktuned.sock";
  const std::string daemon_dir = NewTempDir();
  testing::Ktuned ktuned(daemon_dir,
                         {"--listen", "unix://" + socket, "--db", dir_ + "/daemon.db",
                          "--templates", dir_ + "/templates", "--worker", kFakeWorker});
  ASSERT_THAT(ktuned.WaitServing(), HasSubstr(socket)) << ktuned.Stderr();

  const std::string spec = WriteSpec("64, 128");
  const std::vector<std::string> daemon = {"--daemon", "unix://" + socket, "--json"};
  const Result first = Run(Args(spec, daemon));
  ASSERT_EQ(first.exit_code, 0) << first << "--- ktuned\n" << ktuned.Stderr();
  nlohmann::json j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["where"], "unix://" + socket);
  EXPECT_EQ(j["tuned"], 2);
  for (const nlohmann::json& k : j["keys"]) {
    EXPECT_GT(k["time_ns"].get<double>(), 0);
    EXPECT_TRUE(k["default_time_ns"].is_number()) << k;
  }
  EXPECT_FALSE(FileExists(dir_ + "/ktune.db")) << "daemon mode must not write a local store";

  // Asked again: the daemon has them (GetKernel CACHE_ONLY), nothing is tuned.
  const Result again = Run(Args(spec, daemon));
  ASSERT_EQ(again.exit_code, 0) << again;
  j = nlohmann::json::parse(again.out);
  EXPECT_EQ(j["cached"], 2);
  EXPECT_EQ(j["tuned"], 0);

  // No daemon there: exit 1, naming the target.
  const Result none = Run(Args(spec, {"--daemon", "unix://" + dir_ + "/nobody.sock"}));
  EXPECT_EQ(none.exit_code, 1) << none;
  EXPECT_THAT(none.err, HasSubstr("nobody.sock"));
  ktuned.Signal(SIGTERM);
  EXPECT_EQ(ktuned.Wait(absl::Seconds(30)), 0);
}

// One key goes the same way as a spec's keys: with --daemon, the ktuned tunes it and keeps
// it; nothing is written here. The daemon's Tune takes no --time.
// The spec's search block sets how its keys are searched; a flag on the command line wins
// field by field (here --budget 3 from Args over the spec's 5), and the JSON says why each
// search stopped.
TEST_F(SpecTuneTest, SpecSearchBlockUnderTheCommandLine) {
  const Result r = Run(Args(WriteSpec("64, 128", "search { strategy: \"random\" budget: 5 }\n"),
                            {"--json", "--quiet"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["keys"].size(), 2u);
  for (const nlohmann::json& k : out["keys"]) {
    EXPECT_EQ(k["strategy"], "random:3:1") << k;
    EXPECT_EQ(k["stop_reason"], "budget of 3 reached") << k;
    EXPECT_EQ(k["trials"], 3) << k;
    // Where the key's wall time went, phase by phase, none of it more than the whole.
    ASSERT_TRUE(k.contains("phases")) << k;
    double sum = 0;
    for (const char* phase : {"prepare", "reference", "compile_wait", "measure", "store",
                              "strategy", "promote", "final_round", "commit"}) {
      ASSERT_TRUE(k["phases"].contains(phase)) << phase << " in " << k;
      EXPECT_GE(k["phases"][phase].get<double>(), 0) << phase;
      sum += k["phases"][phase].get<double>();
    }
    EXPECT_GT(k["phases"]["measure"].get<double>(), 0) << k;
    EXPECT_LE(sum, k["seconds"].get<double>()) << k;
  }
}

TEST_F(SpecTuneTest, OneKeyThroughADaemon) {
  const std::string socket = dir_ + "/run/ktuned.sock";
  testing::Ktuned ktuned(NewTempDir(),
                         {"--listen", "unix://" + socket, "--db", dir_ + "/daemon.db",
                          "--templates", dir_ + "/templates", "--worker", kFakeWorker});
  ASSERT_THAT(ktuned.WaitServing(), HasSubstr(socket)) << ktuned.Stderr();

  const std::vector<std::string> one = {"tune",        "tiny",      "--dtype",
                                        "f32",         "--shape",   "n=64",
                                        "--templates", dir_ + "/templates",
                                        "--db",        dir_ + "/ktune.db",
                                        "--budget",    "3",         "--daemon",
                                        "unix://" + socket};
  const Result tuned = Run(one);
  ASSERT_EQ(tuned.exit_code, 0) << tuned << "--- ktuned\n" << ktuned.Stderr();
  EXPECT_THAT(tuned.out, HasSubstr("tuned     tiny f32 n=64 on "));
  EXPECT_THAT(tuned.out, ContainsRegex("winner    [A-Z]+=[0-9]+"));
  EXPECT_THAT(tuned.out, HasSubstr("stored    by the ktuned at unix://" + socket));
  EXPECT_FALSE(FileExists(dir_ + "/ktune.db")) << "daemon mode must not write a local store";
  // The daemon kept it: the spec through it finds the key fresh.
  const Result spec = Run(Args(WriteSpec("64"), {"--daemon", "unix://" + socket, "--json"}));
  ASSERT_EQ(spec.exit_code, 0) << spec;
  EXPECT_EQ(nlohmann::json::parse(spec.out)["cached"], 1);

  // The search settings travel with the Tune call; bad ones are refused before it.
  std::vector<std::string> timed = one;
  timed.insert(timed.end(), {"--time", "5", "--strategy", "random", "--roofline-stop", "0"});
  const Result searched = Run(timed);
  EXPECT_EQ(searched.exit_code, 0) << searched;
  std::vector<std::string> bad = one;
  bad.insert(bad.end(), {"--min-gain", "2"});
  const Result refused = Run(bad);
  EXPECT_EQ(refused.exit_code, 2) << refused;
  EXPECT_THAT(refused.err, HasSubstr("--min-gain: must be in [0, 1)"));

  std::vector<std::string> nobody = one;
  nobody.back() = "unix://" + dir_ + "/nobody.sock";
  const Result none = Run(nobody);
  EXPECT_EQ(none.exit_code, 1) << none;
  EXPECT_THAT(none.err, HasSubstr("nobody.sock"));
  ktuned.Signal(SIGTERM);
  EXPECT_EQ(ktuned.Wait(absl::Seconds(30)), 0);
}

}  // namespace
}  // namespace ktune
