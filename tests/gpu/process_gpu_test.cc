// ProcessGpu against fake_ktune_worker (tests/gpu/fake_worker_main.cc): the protocol round
// trips, and every way a worker can fail a candidate (hang, crash, exit, poisoned context,
// garbage) becomes an outcome plus a restart, while failures to come back make the Gpu
// unusable with a reason. No GPU needed.
#include "server/gpu/process_gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::IsOk;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using Clock = std::chrono::steady_clock;

constexpr const char* kFakeWorker = KTUNE_BINARY_DIR "/bin/fake_ktune_worker";

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

v1::KernelBinary Kernel(const std::string& lowered_name) {
  v1::KernelBinary k;
  k.set_cubin("not a real cubin");
  v1::LaunchBinary* l = k.add_launches();
  l->set_lowered_name(lowered_name);
  for (int i = 0; i < 3; ++i) {
    l->add_grid(1);
    l->add_block(i == 0 ? 128 : 1);
  }
  l->add_args(0);
  l->add_args(1);
  return k;
}

v1::Problem MakeProblem(uint64_t seed, const std::string& reference = "reference") {
  v1::Problem p;
  v1::ArgSpec* in = p.add_args();
  in->set_name("x");
  in->set_is_buffer(true);
  in->set_dtype("f32");
  in->set_count(1024);
  v1::ArgSpec* out = p.add_args();
  out->set_name("y");
  out->set_is_buffer(true);
  out->set_dtype("bf16");
  out->set_count(1024);
  *p.mutable_reference() = Kernel(reference);
  p.set_atol(1e-3);
  p.set_rtol(1e-3);
  p.set_seed(seed);
  return p;
}

// Small time cap so the per-candidate deadline is the test's min_deadline_ms.
v1::TimingOptions FastTiming() {
  v1::TimingOptions t;
  t.set_time_cap_ms(1);
  return t;
}

bool NoChildrenLeft() {
  int status;
  return ::waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

// True when `pid` is gone or a zombie (reparented to an init that may not reap it).
bool ProcessDead(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z';
}

class ProcessGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = absl::StrCat(::testing::TempDir(), "/process_gpu_test_", ::getpid(), "_",
                        absl::StrReplaceAll(info->name(), {{"/", "_"}}));
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir_, "' && mkdir -p '", dir_, "'").c_str()), 0);
    log_ = dir_ + "/requests.log";
    Setenv("KTUNE_WORKER_ENV", "FAKE_WORKER_");  // the worker's environment is scrubbed
    Setenv("FAKE_WORKER_LOG", log_);
    options_.worker_path = kFakeWorker;
    options_.min_deadline_ms = 300;
    options_.hello_deadline_ms = 5000;
    options_.problem_deadline_ms = 5000;
    options_.ceiling_deadline_ms = 5000;
    options_.shutdown_grace_ms = 500;
  }

  void TearDown() override {
    for (const std::string& name : env_) ::unsetenv(name.c_str());
    (void)std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
    EXPECT_TRUE(NoChildrenLeft()) << "a worker was left unreaped";
  }

  void Setenv(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    env_.push_back(name);
  }

  std::unique_ptr<Gpu> Start() {
    absl::StatusOr<std::unique_ptr<Gpu>> gpu = StartProcessGpu(options_);
    EXPECT_THAT(gpu.status(), IsOk());
    return gpu.ok() ? *std::move(gpu) : nullptr;
  }

  // The fake's request log: (pid, request) pairs in order.
  std::vector<std::pair<std::string, std::string>> Requests() const {
    std::vector<std::pair<std::string, std::string>> out;
    std::ifstream in(log_);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      if (parts.size() == 2) out.emplace_back(parts[0], parts[1]);
    }
    return out;
  }

  std::set<std::string> PidsThatGot(const std::string& request) const {
    std::set<std::string> pids;
    for (const auto& [pid, r] : Requests()) {
      if (r == request) pids.insert(pid);
    }
    return pids;
  }

  std::string dir_;
  std::string log_;
  std::vector<std::string> env_;
  ProcessGpuOptions options_;
};

