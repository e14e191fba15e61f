// ktune-worker on a real GPU (label `gpu`): kernels compiled here with NVRTC, checked against
// a reference and timed. Every test skips, saying why, when Hello finds no driver or GPU.
//
// A faulting candidate poisons its process's CUDA context for good (every later driver call
// fails), so the crash test drives the built ktune-worker over pipes, as the parent does;
// everything else runs the session in this process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ktune/v1/worker.pb.h"
#include "server/compile/compiler.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/worker/device_info.h"
#include "server/gpu/framing.h"
#include "server/worker/host_buffers.h"
#include "server/worker/worker_session.h"
#include "tests/worker/worker_process.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::Worker;
using ::testing::AllOf;
using ::testing::Ge;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::MatchesRegex;

// out = 2 * x, right and wrong in every way the worker must tell apart.
constexpr char kSource[] = R"(
extern "C" __global__ void twice_ref(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}
// A candidate: grid-stride, several elements per thread.
extern "C" __global__ void twice_stride(const float* __restrict__ x, float* __restrict__ out,
                                        int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = x[i] + x[i];
  }
}
extern "C" __global__ void twice_off_by_one_at_77(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i] + (i == 77 ? 1.0f : 0.0f);
}
// Leaves the last element unwritten: only the poison catches it.
extern "C" __global__ void twice_skips_last(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n - 1) out[i] = 2.0f * x[i];
}
// Writes through a null pointer: CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error.
extern "C" __global__ void twice_faults(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) reinterpret_cast<float*>(8)[i] = 2.0f * x[i];
}
// At most 128 threads per block.
extern "C" __global__ void __launch_bounds__(128) twice_small_blocks(const float* x, float* out,
                                                                       int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}
// In place: y = 2 * y + 1 (an INOUT buffer must be refilled before every run).
extern "C" __global__ void affine_inplace(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * y[i] + 1.0f;
}
)";

const std::vector<std::string> kKernels = {
    "twice_ref",    "twice_stride",       "twice_off_by_one_at_77", "twice_skips_last",
    "twice_faults", "twice_small_blocks", "affine_inplace"};

v1::Request HelloRequest() {
  v1::Request r;
  r.mutable_hello()->set_ordinal(0);
  return r;
}

v1::LaunchBinary MakeLaunch(const std::string& name, uint32_t grid, uint32_t block,
                            std::vector<int> args, uint32_t shared = 0) {
  v1::LaunchBinary l;
  l.set_lowered_name(name);
  l.add_grid(grid);
  l.add_grid(1);
  l.add_grid(1);
  l.add_block(block);
  l.add_block(1);
  l.add_block(1);
  l.set_shared_bytes(shared);
  for (int a : args) l.add_args(a);
  return l;
}

class WorkerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    session_ = NewWorkerSession();
    const v1::Response hello = session_->Handle(HelloRequest());
    if (hello.has_error() &&
        hello.error().code() == static_cast<int>(absl::StatusCode::kUnavailable)) {
      GTEST_SKIP() << "no CUDA driver or GPU: " << hello.error().message();
    }
    ASSERT_TRUE(hello.has_device()) << hello.DebugString();
    info_ = hello.device();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler, NewNvrtcCompiler(NvrtcOptions{}));
    CompileRequest request;
    request.source = kSource;
    request.source_name = "worker_gpu_test.cu";
    request.name_expressions = kKernels;
    request.options = {absl::StrCat("--gpu-architecture=sm_", info_.cc_major(), info_.cc_minor())};
    ASSERT_OK_AND_ASSIGN(CompileResult compiled, compiler->Compile(request));
    ASSERT_TRUE(compiled.ok) << compiled.log;
    cubin_ = compiled.cubin;
    for (size_t i = 0; i < kKernels.size(); ++i) {
      lowered_[kKernels[i]] = compiled.kernels[i].lowered_name;
    }
  }

  v1::KernelBinary Binary(const std::string& kernel, uint32_t grid, uint32_t block,
                          std::vector<int> args = {0, 1, 2}, uint32_t shared = 0) {
    v1::KernelBinary b;
    b.set_cubin(cubin_);
    *b.add_launches() = MakeLaunch(lowered_.at(kernel), grid, block, std::move(args), shared);
    return b;
  }

  // out = 2 * x over n floats: args x (INPUT), out (OUTPUT), n (i32).
  v1::Problem TwiceProblem(int n, uint64_t seed = 1) {
    v1::Problem p;
    v1::ArgSpec* x = p.add_args();
    x->set_name("x");
    x->set_is_buffer(true);
    x->set_dtype("f32");
    x->set_count(n);
    x->set_role(v1::Buffer::INPUT);
    x->mutable_fill()->set_kind(v1::Fill::UNIFORM);
    x->mutable_fill()->set_lo(-1);
    x->mutable_fill()->set_hi(1);
    v1::ArgSpec* out = p.add_args();
    out->set_name("out");
    out->set_is_buffer(true);
    out->set_dtype("f32");
    out->set_count(n);
    out->set_role(v1::Buffer::OUTPUT);
    v1::ArgSpec* count = p.add_args();
    count->set_name("n");
    count->set_scalar_type("i32");
    count->set_int_value(n);
    *p.mutable_reference() = Binary("twice_ref", (n + 255) / 256, 256);
    p.set_atol(1e-6);
    p.set_rtol(1e-6);
    p.set_seed(seed);
    return p;
  }

  v1::ProblemReady SetProblem(const v1::Problem& problem) {
    v1::Request r;
    *r.mutable_set_problem() = problem;
    const v1::Response response = session_->Handle(r);
    EXPECT_TRUE(response.has_problem_ready()) << response.DebugString();
    return response.problem_ready();
  }

  v1::Measurement Measure(const v1::KernelBinary& candidate, v1::TimingOptions timing = {},
                          bool skip_check = false) {
    v1::Request r;
    *r.mutable_measure()->mutable_candidate() = candidate;
    *r.mutable_measure()->mutable_timing() = timing;
    r.mutable_measure()->set_skip_check(skip_check);
    const v1::Response response = session_->Handle(r);
    EXPECT_TRUE(response.has_measurement()) << response.DebugString();
    EXPECT_FALSE(session_->poisoned());
    return response.measurement();
  }

  std::unique_ptr<WorkerSession> session_;
  v1::DeviceInfo info_;
  std::string cubin_;
  std::map<std::string, std::string> lowered_;
};

constexpr int kN = (1 << 22) + 3;  // 16 MiB per buffer, and not a multiple of any block

