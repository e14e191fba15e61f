// Runs the built bench/search_replay over a store an exhaustive `ktune tune --spec` made with
// NVRTC for real and the GPU played by fake_ktune_worker (FAKE_WORKER_ANY_OK: every
// candidate ok, at a time fixed by its name): exhaustive replays find every recorded best,
// guided ones measure part of each space and are answered for every candidate they ask for;
// a missing store is an error naming it. Then bench/search_retime over the same store given
// twice (an A/A judgement), on one worker and with a worker per round.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_worker_env.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::ktune::testing::NewTempDir;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKtune[] = KTUNE_BINARY_DIR "/bin/ktune";
constexpr char kReplay[] = KTUNE_BINARY_DIR "/bin/search_replay";
constexpr char kRetime[] = KTUNE_BINARY_DIR "/bin/search_retime";
constexpr char kFakeWorker[] = KTUNE_BINARY_DIR "/bin/fake_ktune_worker";

class SearchReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    testing::WriteTiny(dir_ + "/templates");
    testing::UseFakeWorkerAllOk();
    const std::string spec = dir_ + "/spec.textproto";
    ASSERT_TRUE(AtomicWriteFile(spec, "model: \"toy\"\nentries {\n  template: \"tiny\"\n"
                                      "  dtypes: [\"f32\"]\n  dims { name: \"n\" values: [64, "
                                      "1000] }\n}\n")
                    .ok());
    const testing::RunResult r = Run(kKtune, {"tune", "--spec", spec, "--strategy", "exhaustive",
                                              "--db", db(), "--templates", templates(),
                                              "--worker", kFakeWorker, "--threads", "2"});
    ASSERT_EQ(r.exit_code, 0) << r;
  }

  std::string db() const { return dir_ + "/exhaustive.db"; }
  std::string templates() const { return dir_ + "/templates"; }

  static testing::RunResult Run(const std::string& binary, const std::vector<std::string>& args) {
    return testing::RunToEnd(binary, args, NewTempDir(), absl::Seconds(120));
  }

  std::string dir_;
};

TEST_F(SearchReplayTest, ExhaustiveFindsEveryRecordedBest) {
  const testing::RunResult r =
      Run(kReplay, {"--db", db(), "--templates", templates(), "--strategy", "exhaustive"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("2 keys replayed (0 failed): winner within 2 % of the best "
                               "recorded on 2;"));
  // tiny has 108 candidates at either n (6 knob choices x 18 param points).
  EXPECT_THAT(r.out, HasSubstr("measured 216 of 216 candidates (100.0 %"));
  EXPECT_THAT(r.out, HasSubstr("0 asked for had no recorded time; worst ratio 1.000"));
  // The second key's programs are the first's: an exhaustive run compiles them once, and
  // its cost ratio to itself is 1.
  EXPECT_THAT(r.out, HasSubstr("compiled 108 candidates (an exhaustive run 108); median "
                               "per-key cost ratio 1.00"));
}

TEST_F(SearchReplayTest, GuidedMeasuresPartOfEachSpaceWithNoiseToo) {
  for (const char* noise : {"0", "0.02"}) {
    const testing::RunResult r =
        Run(kReplay, {"--db", db(), "--templates", templates(), "--noise", noise});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_THAT(r.out, HasSubstr("2 keys replayed (0 failed)"));
    EXPECT_THAT(r.out, HasSubstr("0 asked for had no recorded time"));
    EXPECT_THAT(r.out, ContainsRegex("tiny f32 n=1000 +108 +[0-9]+ +0\\.[0-9]+"));
  }
  // Without the roofline stop no key ends on it.
  const testing::RunResult r =
      Run(kReplay, {"--db", db(), "--templates", templates(), "--roofline-stop", "0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("the roofline stopped 0"));
  EXPECT_THAT(r.out, Not(HasSubstr(" roofline\n")));
}

TEST_F(SearchReplayTest, AMissingStoreOrBadFlagIsAnError) {
  testing::RunResult r = Run(kReplay, {"--db", dir_ + "/no-such.db", "--templates", templates()});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("no-such.db"));
  r = Run(kReplay, {"--db", db(), "--noise", "0.9"});
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr("--noise"));
  r = Run(kReplay, {"--db", db(), "--roofline-stop", "1.5"});
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr("--roofline-stop"));
  r = Run(kReplay, {"--db", db(), "--measure-cost", "-1"});
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr("--measure-cost"));
}

// The same configs on both sides count as equal unmeasured, unless --same times them too;
// --fresh-worker runs each round on a worker of its own (each sets every key's problem again)
// and gives the same verdicts and the same order of runs.
TEST_F(SearchReplayTest, RetimeOneStoreAgainstItself) {
  const std::vector<std::string> both = {"--reference", db(), "--candidate", db(), "--templates",
                                         templates(), "--worker", kFakeWorker};
  testing::RunResult r = Run(kRetime, both);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("2 keys in both: candidate within 2 % of the reference on 2 "
                               "(2 the same config), 0 failed to retime"));
  EXPECT_THAT(r.out, ContainsRegex("tiny f32 n=64 +- +- +same"));

  const std::string log = dir_ + "/worker.log";
  setenv("FAKE_WORKER_LOG", log.c_str(), 1);
  std::string outs[2];
  for (int fresh = 0; fresh < 2; ++fresh) {
    ::unlink(log.c_str());  // the first run's, or none
    std::vector<std::string> args = both;
    for (const char* a : {"--same", "--runs", "--rounds", "3", "--order", "shuffle"}) {
      args.push_back(a);
    }
    if (fresh) args.push_back("--fresh-worker");
    r = Run(kRetime, args);
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_THAT(r.out, HasSubstr("2 keys in both: candidate within 2 % of the reference on 2 "
                                 "(2 the same config), 0 failed to retime; worst ratio 1.000"));
    std::set<std::string> workers;
    int problems = 0, measures = 0;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      workers.insert(line.substr(0, line.find(' ')));
      problems += line.find(" set_problem") != std::string::npos;
      measures += line.find(" measure ") != std::string::npos;
    }
    EXPECT_EQ(workers.size(), fresh ? 3u : 1u);
    EXPECT_EQ(problems, fresh ? 6 : 2);
    EXPECT_EQ(measures, 2 * 3 * 2);
    outs[fresh] = r.out;
  }
  unsetenv("FAKE_WORKER_LOG");
  EXPECT_EQ(outs[0], outs[1]);

  r = Run(kRetime, {"--reference", dir_ + "/no-such.db", "--candidate", db()});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("no-such.db"));
}

}  // namespace
}  // namespace ktune