TEST_F(ProcessGpuTest, InfoRoundTripSaysHelloOnce) {
  options_.ordinal = 2;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::DeviceInfo info, gpu->Info());
  EXPECT_EQ(info.name(), "Fake GPU");
  EXPECT_EQ(info.ordinal(), 2);
  EXPECT_EQ(info.sm_count(), 4);
  EXPECT_EQ(info.cc_major(), 9);
  EXPECT_EQ(info.uuid(), "GPU-fake-2");
  ASSERT_OK_AND_ASSIGN(v1::DeviceInfo again, gpu->Info());
  EXPECT_EQ(again.uuid(), info.uuid());
  EXPECT_THAT(PidsThatGot("hello"), SizeIs(1));
}

// The worker runs untrusted kernels: it used to get ktuned's whole environment.
TEST_F(ProcessGpuTest, TheWorkersEnvironmentIsScrubbed) {
  const char* env[] = {"PATH=/usr/bin",          "AWS_SECRET_ACCESS_KEY=s3cret",
                       "CUDA_VISIBLE_DEVICES=1", "LC_ALL=C",
                       "HTTPS_PROXY=http://p",   "KTUNE_WORKER_ENV=MY_, OTHER_",
                       "MY_KNOB=7",              "NVIDIA_DRIVER_CAPABILITIES=compute",
                       "PATHOLOGICAL=1",         nullptr};
  EXPECT_THAT(WorkerEnvironment(env),
              ::testing::ElementsAre("PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=1", "LC_ALL=C",
                                     "KTUNE_WORKER_ENV=MY_, OTHER_", "MY_KNOB=7",
                                     "NVIDIA_DRIVER_CAPABILITIES=compute"));
  // And through a spawned worker: a secret of the parent's does not arrive.
  Setenv("KTUNE_TEST_SECRET_CHECK", "1");
  Setenv("SOME_SECRET", "hunter2");
  Setenv("FAKE_WORKER_ENV_TO", dir_ + "/env");
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->Info().status());
  std::ifstream in(dir_ + "/env");
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) names.insert(line.substr(0, line.find('=')));
  EXPECT_TRUE(names.count("KTUNE_TEST_SECRET_CHECK"));
  EXPECT_TRUE(names.count("FAKE_WORKER_LOG"));
  EXPECT_FALSE(names.count("SOME_SECRET"));
}

// The worker runs untrusted kernels: it used to inherit every descriptor ktuned had open
// without O_CLOEXEC (a library's file, a socket). Now it gets stdin, stdout, stderr only.
TEST_F(ProcessGpuTest, TheWorkerInheritsOnlyStdio) {
  const int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC, on purpose
  ASSERT_GE(leaked, 3);
  Setenv("FAKE_WORKER_FDS", dir_ + "/fds");
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->Info().status());
  ::close(leaked);
  std::ifstream in(dir_ + "/fds");
  std::set<std::string> fds;
  for (std::string line; std::getline(in, line);) fds.insert(line);
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2"}));
}