TEST_F(WorkerGpuTest, DescribesTheDevice) {
  EXPECT_FALSE(info_.name().empty());
  EXPECT_GE(info_.cc_major(), 7);
  EXPECT_GT(info_.sm_count(), 0);
  EXPECT_GT(info_.l2_bytes(), 0);
  EXPECT_GT(info_.memory_bus_bits(), 0);
  EXPECT_GT(info_.memory_clock_khz(), 0);
  EXPECT_GT(info_.total_memory_bytes(), int64_t{1} << 30);
  EXPECT_GE(info_.max_threads_per_sm(), 1024);
  EXPECT_GE(info_.max_threads_per_block(), 1024);
  EXPECT_GE(info_.max_shared_per_block_optin(), 48 * 1024);
  EXPECT_GT(info_.registers_per_sm(), 0);
  EXPECT_THAT(info_.uuid(),
              MatchesRegex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
  EXPECT_THAT(info_.driver_version(), MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_THAT(DeviceModelKey(info_), HasSubstr(absl::StrCat("|sm_", info_.cc_major())));
  // Hello again: the same device.
  const v1::Response again = session_->Handle(HelloRequest());
  ASSERT_TRUE(again.has_device());
  EXPECT_EQ(again.device().uuid(), info_.uuid());
}

TEST_F(WorkerGpuTest, CopyCeiling) {
  v1::Request r;
  r.mutable_ceiling();
  const v1::Response response = session_->Handle(r);
  ASSERT_TRUE(response.has_ceiling()) << response.DebugString();
  std::printf("copy ceiling: %.0f GB/s, IQR %.1f GB/s\n", response.ceiling().copy_gbps(),
              response.ceiling().spread_gbps());
  EXPECT_GT(response.ceiling().copy_gbps(), 100);
  EXPECT_GE(response.ceiling().spread_gbps(), 0);
  if (absl::StrContains(info_.name(), "H200")) {
    EXPECT_GT(response.ceiling().copy_gbps(), 1000);  // the GPU test host measures about 4250
  }
}

TEST_F(WorkerGpuTest, CopyCeilingRejectsNegativeFields) {
  for (const char* field : {"bytes", "repeats"}) {
    v1::Request r;
    v1::MeasureCeiling* m = r.mutable_ceiling();
    if (std::string(field) == "bytes") m->set_bytes(-1);
    if (std::string(field) == "repeats") m->set_repeats(-1);
    const v1::Response response = session_->Handle(r);
    ASSERT_TRUE(response.has_error()) << field;
    EXPECT_THAT(response.error().message(), HasSubstr(absl::StrCat("ceiling.", field))) << field;
  }
  // The session still answers.
  v1::Request ok;
  ok.mutable_ceiling()->set_bytes(int64_t{64} << 20);
  ok.mutable_ceiling()->set_repeats(2);
  EXPECT_TRUE(session_->Handle(ok).has_ceiling());
}

TEST_F(WorkerGpuTest, ProblemDigestIsReproducible) {
  const v1::ProblemReady a = SetProblem(TwiceProblem(kN, 7));
  EXPECT_GT(a.reference_time_ns(), 0);
  EXPECT_THAT(a.output_digest(), MatchesRegex("[0-9a-f]{64}"));
  const v1::ProblemReady b = SetProblem(TwiceProblem(kN, 7));
  EXPECT_EQ(a.output_digest(), b.output_digest());
  const v1::ProblemReady c = SetProblem(TwiceProblem(kN, 8));
  EXPECT_NE(a.output_digest(), c.output_digest());
}

TEST_F(WorkerGpuTest, CorrectCandidateIsTimed) {
  SetProblem(TwiceProblem(kN));
  const v1::Measurement m = Measure(Binary("twice_stride", info_.sm_count() * 4, 256));
  EXPECT_EQ(m.outcome(), "ok") << m.detail();
  std::printf("%s\n", m.ShortDebugString().c_str());
  EXPECT_GT(m.time_ns(), 0);
  EXPECT_GE(m.spread_ns(), 0);
  EXPECT_GE(m.repeats(), 1);
  EXPECT_GE(m.batch(), 1);
  EXPECT_TRUE(m.l2_flushed());
  EXPECT_GT(m.registers(), 0);
  EXPECT_GT(m.blocks_per_sm(), 0);
  EXPECT_THAT(m.occupancy(), AllOf(Gt(0.0), Le(1.0)));
  EXPECT_GT(m.waves(), 0);
  EXPECT_THAT(m.last_wave(), AllOf(Gt(0.0), Le(1.0)));
  EXPECT_EQ(m.mismatches(), 0);
  EXPECT_LE(m.max_abs_error(), 1e-6);
  // 2 x 16 MiB moved: well under a millisecond on any recent GPU, far above 0.
  EXPECT_LT(m.time_ns(), 5e6);
}

TEST_F(WorkerGpuTest, ShortKernelsAreTimedInBatches) {
  SetProblem(TwiceProblem(1000));
  v1::TimingOptions timing;
  timing.set_min_sample_us(50);
  const v1::Measurement m = Measure(Binary("twice_ref", 4, 256), timing);
  EXPECT_EQ(m.outcome(), "ok") << m.detail();
  std::printf("%s\n", m.ShortDebugString().c_str());
  EXPECT_GT(m.batch(), 1);  // a 1000-element kernel takes a few microseconds
  EXPECT_GT(m.time_ns(), 0);
  EXPECT_LT(m.time_ns(), 50e3);
}

// A requested batch is the candidate's, whatever its own would be, until a sample of it
// would pass 4 x min_sample_us: then the kernel gets its own.
TEST_F(WorkerGpuTest, RequestedBatchIsUsedUnlessItsSampleIsTooLong) {
  SetProblem(TwiceProblem(1000));
  v1::TimingOptions timing;
  const v1::Measurement own = Measure(Binary("twice_ref", 4, 256), timing);
  ASSERT_EQ(own.outcome(), "ok") << own.detail();
  timing.set_batch(own.batch() + 3);
  const v1::Measurement asked = Measure(Binary("twice_ref", 4, 256), timing);
  ASSERT_EQ(asked.outcome(), "ok") << asked.detail();
  EXPECT_EQ(asked.batch(), own.batch() + 3);
  // A few microseconds a run: 1000 runs make a sample of milliseconds, far past 80 us.
  timing.set_batch(1000);
  const v1::Measurement too_long = Measure(Binary("twice_ref", 4, 256), timing);
  ASSERT_EQ(too_long.outcome(), "ok") << too_long.detail();
  EXPECT_LT(too_long.batch(), 1000);
  EXPECT_GT(too_long.batch(), 1);
}

TEST_F(WorkerGpuTest, WrongValueIsWrongResult) {
  SetProblem(TwiceProblem(kN));
  const v1::Measurement m = Measure(Binary("twice_off_by_one_at_77", (kN + 255) / 256, 256));
  EXPECT_EQ(m.outcome(), "wrong_result");
  EXPECT_THAT(m.detail(), HasSubstr("out[77]"));
  EXPECT_EQ(m.mismatches(), 1);
  EXPECT_NEAR(m.max_abs_error(), 1.0, 1e-6);
  EXPECT_EQ(m.time_ns(), 0);

  // Asked to skip the check (a retime of a binary the caller saw pass), the worker only
  // times it: the wrong value goes unseen, which is what shows the check was not run.
  const v1::Measurement retimed =
      Measure(Binary("twice_off_by_one_at_77", (kN + 255) / 256, 256), {}, /*skip_check=*/true);
  EXPECT_EQ(retimed.outcome(), "ok") << retimed.detail();
  EXPECT_EQ(retimed.mismatches(), 0);
  EXPECT_GT(retimed.time_ns(), 0);
}

TEST_F(WorkerGpuTest, UnwrittenOutputFailsOnThePoison) {
  SetProblem(TwiceProblem(kN));
  const v1::Measurement m = Measure(Binary("twice_skips_last", (kN + 255) / 256, 256));
  EXPECT_EQ(m.outcome(), "wrong_result");
  EXPECT_THAT(m.detail(), HasSubstr(absl::StrCat("out[", kN - 1, "]: got nan")));
  EXPECT_EQ(m.mismatches(), 1);
}

TEST_F(WorkerGpuTest, MissingKernelIsLaunchFailed) {
  SetProblem(TwiceProblem(kN));
  v1::KernelBinary b = Binary("twice_ref", 1, 256);
  b.mutable_launches(0)->set_lowered_name("no_such_kernel");
  const v1::Measurement m = Measure(b);
  EXPECT_EQ(m.outcome(), "launch_failed");
  EXPECT_THAT(m.detail(), HasSubstr("no kernel named 'no_such_kernel'"));
}

TEST_F(WorkerGpuTest, BlockOverLaunchBoundsIsResourceLimit) {
  SetProblem(TwiceProblem(kN));
  const v1::Measurement m = Measure(Binary("twice_small_blocks", (kN + 255) / 256, 256));
  EXPECT_EQ(m.outcome(), "resource_limit");
  EXPECT_THAT(m.detail(), HasSubstr("256 threads"));
}

// LastOutputs: the reference's results after a Problem, the candidate's after a check that
// read them back, nothing from an earlier run after one that did not.
TEST_F(WorkerGpuTest, LastOutputsAreTheLastCheckedRunsResults) {
  session_->KeepOutputs(true);
  constexpr int kSmall = 1000;
  SetProblem(TwiceProblem(kSmall, /*seed=*/5));
  const v1::Problem problem = TwiceProblem(kSmall, 5);
  ASSERT_OK_AND_ASSIGN(std::string x, GenerateFill(DType::kF32, kSmall, problem.args(0).fill(),
                                                   BufferSeed(5, 0)));
  auto element = [](const std::string& bytes, int i) {
    return DecodeElement(DType::kF32, bytes.data() + 4 * i);
  };
  std::vector<WorkerOutput> outputs = session_->LastOutputs();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].name, "out");
  EXPECT_EQ(outputs[0].dtype, "f32");
  ASSERT_EQ(outputs[0].bytes.size(), 4u * kSmall);
  for (int i = 0; i < kSmall; ++i) {
    ASSERT_EQ(element(outputs[0].bytes, i), 2 * element(x, i)) << i;
  }

  EXPECT_EQ(Measure(Binary("twice_off_by_one_at_77", (kSmall + 255) / 256, 256)).outcome(),
            "wrong_result");
  outputs = session_->LastOutputs();
  ASSERT_EQ(outputs.size(), 1u);
  ASSERT_EQ(outputs[0].bytes.size(), 4u * kSmall);
  // The kernel adds in float: 2 x is exact, 2 x + 1 rounds once, as the cast does.
  EXPECT_EQ(element(outputs[0].bytes, 77), static_cast<float>(2 * element(x, 77) + 1));
  EXPECT_EQ(element(outputs[0].bytes, 78), 2 * element(x, 78));

  EXPECT_EQ(Measure(Binary("twice_small_blocks", (kSmall + 255) / 256, 256)).outcome(),
            "resource_limit");
  outputs = session_->LastOutputs();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].bytes, "");  // never ran: not the previous candidate's results

  // Without KeepOutputs a check on the GPU reads nothing back.
  session_->KeepOutputs(false);
  EXPECT_EQ(Measure(Binary("twice_ref", (kSmall + 255) / 256, 256)).outcome(), "ok");
  outputs = session_->LastOutputs();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].bytes, "");
}

