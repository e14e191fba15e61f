// `ktune cache` run as a user would, on store files built through the store API
// (cache_fixture.h): golden output of ls, show, stats and diff; export then import; prune;
// and every bad input leaving the file byte for byte as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/base/sha256.h"
#include "server/store/store.h"
#include "server/store/store_testing.h"
#include "tests/ktune/cache_fixture.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/golden.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::ktune::cache_testing::BuildMainStore;
using ::ktune::cache_testing::BuildOtherStore;
using ::ktune::store::testing::ReadBytes;
using ::ktune::store::testing::TempDir;
using ::ktune::store::testing::WriteBytes;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using Result = ::ktune::testing::RunResult;

class CacheCommandTest : public ::testing::Test {
 protected:
  // Runs `ktune cache ARGS...` (hermetic: tests/testing/subprocess.h).
  Result Cache(std::vector<std::string> args) {
    // Imports are checked against the templates the fixture's entries were tuned from.
    if (!args.empty() && args[0] == "import" &&
        std::find(args.begin(), args.end(), "--templates") == args.end()) {
      args.insert(args.begin() + 1, {"--templates", KTUNE_SOURCE_DIR "/tests/ktune/testdata/templates"});
    }
    args.insert(args.begin(), "cache");
    const std::string run_dir = dir_.File(absl::StrCat("run", runs_++));
    std::filesystem::create_directories(run_dir);
    return testing::RunToEnd(KTUNE_BINARY_DIR "/bin/ktune", args, run_dir, absl::Seconds(60));
  }

  // The temp folder's path replaced, so goldens do not depend on where tests run.
  std::string Normalized(const std::string& text) const {
    return absl::StrReplaceAll(text, {{dir_.File(""), "<tmp>/"}});
  }

  void ExpectGolden(const std::string& name, const std::string& text) {
    testing::ExpectMatchesGolden(absl::StrCat("tests/ktune/testdata/", name), Normalized(text),
                                 "build/bin/cache_cli_test");
  }

  std::string MainDb() {
    const std::string path = dir_.File("main.db");
    BuildMainStore(path);
    return path;
  }

  TempDir dir_;
  int runs_ = 0;
};

// --- golden output -----------------------------------------------------------------------