TEST_F(ProcessGpuTest, NoDriverIsUnavailableWithTheWorkersReason) {
  Setenv("FAKE_WORKER_NO_DRIVER", "1");
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  EXPECT_THAT(gpu->Info(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no CUDA driver: libcuda.so.1")));
  // Cached: later calls say the same without another Hello.
  EXPECT_THAT(gpu->Info(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no CUDA driver")));
  EXPECT_THAT(gpu->MeasureCeiling(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no CUDA driver")));
  EXPECT_THAT(gpu->SetProblem(MakeProblem(1)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no CUDA driver")));
  EXPECT_THAT(PidsThatGot("hello"), SizeIs(1));
}

TEST_F(ProcessGpuTest, HelloThatNeverComesIsUnavailable) {
  Setenv("FAKE_WORKER_HELLO_DELAY_MS", "10000");
  options_.hello_deadline_ms = 200;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  const auto start = Clock::now();
  EXPECT_THAT(gpu->Info(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no answer to Hello")));
  EXPECT_LT(MsSince(start), 2000);
}

TEST_F(ProcessGpuTest, MissingWorkerIsNotFound) {
  options_.worker_path = dir_ + "/no-such-worker";
  EXPECT_THAT(StartProcessGpu(options_).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-worker")));
  options_.worker_path = "";
  EXPECT_THAT(StartProcessGpu(options_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker_path")));
}

TEST_F(ProcessGpuTest, MeasureCeiling) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::Ceiling c, gpu->MeasureCeiling());
  EXPECT_EQ(c.copy_gbps(), 1000);
  // Measured once: the second answer is the first one, without asking the worker.
  ASSERT_OK_AND_ASSIGN(v1::Ceiling again, gpu->MeasureCeiling());
  EXPECT_EQ(again.copy_gbps(), 1000);
  EXPECT_THAT(PidsThatGot("ceiling"), SizeIs(1));
  int asked = 0;
  for (const auto& [pid, request] : Requests()) asked += request == "ceiling";
  EXPECT_EQ(asked, 1);
}

TEST_F(ProcessGpuTest, MeasureBeforeSetProblemIsFailedPrecondition) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  EXPECT_THAT(gpu->Measure(Kernel("ok"), FastTiming()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("SetProblem")));
}

TEST_F(ProcessGpuTest, SetProblemThenMeasureOk) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::ProblemReady ready, gpu->SetProblem(MakeProblem(42)));
  EXPECT_EQ(ready.reference_time_ns(), 5000);
  EXPECT_FALSE(ready.output_digest().empty());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("ok_1234"), FastTiming()));
  EXPECT_EQ(m.outcome(), "ok");
  EXPECT_EQ(m.time_ns(), 1234);
  ASSERT_OK_AND_ASSIGN(v1::Measurement w, gpu->Measure(Kernel("wrong"), FastTiming()));
  EXPECT_EQ(w.outcome(), "wrong_result");
  EXPECT_THAT(w.detail(), HasSubstr("reference 2.5"));
  // One worker did all of it.
  EXPECT_THAT(PidsThatGot("measure ok_1234"), SizeIs(1));
  EXPECT_EQ(PidsThatGot("measure ok_1234"), PidsThatGot("hello"));
}

TEST_F(ProcessGpuTest, SlowButWithinTheDeadlineIsOk) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(1)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("slow_50"), FastTiming()));
  EXPECT_EQ(m.outcome(), "ok");
}

TEST_F(ProcessGpuTest, HangTimesOutAtTheDeadlineAndTheNextMeasureWorks) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(7)).status());
  const auto start = Clock::now();
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("hang"), FastTiming()));
  const int64_t took = MsSince(start);
  EXPECT_EQ(m.outcome(), "timed_out");
  EXPECT_THAT(m.detail(), HasSubstr("300 ms"));
  EXPECT_GE(took, 300);
  EXPECT_LT(took, 1500);

  ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_77"), FastTiming()));
  EXPECT_EQ(next.outcome(), "ok");
  EXPECT_EQ(next.time_ns(), 77);
  // A second worker got the problem again before measuring.
  EXPECT_THAT(PidsThatGot("set_problem 7"), SizeIs(2));
  EXPECT_THAT(PidsThatGot("hello"), SizeIs(2));
  const std::set<std::string> hung = PidsThatGot("measure hang");
  const std::set<std::string> ok = PidsThatGot("measure ok_77");
  ASSERT_THAT(hung, SizeIs(1));
  ASSERT_THAT(ok, SizeIs(1));
  EXPECT_NE(*hung.begin(), *ok.begin());
  EXPECT_EQ(PidsThatGot("set_problem 7"), (std::set<std::string>{*hung.begin(), *ok.begin()}));
}

TEST_F(ProcessGpuTest, KillingAHungWorkerKillsWhatItStarted) {
  const std::string pid_file = dir_ + "/child.pid";
  Setenv("FAKE_WORKER_PID_FILE", pid_file);
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(7)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("hang_child"), FastTiming()));
  EXPECT_EQ(m.outcome(), "timed_out");
  std::ifstream in(pid_file);
  pid_t grandchild = 0;
  in >> grandchild;
  ASSERT_GT(grandchild, 0);
  const auto start = Clock::now();
  while (!ProcessDead(grandchild) && MsSince(start) < 2000) ::usleep(1000);
  EXPECT_TRUE(ProcessDead(grandchild)) << "pid " << grandchild << " outlived its group";
}

struct CrashCase {
  std::string name;
  std::string detail;  // expected in Measurement.detail
};

void PrintTo(const CrashCase& c, std::ostream* os) { *os << c.name << ": " << c.detail; }

class ProcessGpuCrashTest : public ProcessGpuTest,
                            public ::testing::WithParamInterface<CrashCase> {};

