#include "server/tuning/tuning_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/compile/cache_key.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::FailedMeasurement;
using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::NameInts;
using ::ktune::testing::OkMeasurement;
using ::ktune::testing::StatusIs;
using ::testing::Field;
using ::testing::HasSubstr;

// A landscape with one best point: BLOCK=256, VEC=4.
v1::Measurement Landscape(const std::string& name) {
  std::vector<int64_t> p = NameInts(name);  // {BLOCK, VEC}
  if (p.size() != 2) return FailedMeasurement("launch_failed", "not a tiny candidate: " + name);
  return OkMeasurement(1000.0 + std::abs(p[0] - 256) * 2.0 + 400.0 / p[1]);
}

// A FakeCompiler that records the programs it is asked to warm (by cache key).
class WarmRecordingCompiler : public testing::FakeCompiler {
 public:
  absl::Status Warm(const CompileRequest& request) override {
    absl::MutexLock lock(&mu);
    warmed.insert(CompileCacheKey(request, Identity()));
    return absl::OkStatus();
  }
  size_t WarmedCount() {
    absl::MutexLock lock(&mu);
    return warmed.size();
  }
  absl::Mutex mu;
  std::set<std::string> warmed ABSL_GUARDED_BY(mu);
};

class TuningJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = LoadTemplateRegistry(testing::TestTemplatesDir());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    auto store = store::OpenSqliteStore(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    pool_ = std::make_unique<CompilePool>(&compiler_, 2);
    gpu_.script = Landscape;
    request_.template_name = "tiny";
    request_.dtype = DType::kF32;
    request_.shape = {{"n", 1000}};
    // Most tests here count every candidate of the space; the guided ones say so.
    request_.search.strategy = "exhaustive";
  }

  TuningEnv Env() {
    return {registry_.get(), &compiler_, pool_.get(), &gpu_, store_.get(), idle_.get()};
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<store::Store> store_;
  WarmRecordingCompiler compiler_;
  std::unique_ptr<CompilePool> pool_;
  std::unique_ptr<IdlePool> idle_;  // none unless a test makes one
  testing::FakeGpu gpu_;
  TuneRequest request_;
};

TEST_F(TuningJobTest, ExhaustiveFindsTheBestAndStoresIt) {
  std::vector<int64_t> seen_done;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env(), [&](const TuneProgress& p) {
                         seen_done.push_back(p.done);
                         EXPECT_EQ(p.total, 108);
                         EXPECT_NE(p.last, nullptr);
                         EXPECT_NE(p.best, nullptr);
                         return true;
                       }));
  // tiny at n=1000: 18 valid param points x 6 knob choices (search_space_test).
  // And the final round: 3 finalists x 3 runs, the first of each its run in the search.
  EXPECT_EQ(gpu_.measures, 108 + 3 * 2);
  EXPECT_EQ(r.trials.size(), 108u);
  EXPECT_EQ(seen_done.size(), 108u);
  EXPECT_EQ(seen_done.back(), 108);
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
  EXPECT_EQ(r.entry.metrics.time_ns, 1100);
  EXPECT_EQ(r.trials.front().metrics.time_ns, 1100);
  EXPECT_EQ(r.entry.trials_total, 108);
  EXPECT_EQ(r.entry.trials_ok, 108);
  ASSERT_EQ(r.entry.launches.size(), 1u);
  EXPECT_EQ(r.entry.launches[0].lowered_name, "tiny<float, 256, 4>");
  EXPECT_EQ(r.entry.launches[0].grid, (std::array<uint32_t, 3>{1, 1, 1}));
  EXPECT_EQ(r.entry.launches[0].block, (std::array<uint32_t, 3>{256, 1, 1}));

  // The problem the GPU got: the reference and the template's f32 tolerance.
  EXPECT_EQ(gpu_.problems, 1);
  EXPECT_EQ(gpu_.problem.reference().launches(0).lowered_name(), "tiny_ref<float>");
  EXPECT_EQ(gpu_.problem.args_size(), 3);
  EXPECT_DOUBLE_EQ(gpu_.problem.atol(), 1e-6);

  // Stored: found by key, fresh, with its cubin intact, and the job is done.
  ASSERT_OK_AND_ASSIGN(store::Lookup hit,
                       store_->LookupEntry(r.entry.key, r.entry.source_hash, "13.0"));
  EXPECT_FALSE(hit.stale);
  EXPECT_EQ(hit.entry.cubin, r.entry.cubin);
  EXPECT_EQ(hit.entry.config, r.entry.config);
  ASSERT_OK_AND_ASSIGN(store::Job job, store_->GetJob(r.entry.job_id));
  EXPECT_EQ(job.state, store::JobState::kDone);
  ASSERT_OK_AND_ASSIGN(std::vector<store::Trial> trials, store_->ListTrials(job.id));
  EXPECT_EQ(trials.size(), 108u);
  ASSERT_OK_AND_ASSIGN(store::Device device, store_->GetDevice(r.entry.key.device_model));
  EXPECT_EQ(device.copy_gbps, 4000);
}