TEST_F(WorkerGpuTest, TooMuchSharedMemoryIsResourceLimit) {
  SetProblem(TwiceProblem(kN));
  const uint32_t too_much = static_cast<uint32_t>(info_.max_shared_per_block_optin()) + 1024;
  const v1::Measurement m =
      Measure(Binary("twice_ref", (kN + 255) / 256, 256, {0, 1, 2}, too_much));
  EXPECT_EQ(m.outcome(), "resource_limit");
  EXPECT_THAT(m.detail(), HasSubstr("shared memory"));
  // Opting into more than 48 KB, within the device's limit, works.
  const v1::Measurement big =
      Measure(Binary("twice_ref", (kN + 255) / 256, 256, {0, 1, 2}, 64 * 1024));
  EXPECT_EQ(big.outcome(), "ok") << big.detail();
}

TEST_F(WorkerGpuTest, InOutBuffersAreRefilledBeforeEveryRun) {
  const int n = 100000;
  v1::Problem p;
  v1::ArgSpec* y = p.add_args();
  y->set_name("y");
  y->set_is_buffer(true);
  y->set_dtype("f32");
  y->set_count(n);
  y->set_role(v1::Buffer::INOUT);
  y->mutable_fill()->set_kind(v1::Fill::NORMAL);
  y->mutable_fill()->set_lo(0);
  y->mutable_fill()->set_hi(1);
  v1::ArgSpec* count = p.add_args();
  count->set_name("n");
  count->set_scalar_type("i32");
  count->set_int_value(n);
  *p.mutable_reference() = Binary("affine_inplace", (n + 255) / 256, 256, {0, 1});
  p.set_atol(1e-6);
  p.set_rtol(1e-6);
  p.set_seed(3);
  SetProblem(p);
  // The same kernel as candidate: passes only if y was put back to its initial values
  // after the reference's run (else it would compute 2 * (2 y + 1) + 1).
  const v1::Measurement m = Measure(Binary("affine_inplace", (n + 127) / 128, 128, {0, 1}));
  EXPECT_EQ(m.outcome(), "ok") << m.detail();
  // And again after that candidate's timing runs modified y many times over.
  const v1::Measurement again = Measure(Binary("affine_inplace", (n + 63) / 64, 64, {0, 1}));
  EXPECT_EQ(again.outcome(), "ok") << again.detail();
}