TEST_P(ProcessGpuCrashTest, IsCrashedAndTheNextMeasureWorks) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(9)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel(GetParam().name), FastTiming()));
  EXPECT_EQ(m.outcome(), "crashed");
  EXPECT_THAT(m.detail(), HasSubstr(GetParam().detail));
  EXPECT_EQ(m.time_ns(), 0);

  ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_5"), FastTiming()));
  EXPECT_EQ(next.outcome(), "ok");
  EXPECT_THAT(PidsThatGot("set_problem 9"), SizeIs(2));
}

INSTANTIATE_TEST_SUITE_P(Fates, ProcessGpuCrashTest,
                         ::testing::Values(CrashCase{"crash", "killed by signal 6"},
                                           CrashCase{"exit", "exited with status 1"},
                                           CrashCase{"poison", "CUDA_ERROR_ILLEGAL_ADDRESS"},
                                           CrashCase{"poison", "exited with status 3"},
                                           CrashCase{"error_poisoned", "CUDA_ERROR_LAUNCH_FAILED"}),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return absl::StrCat(info.param.name, info.index);
                         });

TEST_F(ProcessGpuTest, AWorkerLeavingAfterItsAnswerIsNotBlamedOnTheNextCandidate) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(3)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("poison_silent"), FastTiming()));
  EXPECT_EQ(m.outcome(), "launch_failed");
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_5"), FastTiming()));
    EXPECT_EQ(next.outcome(), "ok") << next.detail();
  }
  EXPECT_THAT(PidsThatGot("set_problem 3"), SizeIs(2));
}

TEST_F(ProcessGpuTest, AWorkerThatLeavesOnTheNextRequestIsNotBlamedForIt) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(3)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("poison_late"), FastTiming()));
  EXPECT_EQ(m.outcome(), "launch_failed");
  // The worker takes this candidate's request and exits 3 without an answer: the
  // candidate is retried once on a fresh worker instead of being called crashed.
  ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_5"), FastTiming()));
  EXPECT_EQ(next.outcome(), "ok") << next.detail();
  EXPECT_THAT(PidsThatGot("set_problem 3"), SizeIs(2));
  EXPECT_THAT(PidsThatGot("measure ok_5"), SizeIs(1));
}

TEST_F(ProcessGpuTest, GarbageIsInternalAndTheNextMeasureWorks) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(4)).status());
  EXPECT_THAT(gpu->Measure(Kernel("garbage"), FastTiming()),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("does not parse")));
  ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_5"), FastTiming()));
  EXPECT_EQ(next.outcome(), "ok");
  EXPECT_THAT(PidsThatGot("set_problem 4"), SizeIs(2));
}

TEST_F(ProcessGpuTest, WorkerErrorPassesThroughAndKeepsTheWorker) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(4)).status());
  EXPECT_THAT(gpu->Measure(Kernel("error"), FastTiming()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("argument 7 of 2")));
  ASSERT_OK_AND_ASSIGN(v1::Measurement next, gpu->Measure(Kernel("ok_5"), FastTiming()));
  EXPECT_EQ(next.outcome(), "ok");
  EXPECT_THAT(PidsThatGot("hello"), SizeIs(1));
}

TEST_F(ProcessGpuTest, DigestMismatchAfterRestartMakesTheGpuUnusable) {
  const std::string salt = dir_ + "/salt";
  Setenv("FAKE_WORKER_SALT_FILE", salt);
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(5)).status());
  std::ofstream(salt) << "the GPU went bad";
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("crash"), FastTiming()));
  EXPECT_EQ(m.outcome(), "crashed");
  EXPECT_THAT(
      gpu->Measure(Kernel("ok"), FastTiming()),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("no longer reproduces a known-good kernel")));
  // For good, for every method.
  EXPECT_THAT(gpu->Measure(Kernel("ok"), FastTiming()),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("is unusable")));
  EXPECT_THAT(gpu->SetProblem(MakeProblem(6)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("digest")));
  EXPECT_THAT(gpu->Info(), StatusIs(absl::StatusCode::kInternal, HasSubstr("digest")));
  EXPECT_THAT(PidsThatGot("measure ok"), SizeIs(0));
}