TEST_F(TuningJobTest, GuidedJobWarmsItsWholeSpaceOnIdleThreads) {
  request_.search.strategy = "guided";
  idle_ = std::make_unique<IdlePool>(2);
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  idle_->WaitUntilDone();
  EXPECT_EQ(r.space_size, 108);
  EXPECT_LT(r.trials.size(), 108u);  // measured a part of the space
  // Every candidate's program was queued: the ones it measured (cached already by then in a
  // real compiler) and the ones it never asked for, which the template's next key may.
  EXPECT_EQ(compiler_.WarmedCount(), 108u);
  EXPECT_EQ(idle_->completed(), 108);
}

TEST_F(TuningJobTest, ExhaustiveJobQueuesNoIdleCompiles) {
  idle_ = std::make_unique<IdlePool>(2);
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  idle_->WaitUntilDone();
  EXPECT_EQ(r.trials.size(), 108u);
  EXPECT_EQ(compiler_.WarmedCount(), 0u);
  EXPECT_EQ(idle_->completed(), 0);
}

TEST_F(TuningJobTest, FailuresAreRecordedAndTheJobGoesOn) {
  compiler_.fails = [](const std::string& n) { return NameInts(n) == std::vector<int64_t>{1024, 1}; };
  gpu_.script = [](const std::string& n) {
    std::vector<int64_t> p = NameInts(n);
    if (p[0] == 32) return FailedMeasurement("crashed", "CUDA_ERROR_ILLEGAL_ADDRESS");
    if (p[0] == 64) return FailedMeasurement("wrong_result", "out[3]: got 1 want 2");
    if (p[0] == 512 && p[1] == 4) return FailedMeasurement("timed_out", "no answer in 1000 ms");
    if (p[0] == 128 && p[1] == 2) return FailedMeasurement("resource_limit", "too many resources");
    // The planted fastest candidate is wrong; the check must keep it from winning.
    if (p[0] == 1024 && p[1] == 4) return FailedMeasurement("wrong_result", "fast but wrong");
    return Landscape(n);
  };
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  std::map<Outcome, int> outcomes;
  for (const store::Trial& t : r.trials) ++outcomes[t.outcome];
  EXPECT_EQ(outcomes[Outcome::kCrashed], 3 * 6);        // BLOCK 32 x 3 VECs x 6 knobs
  EXPECT_EQ(outcomes[Outcome::kWrongResult], 4 * 6);    // BLOCK 64 x 3, and 1024/4
  EXPECT_EQ(outcomes[Outcome::kTimedOut], 6);
  EXPECT_EQ(outcomes[Outcome::kResourceLimit], 6);
  EXPECT_EQ(outcomes[Outcome::kCompileFailed], 6);
  EXPECT_EQ(r.entry.config.params.at("BLOCK"), 256);
  EXPECT_EQ(r.entry.trials_ok, 108 - 3 * 6 - 4 * 6 - 6 - 6 - 6);
  for (const store::Trial& t : r.trials) {
    if (t.outcome == Outcome::kCompileFailed) {
      EXPECT_THAT(t.log, HasSubstr("planted compile failure"));
    }
    if (t.outcome == Outcome::kCrashed) {
      EXPECT_EQ(t.log, "CUDA_ERROR_ILLEGAL_ADDRESS");
    }
    if (t.outcome != Outcome::kOk) {
      EXPECT_EQ(t.metrics.time_ns, 0);
    }
  }
  // Compile failures never reach the GPU.
  EXPECT_EQ(gpu_.measures, 108 - 6 + 3 * 2);
}