TEST_F(WorkerGpuTest, MeasureBeforeProblemIsFailedPrecondition) {
  v1::Request r;
  *r.mutable_measure()->mutable_candidate() = Binary("twice_ref", 1, 256);
  const v1::Response response = session_->Handle(r);
  ASSERT_TRUE(response.has_error());
  EXPECT_EQ(response.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

// Through the real program: a faulting candidate is "crashed", the worker exits with status
// 3, and a fresh worker reproduces the reference's digest.
TEST_F(WorkerGpuTest, FaultingCandidateCrashesAndTheWorkerExitsThree) {
  signal(SIGPIPE, SIG_IGN);
  v1::Request hello = HelloRequest();
  v1::Request problem;
  *problem.mutable_set_problem() = TwiceProblem(kN, 5);
  v1::Request measure;
  *measure.mutable_measure()->mutable_candidate() = Binary("twice_faults", (kN + 255) / 256, 256);

  std::string digest;
  {
    Worker worker({"--ordinal", "0"});
    v1::Response r;
    ASSERT_OK(WriteFrame(worker.to(), hello));
    ASSERT_OK(ReadFrame(worker.from(), &r, 60000));
    ASSERT_TRUE(r.has_device()) << r.DebugString();
    ASSERT_OK(WriteFrame(worker.to(), problem));
    ASSERT_OK(ReadFrame(worker.from(), &r, 60000));
    ASSERT_TRUE(r.has_problem_ready()) << r.DebugString();
    digest = r.problem_ready().output_digest();
    ASSERT_OK(WriteFrame(worker.to(), measure));
    ASSERT_OK(ReadFrame(worker.from(), &r, 60000));
    ASSERT_TRUE(r.has_measurement()) << r.DebugString();
    EXPECT_EQ(r.measurement().outcome(), "crashed");
    EXPECT_THAT(r.measurement().detail(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    EXPECT_EQ(r.measurement().time_ns(), 0);
    EXPECT_EQ(worker.Wait(), 3);
  }
  {
    Worker fresh({"--ordinal", "0"});
    v1::Response r;
    ASSERT_OK(WriteFrame(fresh.to(), hello));
    ASSERT_OK(ReadFrame(fresh.from(), &r, 60000));
    ASSERT_TRUE(r.has_device()) << r.DebugString();
    ASSERT_OK(WriteFrame(fresh.to(), problem));
    ASSERT_OK(ReadFrame(fresh.from(), &r, 60000));
    ASSERT_TRUE(r.has_problem_ready()) << r.DebugString();
    EXPECT_EQ(r.problem_ready().output_digest(), digest);
    fresh.CloseInput();
    EXPECT_EQ(fresh.Wait(), 0);
  }
}

}  // namespace
}  // namespace ktune