TEST_F(ProcessGpuTest, RestartLimitIsResourceExhaustedUntilTheNextProblem) {
  options_.max_restarts_per_problem = 2;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->SetProblem(MakeProblem(8)).status());
  for (int i = 0; i < 3; ++i) {  // the first worker, then two restarts
    ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("exit"), FastTiming()));
    EXPECT_EQ(m.outcome(), "crashed");
  }
  EXPECT_THAT(gpu->Measure(Kernel("ok"), FastTiming()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("restarted 2 times")));
  // A new problem starts a new budget.
  ASSERT_OK(gpu->SetProblem(MakeProblem(10)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("ok_9"), FastTiming()));
  EXPECT_EQ(m.outcome(), "ok");
}

TEST_F(ProcessGpuTest, HungReferenceIsDeadlineExceededAndANewProblemWorks) {
  options_.problem_deadline_ms = 300;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  EXPECT_THAT(gpu->SetProblem(MakeProblem(1, "hang")),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("300 ms")));
  EXPECT_THAT(gpu->Measure(Kernel("ok"), FastTiming()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("SetProblem")));
  ASSERT_OK(gpu->SetProblem(MakeProblem(2)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("ok"), FastTiming()));
  EXPECT_EQ(m.outcome(), "ok");
}

TEST_F(ProcessGpuTest, FaultingReferenceIsTheWorkersErrorAndANewProblemWorks) {
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  EXPECT_THAT(gpu->SetProblem(MakeProblem(1, "fault")),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("reference faulted")));
  ASSERT_OK(gpu->SetProblem(MakeProblem(2)).status());
  ASSERT_OK_AND_ASSIGN(v1::Measurement m, gpu->Measure(Kernel("ok"), FastTiming()));
  EXPECT_EQ(m.outcome(), "ok");
}

TEST_F(ProcessGpuTest, DestroyingLeavesNoZombies) {
  {
    auto gpu = Start();
    ASSERT_NE(gpu, nullptr);
    ASSERT_OK(gpu->SetProblem(MakeProblem(11)).status());
    for (const char* fate : {"crash", "hang", "exit", "poison", "garbage", "ok"}) {
      (void)gpu->Measure(Kernel(fate), FastTiming());
    }
    EXPECT_THAT(PidsThatGot("hello"), SizeIs(6));
  }
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(ProcessGpuTest, DestructorKillsAWorkerThatIgnoresEndOfFile) {
  Setenv("FAKE_WORKER_IGNORE_EOF", "1");
  options_.shutdown_grace_ms = 200;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->Info().status());
  const auto start = Clock::now();
  gpu.reset();
  const int64_t took = MsSince(start);
  EXPECT_GE(took, 200);
  EXPECT_LT(took, 1500);
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(ProcessGpuTest, DestructorOfAHealthyWorkerIsQuick) {
  options_.shutdown_grace_ms = 5000;
  auto gpu = Start();
  ASSERT_NE(gpu, nullptr);
  ASSERT_OK(gpu->Info().status());
  const auto start = Clock::now();
  gpu.reset();
  EXPECT_LT(MsSince(start), 1000);  // it exits on end of file, well before the grace
}

TEST(MeasureDeadlineTest, Formula) {
  ProcessGpuOptions o;
  o.min_deadline_ms = 1000;
  v1::TimingOptions t;  // all defaults: cap 2000 ms, warmup 3, max_repeats 200
  // 2000 + 20 * 0.005 ms * 213 = 2021.3 -> 2022.
  EXPECT_EQ(MeasureDeadlineMs(o, t, 5000, 0), 2022);
  // 1 GiB of buffers adds 4 ns a byte: 4294.97 ms.
  EXPECT_EQ(MeasureDeadlineMs(o, t, 0, int64_t{1} << 30), 2000 + 4295);
  // A 10 ms reference: 2000 + 20 * 10 * 213.
  EXPECT_EQ(MeasureDeadlineMs(o, t, 10e6, 0), 2000 + 42600);
  t.set_time_cap_ms(1);
  t.set_warmup(5);
  t.set_max_repeats(20);
  EXPECT_EQ(MeasureDeadlineMs(o, t, 0, 0), 1000);  // the floor
  o.min_deadline_ms = 300;
  // 1 + 20 * 1 ms * (5 + 20 + 10) = 701.
  EXPECT_EQ(MeasureDeadlineMs(o, t, 1e6, 0), 701);
  // Nonsense stays bounded.
  EXPECT_EQ(MeasureDeadlineMs(o, t, 1e300, 0), 24LL * 3600 * 1000);
}

}  // namespace
}  // namespace ktune