// The default config is the speed-up's baseline: measured first, even by an exhaustive
// search with a budget that would not reach it in the space's order, and stored with the
// winner.
TEST_F(TuningJobTest, DefaultConfigIsMeasuredFirstAndItsTimeStored) {
  request_.search.budget = 2;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(gpu_.measured.front(), "tiny<float, 128, 1>");  // the manifest's defaults
  EXPECT_EQ(r.entry.default_time_ns, Landscape("tiny<float, 128, 1>").time_ns());
  EXPECT_LE(r.entry.metrics.time_ns, r.entry.default_time_ns);
  ASSERT_OK_AND_ASSIGN(store::Lookup hit,
                       store_->LookupEntry(r.entry.key, r.entry.source_hash, "13.0"));
  EXPECT_EQ(hit.entry.default_time_ns, r.entry.default_time_ns);
}

TEST_F(TuningJobTest, DefaultTimeIsZeroWhenTheDefaultFails) {
  gpu_.script = [](const std::string& n) {
    if (n == "tiny<float, 128, 1>") return FailedMeasurement("wrong_result", "planted");
    return Landscape(n);
  };
  request_.search.budget = 4;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.entry.default_time_ns, 0);
}

TEST_F(TuningJobTest, RandomWithBudgetStartsWithTheDefault) {
  request_.search.strategy = "random";
  request_.search.budget = 10;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.trials.size(), 10u);
  ASSERT_FALSE(gpu_.measured.empty());
  EXPECT_EQ(gpu_.measured.front(), "tiny<float, 128, 1>");  // the manifest's defaults
}