TEST_F(CacheCommandTest, LsGolden) {
  const std::string db = MainDb();
  const Result all = Cache({"ls", "--db", db, "--nvrtc-version", "13.0"});
  ASSERT_EQ(all.exit_code, 0) << all;
  EXPECT_THAT(all.err, IsEmpty());
  ExpectGolden("cache_ls.golden", all.out);

  const Result stale = Cache({"ls", "--db", db, "--nvrtc-version", "13.0", "--stale"});
  ASSERT_EQ(stale.exit_code, 0) << stale;
  ExpectGolden("cache_ls_stale.golden", stale.out);

  const Result json = Cache({"ls", "--db", db, "--nvrtc-version", "13.0", "--template",
                             "rmsnorm", "--dtype", "f16", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json;
  ExpectGolden("cache_ls_rmsnorm_f16.golden.json", json.out);

  const Result a100 = Cache({"ls", "--db", db, "--nvrtc-version", "13.0", "--device-model",
                             cache_testing::kA100});
  ASSERT_EQ(a100.exit_code, 0) << a100;
  EXPECT_THAT(a100.out, HasSubstr("elementwise/f32/n=1048576"));
  EXPECT_THAT(a100.out, HasSubstr("\n1 entries\n"));

  // An entry whose default config was not measured (older builds, or the default failed):
  // no speed-up in the table, null in the JSON.
  ASSERT_OK(store::ExecSqlForTesting(db, "UPDATE entries SET default_time_ns = 0"));
  const Result unknown = Cache({"ls", "--db", db, "--nvrtc-version", "13.0", "--device-model",
                                cache_testing::kA100});
  ASSERT_EQ(unknown.exit_code, 0) << unknown;
  EXPECT_THAT(unknown.out, Not(ContainsRegex("[0-9]x ")));
  const Result unknown_json = Cache({"ls", "--db", db, "--nvrtc-version", "13.0", "--json"});
  ASSERT_EQ(unknown_json.exit_code, 0) << unknown_json;
  for (const nlohmann::json& e : nlohmann::json::parse(unknown_json.out)) {
    EXPECT_TRUE(e["default_time_ns"].is_null()) << e;
  }
}

TEST_F(CacheCommandTest, ShowGolden) {
  const std::string db = MainDb();
  const Result by_id = Cache({"show", "--db", db, "--nvrtc-version", "13.0", "1"});
  ASSERT_EQ(by_id.exit_code, 0) << by_id;
  ExpectGolden("cache_show.golden", by_id.out);
  // The KEY column of ls names the same entry; dims in any order.
  const Result by_key =
      Cache({"show", "--db", db, "--nvrtc-version", "13.0", "rmsnorm/f16/tokens=4096,hidden=8192"});
  ASSERT_EQ(by_key.exit_code, 0) << by_key;
  EXPECT_EQ(by_key.out, by_id.out);
  const Result stale = Cache({"show", "--db", db, "--nvrtc-version", "13.0", "--top", "3",
                              "rmsnorm/bf16/hidden=4096,tokens=1024@" +
                                  std::string(cache_testing::kH200)});
  ASSERT_EQ(stale.exit_code, 0) << stale;
  ExpectGolden("cache_show_stale_top3.golden", stale.out);
}

TEST_F(CacheCommandTest, ShowBadEntryIsUsageError) {
  const std::string db = MainDb();
  const Result none = Cache({"show", "--db", db, "99"});
  EXPECT_EQ(none.exit_code, 2) << none;
  EXPECT_THAT(none.err, HasSubstr("no entry 99"));
  const Result nokey = Cache({"show", "--db", db, "rmsnorm/f32/hidden=1,tokens=1"});
  EXPECT_EQ(nokey.exit_code, 2) << nokey;
  EXPECT_THAT(nokey.err, HasSubstr("no entry for rmsnorm/f32/hidden=1,tokens=1"));
  const Result garbage = Cache({"show", "--db", db, "rmsnorm"});
  EXPECT_EQ(garbage.exit_code, 2) << garbage;
  EXPECT_THAT(garbage.err, HasSubstr("neither an id nor TEMPLATE/DTYPE/SHAPE"));
}

TEST_F(CacheCommandTest, StatsGolden) {
  const std::string db = MainDb();
  const Result r = Cache({"stats", "--db", db, "--nvrtc-version", "13.0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectGolden("cache_stats.golden", r.out);
}

TEST_F(CacheCommandTest, DiffGolden) {
  const std::string a = MainDb();
  const std::string b = dir_.File("other.db");
  BuildOtherStore(b);
  const Result r = Cache({"diff", a, b});
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectGolden("cache_diff.golden", r.out);
}

// ktune cache reads while a writer (as ktuned would) holds the file open and commits.
TEST_F(CacheCommandTest, ReadsWhileAWriterHasTheFileOpen) {
  const std::string db = MainDb();
  ASSERT_OK_AND_ASSIGN(auto writer, store::OpenSqliteStore(db));
  ASSERT_OK_AND_ASSIGN(int64_t job, writer->CreateJob(store::testing::MakeJob(
                                        store::testing::MakeKey("hidden=1,tokens=1"))));
  ASSERT_OK(writer->AddTrial(store::testing::MakeTrial(job, 0)).status());
  const Result r = Cache({"stats", "--db", db, "--nvrtc-version", "13.0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("jobs      5\ntrials    52\n"));
}

// --- export and import -------------------------------------------------------------------

TEST_F(CacheCommandTest, ExportThenImportRoundTripsEveryField) {
  const std::string src = MainDb();
  const std::string file = dir_.File("export.json");
  const Result exported = Cache({"export", "--db", src, file});
  ASSERT_EQ(exported.exit_code, 0) << exported;
  EXPECT_THAT(exported.out, HasSubstr("exported 4 entries (51 trials, 2 device models)"));

  const std::string dst = dir_.File("copy.db");
  // A fresh file knows no device models; the bf16 entry was tuned with NVRTC 12.8.
  const Result imported = Cache({"import", "--db", dst, "--nvrtc-version", "13.0",
                                 "--allow-nvrtc-mismatch", file});
  ASSERT_EQ(imported.exit_code, 0) << imported;
  EXPECT_THAT(imported.out, HasSubstr("4 added, 0 replaced, 0 kept existing"));

  ASSERT_OK_AND_ASSIGN(auto a, store::OpenSqliteStore(src));
  ASSERT_OK_AND_ASSIGN(auto b, store::OpenSqliteStore(dst));
  ASSERT_OK_AND_ASSIGN(auto devices_a, a->ListDevices());
  ASSERT_OK_AND_ASSIGN(auto devices_b, b->ListDevices());
  ASSERT_EQ(devices_a.size(), devices_b.size());
  for (size_t i = 0; i < devices_a.size(); ++i) {
    const store::Device& x = devices_a[i];
    const store::Device& y = devices_b[i];
    EXPECT_EQ(x.model_key, y.model_key);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.cc_major, y.cc_major);
    EXPECT_EQ(x.cc_minor, y.cc_minor);
    EXPECT_EQ(x.sm_count, y.sm_count);
    EXPECT_EQ(x.l2_bytes, y.l2_bytes);
    EXPECT_EQ(x.memory_bus_bits, y.memory_bus_bits);
    EXPECT_EQ(x.memory_clock_khz, y.memory_clock_khz);
    EXPECT_EQ(x.copy_gbps, y.copy_gbps);
    EXPECT_EQ(x.uuid, y.uuid);
    EXPECT_EQ(x.driver_version, y.driver_version);
  }
  ASSERT_OK_AND_ASSIGN(auto entries_a, a->ListEntries({}));
  ASSERT_OK_AND_ASSIGN(auto entries_b, b->ListEntries({}));
  ASSERT_EQ(entries_a.size(), 4u);
  ASSERT_EQ(entries_b.size(), entries_a.size());
  for (size_t i = 0; i < entries_a.size(); ++i) {
    SCOPED_TRACE(entries_a[i].key.shape);
    ASSERT_OK_AND_ASSIGN(store::Lookup x, a->GetEntry(entries_a[i].id));
    ASSERT_OK_AND_ASSIGN(store::Lookup y, b->GetEntry(entries_b[i].id));
    store::testing::ExpectSameEntry(x.entry, y.entry, /*same_job=*/false);
    ASSERT_OK_AND_ASSIGN(store::Job jx, a->GetJob(x.entry.job_id));
    ASSERT_OK_AND_ASSIGN(store::Job jy, b->GetJob(y.entry.job_id));
    EXPECT_TRUE(jx.key == jy.key);
    EXPECT_EQ(jx.source_hash, jy.source_hash);
    EXPECT_EQ(jx.nvrtc_version, jy.nvrtc_version);
    EXPECT_EQ(jx.strategy, jy.strategy);
    EXPECT_EQ(jx.state, jy.state);
    EXPECT_EQ(jx.done, jy.done);
    EXPECT_EQ(jx.total, jy.total);
    EXPECT_EQ(jx.error, jy.error);
    EXPECT_EQ(jx.created_unix_ms, jy.created_unix_ms);
    EXPECT_EQ(jx.updated_unix_ms, jy.updated_unix_ms);
    ASSERT_OK_AND_ASSIGN(auto tx, a->ListTrials(x.entry.job_id));
    ASSERT_OK_AND_ASSIGN(auto ty, b->ListTrials(y.entry.job_id));
    ASSERT_EQ(tx.size(), ty.size());
    for (size_t k = 0; k < tx.size(); ++k) {
      EXPECT_TRUE(tx[k].config == ty[k].config);
      EXPECT_EQ(tx[k].candidate_hash, ty[k].candidate_hash);
      EXPECT_EQ(tx[k].outcome, ty[k].outcome);
      EXPECT_EQ(tx[k].compile_ms, ty[k].compile_ms);
      EXPECT_TRUE(store::testing::SameMetrics(tx[k].metrics, ty[k].metrics));
      EXPECT_EQ(tx[k].log, ty[k].log);
      EXPECT_EQ(tx[k].created_unix_ms, ty[k].created_unix_ms);
    }
  }
  // And the second export says the same (ids and the export time aside, none are in it).
  const std::string again = dir_.File("again.json");
  ASSERT_EQ(Cache({"export", "--db", dst, again}).exit_code, 0);
  auto strip_time = [](std::string s) {
    const size_t at = s.find("\"exported_unix_ms\"");
    return s.substr(0, at) + s.substr(s.find('\n', at));
  };
  EXPECT_EQ(strip_time(ReadBytes(again)), strip_time(ReadBytes(file)));
}

TEST_F(CacheCommandTest, ImportFollowsTheConflictRuleAndSaysWhatHappened) {
  const std::string file = dir_.File("export.json");
  ASSERT_EQ(Cache({"export", "--db", MainDb(), "--template", "rmsnorm", "--dtype", "f16", file})
                .exit_code,
            0);
  const std::string db = dir_.File("other.db");
  BuildOtherStore(db);
  // Other's small-key winner (2.90 us) beats the imported 3.22 us; the big key ties.
  Result r = Cache({"import", "--db", db, "--nvrtc-version", "13.0", file});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("kept      rmsnorm/f16/hidden=4096,tokens=16 on NVIDIA H200"));
  EXPECT_THAT(r.out, HasSubstr("existing 2.90 us is not slower than imported 3.22 us"));
  EXPECT_THAT(r.out, HasSubstr("0 added, 0 replaced, 2 kept existing"));
  r = Cache({"import", "--db", db, "--nvrtc-version", "13.0", "--on-conflict", "replace", file});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("replaced  rmsnorm/f16/hidden=4096,tokens=16"));
  EXPECT_THAT(r.out, HasSubstr("3.22 us (was 2.90 us)"));
  EXPECT_THAT(r.out, HasSubstr("0 added, 2 replaced, 0 kept existing"));
  r = Cache({"import", "--db", db, "--nvrtc-version", "13.0", "--on-conflict", "keep-existing",
             file});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("(keep-existing) over"));
  r = Cache({"import", "--db", db, "--on-conflict", "newest", file});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--on-conflict: 'newest'; expected keep-faster"));
  const Result help = Cache({"import", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("keep-faster (the lower median time stays"));
}

// A forged entry (issue 17: a negative time over a cubin of ELF magic and noise replaced a
// real winner under keep-faster) refuses the whole file, naming the entry and the field, and
// leaves the store as it was, byte for byte.
TEST_F(CacheCommandTest, ImportRefusesAForgedEntryAndLeavesTheStoreUntouched) {
  const std::string file = dir_.File("export.json");
  ASSERT_EQ(Cache({"export", "--db", MainDb(), "--template", "rmsnorm", "--dtype", "f16", file})
                .exit_code,
            0);
  const nlohmann::json good = nlohmann::json::parse(ReadBytes(file));
  ASSERT_EQ(good["entries"].size(), 2u);
  const std::string noise_cubin = std::string("\x7f" "ELF") + std::string(64, '\x5a');
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> forge;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"negative time", [](nlohmann::json& e) { e["metrics"]["time_ns"] = -1; },
       "metrics.time_ns: -1 is not a finite positive time"},
      {"ELF magic and noise",
       [&](nlohmann::json& e) {
         e["cubin_base64"] = absl::Base64Escape(noise_cubin);
         e["cubin_sha256"] = Sha256Hex(noise_cubin);
       },
       "cubin_base64: ELF:"},
      {"unknown kernel", [](nlohmann::json& e) { e["launches"][0]["lowered_name"] = "_Z4evilv"; },
       "launches[0].lowered_name: '_Z4evilv' is not a kernel of the cubin"},
      {"path as template", [](nlohmann::json& e) { e["key"]["template_id"] = "../rmsnorm"; },
       "key.template_id: unknown template '../rmsnorm'"},
      {"dtype f64", [](nlohmann::json& e) { e["key"]["dtype"] = "f64"; }, "key.dtype: 'f64'"},
      {"negative dim", [](nlohmann::json& e) { e["key"]["shape"] = "hidden=-4096,tokens=16"; },
       "key.shape:"},
      {"control character",
       [](nlohmann::json& e) { e["key"]["shape"] = "hidden=4096,tokens=16\x01"; }, "key.shape:"},
      {"foreign param", [](nlohmann::json& e) { e["config"]["params"]["EVIL"] = 1; },
       "config.params:"},
      {"unknown target", [](nlohmann::json& e) { e["config"]["knobs"]["target"] = "sm_12"; },
       "config.knobs:"},
      {"negative count", [](nlohmann::json& e) { e["trials_total"] = -1; }, "trials_ok:"},
  };
  const std::string db = dir_.File("other.db");
  BuildOtherStore(db);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::Store> s, store::OpenSqliteStore(db));
  ASSERT_OK_AND_ASSIGN(std::vector<store::EntrySummary> entries_before, s->ListEntries({}));
  s.reset();
  const std::string before = ReadBytes(db);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json forged = good;
    c.forge(forged["entries"][1]);
    const std::string path = dir_.File("forged.json");
    WriteBytes(path, forged.dump(1));
    const Result r = Cache({"import", "--db", db, "--nvrtc-version", "13.0", path});
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_THAT(r.err, HasSubstr("entries[1] (")) << r;
    EXPECT_THAT(r.err, HasSubstr(" on NVIDIA H200|sm_90|132sm|6144bit): ")) << r;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << r;
    EXPECT_THAT(r.err, HasSubstr("nothing imported")) << r;
    EXPECT_THAT(r.out, IsEmpty()) << r;
    EXPECT_TRUE(ReadBytes(db) == before) << "the store changed";
  }
  ASSERT_OK_AND_ASSIGN(s, store::OpenSqliteStore(db));
  ASSERT_OK_AND_ASSIGN(std::vector<store::EntrySummary> entries_after, s->ListEntries({}));
  ASSERT_EQ(entries_after.size(), entries_before.size());
  for (size_t i = 0; i < entries_after.size(); ++i) {
    EXPECT_EQ(entries_after[i].id, entries_before[i].id);
    EXPECT_TRUE(entries_after[i].key == entries_before[i].key);
    EXPECT_EQ(entries_after[i].metrics.time_ns, entries_before[i].metrics.time_ns);
    EXPECT_TRUE(entries_after[i].config == entries_before[i].config);
  }
  s.reset();
  // The file as exported still imports.
  const Result r = Cache({"import", "--db", db, "--nvrtc-version", "13.0", "--on-conflict",
                          "replace", file});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("0 added, 2 replaced, 0 kept existing"));
}