TEST_F(TuningJobTest, CancelledJobResumesFromItsTrials) {
  int calls = 0;
  EXPECT_THAT(RunTuning(request_, Env(), [&](const TuneProgress&) { return ++calls < 40; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 40 of 108")));
  EXPECT_EQ(gpu_.measures, 40);
  ASSERT_OK_AND_ASSIGN(std::vector<store::Job> abandoned,
                       store_->ListJobs(store::JobState::kAbandoned));
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].done, 40);

  gpu_.measures = 0;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.resumed_trials, 40);
  // Nothing measured twice but the finalists (all three measured in this run: their runs
  // in the search count as their first of the final round).
  EXPECT_EQ(gpu_.measures, 108 - 40 + 3 * 2);
  EXPECT_EQ(r.trials.size(), 108u);
  EXPECT_EQ(r.entry.job_id, abandoned[0].id);
  EXPECT_EQ(r.entry.config.params.at("BLOCK"), 256);

  // A job cancelled at its last candidate: the next run measures nothing new, and its
  // finalists, measured by the earlier run (whose runs only the store's trial times
  // remain of), get all three final-round runs.
  request_.shape = {{"n", 2000}};
  calls = 0;
  EXPECT_THAT(RunTuning(request_, Env(), [&](const TuneProgress&) { return ++calls < 108; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 108 of 108")));
  gpu_.measures = 0;
  ASSERT_OK_AND_ASSIGN(TuneResult last, RunTuning(request_, Env()));
  EXPECT_EQ(last.resumed_trials, 108);
  EXPECT_EQ(gpu_.measures, 3 * 3);
  EXPECT_EQ(last.entry.metrics.time_ns, 1100);
}

TEST_F(TuningJobTest, FinalRoundOutvotesALuckySample) {
  // BLOCK=512,VEC=4 is measured fast once (900 ns) and slower ever after (1300 ns); the
  // real best, BLOCK=256,VEC=4, is 1100 ns every time.
  std::map<std::string, int> seen;
  gpu_.script = [&](const std::string& n) {
    if (NameInts(n) == std::vector<int64_t>{512, 4}) {
      return OkMeasurement(seen[n]++ == 0 ? 900 : 1300);
    }
    return Landscape(n);
  };
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
  EXPECT_EQ(r.entry.metrics.time_ns, 1100);

  // Without the final round the lucky sample wins.
  request_.final_rounds = 0;
  request_.shape = {{"n", 2000}};
  seen.clear();
  ASSERT_OK_AND_ASSIGN(TuneResult lucky, RunTuning(request_, Env()));
  EXPECT_EQ(lucky.entry.config.params.at("BLOCK"), 512);
}

TEST_F(TuningJobTest, KilledJobResumes) {
  // A process killed mid-job leaves the job 'running': the next run picks it up.
  int calls = 0;
  EXPECT_THAT(RunTuning(request_, Env(), [&](const TuneProgress&) { return ++calls < 25; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 25 of 108")));
  ASSERT_OK_AND_ASSIGN(std::vector<store::Job> jobs, store_->ListJobs(store::JobState::kAbandoned));
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_OK(store_->UpdateJob(jobs[0].id, store::JobState::kRunning, 25, jobs[0].total, ""));
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.resumed_trials, 25);
  EXPECT_EQ(r.entry.job_id, jobs[0].id);
  EXPECT_EQ(r.trials.size(), 108u);
}

TEST_F(TuningJobTest, TimeLimitKeepsTheBestSoFar) {
  request_.search.time_limit_s = 1e-9;  // up before the first candidate: nothing measured
  EXPECT_THAT(RunTuning(request_, Env()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no candidate passed")));
}

TEST_F(TuningJobTest, NoCandidatePasses) {
  gpu_.script = [](const std::string&) { return FailedMeasurement("wrong_result", "all wrong"); };
  EXPECT_THAT(RunTuning(request_, Env()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no candidate passed: wrong_result 108")));
  ASSERT_OK_AND_ASSIGN(std::vector<store::Job> failed, store_->ListJobs(store::JobState::kFailed));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_THAT(failed[0].error, HasSubstr("no candidate passed"));
}

// The stored ceiling is the best measurement so far: a lower one does not replace it (and a
// trial's ceiling fraction is over the stored one), a higher one does, and a failed one
// leaves the stored figure to serve.
TEST_F(TuningJobTest, StoredCeilingIsTheBestMeasured) {
  request_.search.budget = 3;
  gpu_.copy_gbps = 3000;
  ASSERT_OK_AND_ASSIGN(TuneResult first, RunTuning(request_, Env()));
  const std::string model = first.entry.key.device_model;
  EXPECT_THAT(store_->GetDevice(model), IsOkAndHolds(Field(&store::Device::copy_gbps, 3000)));

  gpu_.copy_gbps = 4000;
  request_.shape = {{"n", 2000}};
  ASSERT_OK(RunTuning(request_, Env()).status());
  EXPECT_THAT(store_->GetDevice(model), IsOkAndHolds(Field(&store::Device::copy_gbps, 4000)));

  gpu_.copy_gbps = 2000;
  request_.shape = {{"n", 3000}};
  ASSERT_OK_AND_ASSIGN(TuneResult low, RunTuning(request_, Env()));
  EXPECT_THAT(store_->GetDevice(model), IsOkAndHolds(Field(&store::Device::copy_gbps, 4000)));
  EXPECT_DOUBLE_EQ(low.entry.metrics.ceiling_fraction, low.entry.metrics.gbps / 4000);

  gpu_.ceiling_status = absl::ResourceExhaustedError("too little free GPU memory");
  request_.shape = {{"n", 4000}};
  ASSERT_OK(RunTuning(request_, Env()).status());
  EXPECT_THAT(store_->GetDevice(model), IsOkAndHolds(Field(&store::Device::copy_gbps, 4000)));
  EXPECT_EQ(gpu_.ceiling_calls, 4);
}

TEST_F(TuningJobTest, CeilingFailureWithNothingStoredFailsTheJob) {
  gpu_.ceiling_status = absl::ResourceExhaustedError("too little free GPU memory");
  EXPECT_THAT(RunTuning(request_, Env()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("free GPU memory")));
}

TEST_F(TuningJobTest, BadRequestsAndNoGpu) {
  TuneRequest r = request_;
  r.template_name = "nope";
  EXPECT_THAT(RunTuning(r, Env()), StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown template 'nope'")));
  r = request_;
  r.shape = {{"m", 3}};
  EXPECT_THAT(RunTuning(r, Env()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing dim 'n'")));
  r = request_;
  r.dtype = DType::kF16;
  EXPECT_THAT(RunTuning(r, Env()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  r = request_;
  r.search.strategy = "annealing";
  EXPECT_THAT(RunTuning(r, Env()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown strategy 'annealing'")));
  r = request_;
  r.search.budget = -1;
  EXPECT_THAT(RunTuning(r, Env()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget")));
  r = request_;
  r.search.min_gain = std::nan("");
  EXPECT_THAT(RunTuning(r, Env()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min gain")));
  r = request_;
  r.search.roofline_stop = 1.5;
  EXPECT_THAT(RunTuning(r, Env()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("roofline stop")));
  gpu_.info_status = absl::UnavailableError("no CUDA driver: dlopen libcuda.so.1 failed");
  EXPECT_THAT(RunTuning(request_, Env()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no CUDA driver")));
  EXPECT_EQ(gpu_.measures, 0);
}

TEST_F(TuningJobTest, ReferenceThatDoesNotCompileFailsTheJob) {
  compiler_.fails = [](const std::string& n) { return absl::StartsWith(n, "tiny_ref"); };
  EXPECT_THAT(RunTuning(request_, Env()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the reference does not compile")));
  EXPECT_EQ(gpu_.problems, 0);
}

// A GPU whose SetProblem waits (up to 5 s) for a candidate compile beside the reference's:
// it sees one only if the job hands the first batch to the compile pool before it sets the
// problem.
class ProblemWaitsForCompilesGpu : public testing::FakeGpu {
 public:
  explicit ProblemWaitsForCompilesGpu(const testing::FakeCompiler* compiler)
      : compiler_(compiler) {}
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (compiler_->calls < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    compiles_at_set_problem = compiler_->calls;
    return FakeGpu::SetProblem(problem);
  }
  int compiles_at_set_problem = 0;

 private:
  const testing::FakeCompiler* compiler_;
};

TEST_F(TuningJobTest, TheFirstBatchCompilesWhileTheProblemIsSet) {
  ProblemWaitsForCompilesGpu gpu(&compiler_);
  gpu.script = Landscape;
  TuningEnv env = Env();
  env.gpu = &gpu;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, env));
  // The reference, and at least one candidate of the first batch.
  EXPECT_GE(gpu.compiles_at_set_problem, 2);
  EXPECT_EQ(gpu.problems, 1);
  EXPECT_EQ(r.trials.size(), 108u);
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
}

// A GPU whose problem takes 30 ms to set and each measurement 1 ms.
class SlowGpu : public testing::FakeGpu {
 public:
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return FakeGpu::SetProblem(problem);
  }
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FakeGpu::Measure(candidate, timing);
  }
};

TEST_F(TuningJobTest, PhasesSayWhereTheWallTimeWent) {
  SlowGpu gpu;
  gpu.script = Landscape;
  TuningEnv env = Env();
  env.gpu = &gpu;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, env));
  const TunePhases& p = r.phases;
  EXPECT_GE(p.reference, 0.030);
  EXPECT_GE(p.measure, 0.108);      // every one of the 108 candidates, once
  EXPECT_GE(p.final_round, 0.006);  // 3 finalists x the 2 runs not made in the search
  EXPECT_LT(p.final_round, p.measure);
  EXPECT_EQ(p.promote, 0);          // exhaustive: no timing rounds
  EXPECT_GT(p.prepare, 0);
  EXPECT_GT(p.store, 0);
  EXPECT_GT(p.commit, 0);
  double sum = 0;
  for (const auto& [name, seconds] : PhaseList(p)) sum += seconds;
  EXPECT_LE(sum, r.seconds);
  EXPECT_EQ(PhaseList(p).size(), 9u);
  EXPECT_EQ(PhaseList(p).front().first, "prepare");

  // Under timing rounds the leaders are timed again: that is its own phase.
  request_.search.strategy = "random";
  request_.search.budget = 20;
  ASSERT_OK_AND_ASSIGN(TuneResult rounds, RunTuning(request_, env));
  EXPECT_GE(rounds.phases.promote, 0.006);  // at least 2 x 3 finalists' leaders
  EXPECT_TRUE(PhaseList(TunePhases{}).empty());
}

TEST(DeriveMetricsTest, FromCostModelAndCeiling) {
  CompileResult c;
  CompiledKernel k;
  k.resources.registers = 40;
  k.resources.spill_stores = 8;
  k.resources.spill_loads = 4;
  k.resources.static_smem = 128;
  c.kernels = {k};
  v1::Measurement m = OkMeasurement(2000);  // 2 us
  m.set_waves(2.25);
  m.set_last_wave(0.25);
  m.set_batch(16);
  m.set_l2_flushed(true);
  TrialMetrics t = DeriveMetrics(c, 1024, m, /*bytes=*/8'000'000, /*flops=*/2'000'000, 4000);
  EXPECT_EQ(t.registers, 40);
  EXPECT_EQ(t.spill_bytes, 12);
  EXPECT_EQ(t.static_smem, 128);
  EXPECT_EQ(t.dynamic_smem, 1024);
  EXPECT_DOUBLE_EQ(t.gbps, 4000);   // 8 MB in 2 us
  EXPECT_DOUBLE_EQ(t.gflops, 1000);
  EXPECT_DOUBLE_EQ(t.ceiling_fraction, 1.0);
  // The shape of the grid and the measurement settings pass through as reported.
  EXPECT_DOUBLE_EQ(t.waves, 2.25);
  EXPECT_DOUBLE_EQ(t.last_wave, 0.25);
  EXPECT_EQ(t.batch, 16);
  EXPECT_TRUE(t.l2_flushed);
  m.set_l2_flushed(false);  // timed with TimingOptions.no_l2_flush
  m.set_batch(1);
  EXPECT_FALSE(DeriveMetrics(c, 0, m, 1, 1, 0).l2_flushed);
  EXPECT_EQ(DeriveMetrics(c, 0, m, 1, 1, 0).batch, 1);
  m.set_registers(48);
  EXPECT_EQ(DeriveMetrics(c, 0, m, 1, 1, 0).registers, 48);  // the driver's word wins
  EXPECT_EQ(DeriveMetrics(c, 0, m, 1, 1, 0).ceiling_fraction, 0);
}

// The guided strategy (the default) on the same landscape: the best found while measuring a
// fraction of the space, and why the search stopped kept with the job.
TEST_F(TuningJobTest, GuidedFindsTheBestMeasuringAFractionAndSaysWhyItStopped) {
  request_.search = SearchSettings{};
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
  EXPECT_LE(r.trials.size(), 22u);  // 20 % of 108, rounded up
  EXPECT_EQ(r.space_size, 108);
  EXPECT_THAT(r.strategy, HasSubstr("guided:"));
  EXPECT_FALSE(r.stop_reason.empty());
  ASSERT_OK_AND_ASSIGN(store::Job job, store_->GetJob(r.entry.job_id));
  EXPECT_EQ(job.stop_reason, r.stop_reason);
  EXPECT_EQ(job.strategy, r.strategy);
}

// The job tells guided which candidates the compiler has already: on a flat landscape a
// key measures mostly what the template's key before it compiled (a compiler that forgets
// makes the baseline).
TEST_F(TuningJobTest, GuidedMeasuresWhatTheCompilerHasCachedFirst) {
  request_.search = SearchSettings{};
  request_.search.min_gain = 0;
  gpu_.script = [](const std::string& n) {
    return NameInts(n).size() == 2 ? OkMeasurement(1000) : Landscape(n);
  };
  // The share of the second key's trials that the first key measured (and so compiled).
  auto second_key_reuse = [&](bool remember) -> double {
    testing::FakeCompiler compiler;
    compiler.remember = remember;
    CompilePool pool(&compiler, 2);
    absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(":memory:");
    EXPECT_OK(store.status());
    const TuningEnv env{registry_.get(), &compiler, &pool, &gpu_, store->get(), nullptr};
    TuneRequest first = request_, second = request_;
    second.shape = {{"n", 2000}};
    absl::StatusOr<TuneResult> a = RunTuning(first, env);
    absl::StatusOr<TuneResult> b = RunTuning(second, env);
    EXPECT_OK(a.status());
    EXPECT_OK(b.status());
    if (!a.ok() || !b.ok()) return 0;
    std::set<Config> compiled;
    for (const store::Trial& t : a->trials) compiled.insert(t.config);
    int reused = 0;
    for (const store::Trial& t : b->trials) reused += compiled.count(t.config);
    return static_cast<double>(reused) / b->trials.size();
  };
  const double forgetting = second_key_reuse(false);
  const double remembering = second_key_reuse(true);
  EXPECT_GE(remembering, 0.75);
  EXPECT_GT(remembering, forgetting + 0.2);
}

TEST_F(TuningJobTest, ExhaustiveSaysItExhaustedTheSpace) {
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.stop_reason, "space exhausted");
  request_.search.budget = 5;
  request_.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(r, RunTuning(request_, Env()));
  EXPECT_EQ(r.stop_reason, "budget of 5 reached");
}

// A candidate at the roofline (the problem's bytes at the copy ceiling: 8000 bytes at
// 4000 GB/s is 2 ns) ends a guided search once its first sample (a quarter of the budget of
// 108) is measured; an exhaustive one goes on.
TEST_F(TuningJobTest, RooflineStopsAGuidedSearch) {
  gpu_.script = [](const std::string& n) {
    return NameInts(n) == std::vector<int64_t>{128, 2} ? OkMeasurement(2.0) : Landscape(n);
  };
  request_.search = SearchSettings{};
  request_.search.budget = 108;
  request_.search.min_gain = 0;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 128}, {"VEC", 2}}));
  EXPECT_THAT(r.stop_reason, HasSubstr("roofline: "));
  EXPECT_THAT(r.stop_reason, HasSubstr("BLOCK=128,VEC=2"));
  EXPECT_LT(r.trials.size(), 108u);
  EXPECT_GE(r.trials.size(), 27u);

  // At the bound from the first candidate on (the default config): still the first sample.
  gpu_.script = [](const std::string& n) { return OkMeasurement(2.0); };
  request_.shape = {{"n", 1500}};
  ASSERT_OK_AND_ASSIGN(r, RunTuning(request_, Env()));
  EXPECT_THAT(r.stop_reason, HasSubstr("roofline: "));
  EXPECT_EQ(r.trials.size(), 27u);

  request_.search.strategy = "exhaustive";
  request_.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(r, RunTuning(request_, Env()));
  EXPECT_EQ(r.trials.size(), 108u);
}

// A new key starts from its stored neighbours' winners: right after the default config, the
// neighbour's winner is measured.
TEST_F(TuningJobTest, GuidedWarmStartsFromTheNearestStoredKey) {
  request_.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(TuneResult neighbour, RunTuning(request_, Env()));
  const Config winner = neighbour.entry.config;

  request_.search = SearchSettings{};
  request_.shape = {{"n", 1000}};
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  ASSERT_OK_AND_ASSIGN(std::vector<store::Trial> order, store_->ListTrials(r.entry.job_id));
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order[1].config, winner) << ConfigString(order[1].config);

  // Without the warm start the neighbour's winner is not where the search starts.
  request_.search.warm_start = false;
  request_.shape = {{"n", 1500}};
  ASSERT_OK_AND_ASSIGN(r, RunTuning(request_, Env()));
  ASSERT_OK_AND_ASSIGN(order, store_->ListTrials(r.entry.job_id));
  ASSERT_GE(order.size(), 2u);
  EXPECT_FALSE(order[1].config == winner);
}

// Timing in rounds: random over 30 candidates times each briefly (screening), then the
// fastest third (10) again with the request's timing, then the final round's 3 x 3 runs, of
// which each finalist's promoted run is the first. The exhaustive reference times every
// candidate with the request's timing. Only the search's measurements check outputs: the
// leaders and finalists passed theirs, and are retimed.
TEST_F(TuningJobTest, TimingRoundsScreenEveryCandidateThenTimeTheLeadersInFull) {
  request_.search.strategy = "random";
  request_.search.budget = 30;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  ASSERT_EQ(r.trials.size(), 30u);
  ASSERT_EQ(gpu_.timings.size(), 30u + 10u + 6u);
  EXPECT_EQ(gpu_.retimes, 10 + 6);
  for (size_t i = 0; i < gpu_.timings.size(); ++i) {
    const v1::TimingOptions& t = gpu_.timings[i];
    if (i < 30) {
      EXPECT_EQ(t.max_repeats(), 10) << i;
      EXPECT_EQ(t.min_repeats(), 3) << i;
      EXPECT_EQ(t.time_cap_ms(), 100) << i;
    } else {
      EXPECT_EQ(t.max_repeats(), 0) << i;  // the worker's full default
    }
  }

  // A request's own timing is capped for screening, never raised.
  request_.shape = {{"n", 2000}};
  request_.timing.set_max_repeats(5);
  request_.timing.set_min_repeats(4);
  gpu_.timings.clear();
  ASSERT_OK(RunTuning(request_, Env()).status());
  EXPECT_EQ(gpu_.timings.front().max_repeats(), 5);
  EXPECT_EQ(gpu_.timings.front().min_repeats(), 3);
  EXPECT_EQ(gpu_.timings.back().max_repeats(), 5);
  EXPECT_EQ(gpu_.timings.back().min_repeats(), 4);

  for (const char* no_rounds : {"exhaustive", "random off"}) {
    request_ = TuneRequest{};
    request_.template_name = "tiny";
    request_.dtype = DType::kF32;
    request_.shape = {{"n", std::string(no_rounds) == "exhaustive" ? 3000 : 4000}};
    request_.search.strategy = std::string(no_rounds) == "exhaustive" ? "exhaustive" : "random";
    request_.search.budget = 12;
    request_.timing_rounds = std::string(no_rounds) == "exhaustive";  // exhaustive ignores it
    gpu_.timings.clear();
    gpu_.retimes = 0;
    ASSERT_OK(RunTuning(request_, Env()).status());
    // No promotion: besides the search's 12, the final round's 3 finalists x 3 runs, less
    // those the search made with the decision's batch (AFinalistBatchedApart... below).
    EXPECT_EQ(gpu_.timings.size(), 12u + gpu_.retimes) << no_rounds;
    EXPECT_GE(gpu_.retimes, 6) << no_rounds;
    EXPECT_LE(gpu_.retimes, 9) << no_rounds;
    for (const v1::TimingOptions& t : gpu_.timings) EXPECT_EQ(t.max_repeats(), 0) << no_rounds;
  }
}

// The runs that decide the winner share one batch, the one the worker chooses for the
// fastest trial of the search (1200 ns: 17 runs fill the 20 us sample); the screening runs
// leave each candidate its own.
TEST_F(TuningJobTest, TheLeadersAndFinalistsShareOneBatch) {
  request_.search.strategy = "random";
  request_.search.budget = 30;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  ASSERT_EQ(gpu_.timings.size(), 30u + 10u + 6u);
  ASSERT_EQ(r.trials.front().metrics.time_ns, 1200);  // this seed's fastest screening
  for (size_t i = 0; i < gpu_.timings.size(); ++i) {
    EXPECT_EQ(gpu_.timings[i].batch(), i < 30 ? 0 : 17) << i;
  }
  EXPECT_EQ(r.entry.metrics.batch, 17);

  // decision_min_sample_us: the deciding runs fill 100 us samples (84 runs of 1200 ns) with
  // that sample length; the screening keeps the request's.
  request_.shape = {{"n", 2000}};
  request_.decision_min_sample_us = 100;
  gpu_.timings.clear();
  ASSERT_OK_AND_ASSIGN(r, RunTuning(request_, Env()));
  ASSERT_EQ(gpu_.timings.size(), 30u + 10u + 6u);
  for (size_t i = 0; i < gpu_.timings.size(); ++i) {
    EXPECT_EQ(gpu_.timings[i].batch(), i < 30 ? 0 : 84) << i;
    EXPECT_EQ(gpu_.timings[i].min_sample_us(), i < 30 ? 0 : 100) << i;
  }
  EXPECT_EQ(r.entry.metrics.batch, 84);
}

// Exhaustive's finalists: the six knob variants of BLOCK=256,VEC=4 (1100 ns, batched 19 in
// the search as the decision is) and two of BLOCK=512,VEC=4 (1150 ns: batched 18 in the
// search). The first six count their search run; the two are timed all three times.
TEST_F(TuningJobTest, AFinalistBatchedApartFromTheDecisionIsTimedAgainInFull) {
  gpu_.script = [](const std::string& n) {
    if (NameInts(n) == std::vector<int64_t>{512, 4}) return OkMeasurement(1150);
    return Landscape(n);
  };
  request_.finalists = 8;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(gpu_.retimes, 6 * 2 + 2 * 3);
  EXPECT_EQ(gpu_.measures, 108 + 6 * 2 + 2 * 3);
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
}

// Six candidates (one param point's knob variants) that look fastest only in their brief
// screening would take all three final-round places; timed again in full with the leading
// third, they fall back, and the real best wins.
TEST_F(TuningJobTest, TheLeadersFullTimingsDecideNotTheirScreening) {
  gpu_.script = [this](const std::string& n) {
    const bool screening = gpu_.timings.back().max_repeats() == 10;
    if (NameInts(n) == std::vector<int64_t>{128, 2}) return OkMeasurement(screening ? 500.0 : 5000.0);
    return Landscape(n);
  };
  request_.search.strategy = "random";
  request_.search.budget = 108;
  ASSERT_OK_AND_ASSIGN(TuneResult r, RunTuning(request_, Env()));
  EXPECT_EQ(r.entry.config.params, (std::map<std::string, int64_t>{{"BLOCK", 256}, {"VEC", 4}}));
  EXPECT_EQ(r.entry.metrics.time_ns, 1100);
}

}  // namespace
}  // namespace ktune