// --- prune -------------------------------------------------------------------------------

TEST_F(CacheCommandTest, PruneReportsWhatWentAndDryRunChangesNothing) {
  const std::string db = MainDb();
  const std::string before = ReadBytes(db);
  Result r = Cache({"prune", "--db", db, "--nvrtc-version", "13.0", "--stale", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(ReadBytes(db) == before) << "a dry run wrote the file";
  ExpectGolden("cache_prune_dry_run.golden", r.out);
  r = Cache({"prune", "--db", db, "--nvrtc-version", "13.0", "--stale"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("removed 2 entries, 2 jobs, 21 trials"));
  EXPECT_THAT(r.out, HasSubstr("rmsnorm/bf16/hidden=4096,tokens=1024"));
  EXPECT_THAT(r.out, HasSubstr("elementwise/f32/n=1048576"));
  r = Cache({"stats", "--db", db, "--nvrtc-version", "13.0"});
  EXPECT_THAT(r.out, HasSubstr("entries   2 (0 stale"));
  EXPECT_THAT(r.out, HasSubstr("trials    30\n"));
  // The fixture's entries date from 2023.
  r = Cache({"prune", "--db", db, "--older-than", "30d"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("removed 2 entries, 2 jobs, 30 trials"));
  EXPECT_THAT(r.out, HasSubstr("created 2023-11-14 23:13:20"));
}

TEST_F(CacheCommandTest, PruneNeedsToBeToldWhat) {
  const std::string db = MainDb();
  Result r = Cache({"prune", "--db", db});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--stale, --older-than DURATION"));
  r = Cache({"prune", "--db", db, "--older-than", "soon"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--older-than: 'soon' is not a duration"));
}

// --- bad input ---------------------------------------------------------------------------

TEST_F(CacheCommandTest, BadDatabaseFilesAreRefusedAndLeftUntouched) {
  struct Bad {
    std::string name;
    std::string path;
    std::string message;
  };
  std::vector<Bad> bad;
  bad.push_back({"missing", dir_.File("nope.db"), "no database file at"});
  const std::string text = dir_.File("text.db");
  WriteBytes(text, "this is a text file, not a database\n");
  bad.push_back({"not sqlite", text, "not an SQLite database"});
  const std::string corrupt = dir_.File("corrupt.db");
  BuildMainStore(corrupt);
  {
    std::string bytes = ReadBytes(corrupt);
    ASSERT_GT(bytes.size(), 16384u);
    for (size_t i = 4096 + 100; i < 4096 * 3; ++i) bytes[i] = static_cast<char>(0xA5);
    WriteBytes(corrupt, bytes);
  }
  bad.push_back({"corrupt", corrupt, "corrupt.db"});
  const std::string newer = dir_.File("newer.db");
  BuildMainStore(newer);
  ASSERT_OK(store::ExecSqlForTesting(newer, "PRAGMA user_version = 99"));
  bad.push_back({"newer schema", newer, "has schema version 99, newer than"});

  const std::string export_file = dir_.File("export.json");
  ASSERT_EQ(Cache({"export", "--db", MainDb(), export_file}).exit_code, 0);
  for (const Bad& b : bad) {
    const bool exists = std::filesystem::exists(b.path);
    const std::string before = exists ? ReadBytes(b.path) : "";
    const std::vector<std::vector<std::string>> commands = {
        {"ls", "--db", b.path},
        {"show", "--db", b.path, "1"},
        {"stats", "--db", b.path},
        {"export", "--db", b.path, dir_.File("out.json")},
        {"prune", "--db", b.path, "--stale"},
        {"report", "--db", b.path, "--out", dir_.File("report")},
        {"diff", b.path, dir_.File("main.db")},
        {"import", "--db", b.path, "--allow-nvrtc-mismatch", export_file},
    };
    for (const auto& args : commands) {
      if (b.name == "missing" && args[0] == "import") continue;  // import creates a new file
      SCOPED_TRACE(absl::StrCat(b.name, ": ", absl::StrJoin(args, " ")));
      const Result r = Cache(args);
      EXPECT_EQ(r.exit_code, 2) << r;
      EXPECT_THAT(r.err, HasSubstr(b.message)) << r;
      EXPECT_EQ(std::filesystem::exists(b.path), exists);
      if (exists) {
        EXPECT_TRUE(ReadBytes(b.path) == before) << "the file changed";
      }
    }
  }
}

TEST_F(CacheCommandTest, BadExportFilesAreRefusedAndTheStoreLeftUntouched) {
  const std::string db = MainDb();
  // A store that knows only the H200 (it tuned there), for the other-device check.
  const std::string h200_only = dir_.File("h200.db");
  BuildOtherStore(h200_only);
  const std::string good = dir_.File("good.json");
  ASSERT_EQ(Cache({"export", "--db", db, good}).exit_code, 0);
  const std::string a100 = dir_.File("a100.json");
  ASSERT_EQ(Cache({"export", "--db", db, "--device-model", cache_testing::kA100, a100}).exit_code, 0);
  const std::string not_json = dir_.File("not.json");
  WriteBytes(not_json, "SQLite format 3\n garbage");
  const std::string other = dir_.File("other.json");
  WriteBytes(other, "{\"format\": \"something-else\"}");
  const std::string newer = dir_.File("newer.json");
  {
    std::string text = ReadBytes(good);
    const size_t at = text.find("\"version\": 1");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 12, "\"version\": 7");
    WriteBytes(newer, text);
  }
  const std::string broken = dir_.File("broken.json");
  {
    std::string text = ReadBytes(good);
    const size_t at = text.find("\"time_ns\":");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 10, "\"time_ms\":");
    WriteBytes(broken, text);
  }
  struct Case {
    std::string name, file, target, message;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"missing", dir_.File("none.json"), db, "none.json", {}},
      {"not json", not_json, db, "not a ktune export: not a JSON object", {}},
      {"other format", other, db, "not a ktune export", {}},
      {"newer version", newer, db, "has export version 7; this build reads version 1", {}},
      {"missing field", broken, db, "entries[0].metrics.time_ns: missing", {}},
      {"other nvrtc", good, db, "tuned with NVRTC 12.8, this host has 13.0", {}},
      {"other device", a100, h200_only, "a device model this store has never seen",
       {"--allow-nvrtc-mismatch"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string before = ReadBytes(c.target);
    std::vector<std::string> args = {"import", "--db", c.target, "--nvrtc-version", "13.0"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    args.push_back(c.file);
    const Result r = Cache(args);
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_THAT(r.out + r.err, HasSubstr(c.message)) << r;
    EXPECT_TRUE(ReadBytes(c.target) == before) << "the store changed";
  }
  // Asked to, it takes them.
  const Result forced = Cache({"import", "--db", h200_only, "--nvrtc-version", "13.0",
                               "--allow-nvrtc-mismatch", "--allow-other-device", a100});
  EXPECT_EQ(forced.exit_code, 0) << forced;
  EXPECT_THAT(forced.out, HasSubstr("added     elementwise/f32/n=1048576 on NVIDIA A100"));
}

}  // namespace
}  // namespace ktune
