// Every shipped template's kernels against its host reference, on a real GPU
// (label `gpu`): for each dtype and each of the host reference's small shapes,
// the template's reference launches, its default candidate (or the valid
// config nearest to it where the default does not fit the shape) and the config
// nearest to the default of each other kernel variant (kernel_variants.h) run through
// the worker's own request handler in this process, on the inputs the worker
// generates; their outputs come back (WorkerSession::LastOutputs) and are
// compared with the host reference's, rounded to the output type, under the
// manifest's tolerance for the dtype. The tuning loop checks candidates only
// against the GPU reference; this is what checks the reference.
//
// Skips, saying why, where Hello finds no driver or GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ktune/v1/worker.pb.h"
#include "server/compile/cache_key.h"
#include "server/compile/compiler.h"
#include "server/worker/host_buffers.h"
#include "server/worker/worker_session.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "tests/kernels/host_reference.h"
#include "tests/kernels/kernel_case.h"
#include "tests/kernels/kernel_variants.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune::testing {
namespace {

// The seed of every case's inputs: fixed, so a failure reproduces.
constexpr uint64_t kSeed = 20240607;

// Shared by every test: one worker session (one primary context) and one
// compiler.
struct Gpu {
  std::unique_ptr<WorkerSession> session;
  v1::DeviceInfo info;
  std::string skip_reason; // non-empty: no driver or GPU
  std::string error;       // non-empty: set-up failed
  std::unique_ptr<TemplateRegistry> registry;
  std::unique_ptr<Compiler> compiler;
  std::map<std::string, CompileResult> compiled; // by CompileCacheKey
};

Gpu &TheGpu() {
  static Gpu *gpu = [] {
    auto *g = new Gpu;
    g->session = NewWorkerSession();
    g->session->KeepOutputs(true);  // the outputs are checked against the host reference too
    v1::Request hello;
    hello.mutable_hello()->set_ordinal(0);
    const v1::Response r = g->session->Handle(hello);
    if (r.has_error()) {
      if (r.error().code() ==
          static_cast<int>(absl::StatusCode::kUnavailable)) {
        g->skip_reason =
            absl::StrCat("no CUDA driver or GPU: ", r.error().message());
      } else {
        g->error = absl::StrCat("Hello: ", r.error().message());
      }
      return g;
    }
    g->info = r.device();
    absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
        LoadTemplateRegistry(ShippedTemplatesDir());
    if (!registry.ok()) {
      g->error = std::string(registry.status().message());
      return g;
    }
    g->registry = *std::move(registry);
    absl::StatusOr<std::unique_ptr<Compiler>> compiler =
        NewTemplateCompiler(*g->registry, nullptr);
    if (!compiler.ok()) {
      g->error = std::string(compiler.status().message());
      return g;
    }
    g->compiler = *std::move(compiler);
    return g;
  }();
  return *gpu;
}

// Compiles once per distinct request (shapes that only change launch geometry
// share one).
absl::StatusOr<CompileResult> Compile(Gpu &gpu, const Instance &instance) {
  const CompileRequest request = BuildCompileRequest(instance);
  const std::string key = CompileCacheKey(request, gpu.compiler->Identity());
  auto it = gpu.compiled.find(key);
  if (it != gpu.compiled.end())
    return it->second;
  absl::StatusOr<CompileResult> result = gpu.compiler->Compile(request);
  if (!result.ok())
    return result.status();
  if (!result->ok) {
    return absl::InternalError(absl::StrCat("does not compile (",
                                            absl::StrJoin(request.options, " "),
                                            "):\n", result->log));
  }
  gpu.compiled[key] = *result;
  return result;
}

// Compares what the GPU left in the output buffers with the host's expected
// bytes, one failure per buffer that differs: "<case>: <what>: out[17]: got
// ..., want ...".
void ExpectOutputsMatch(const std::string &case_name, const std::string &what,
                        const std::vector<WorkerOutput> &got,
                        const std::map<std::string, std::string> &want,
                        double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size())
      << case_name << ": " << what << ": output buffers";
  for (const WorkerOutput &out : got) {
    auto it = want.find(out.name);
    ASSERT_NE(it, want.end())
        << case_name << ": " << what << ": unexpected output " << out.name;
    ASSERT_EQ(out.bytes.size(), it->second.size())
        << case_name << ": " << what << ": " << out.name
        << " was not read back";
    std::optional<DType> dtype = ParseDType(out.dtype);
    ASSERT_TRUE(dtype) << out.dtype;
    const Comparison c =
        CompareBuffers(*dtype, out.bytes, it->second, atol, rtol);
    EXPECT_EQ(c.mismatches, 0)
        << case_name << ": " << what << " vs the host reference: "
        << (c.mismatches > 0 ? DescribeMismatch(out.name, c, atol, rtol) : "");
  }
}

class KernelsGpuTest : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    Gpu &gpu = TheGpu();
    if (!gpu.skip_reason.empty())
      GTEST_SKIP() << gpu.skip_reason;
    ASSERT_EQ(gpu.error, "");
  }

  // One case: reference and candidate, each against the host. Returns after the
  // first step that cannot go on, having recorded why.
  void CheckCase(const std::shared_ptr<const KernelTemplate> &tmpl,
                 const HostReference &host, DType dtype, const Shape &shape) {
    Gpu &gpu = TheGpu();
    const std::string c = CaseName(tmpl->name(), dtype, shape);
    SCOPED_TRACE(c);
    const TargetInfo target = TargetForDevice(gpu.info);

    // Host side: the worker's inputs, the host's results.
    ASSERT_OK_AND_ASSIGN(Instance reference,
                         BindReference(tmpl, dtype, shape, target));
    ASSERT_OK_AND_ASSIGN(HostProblem host_problem,
                         MakeHostProblem(reference, kSeed));
    absl::StatusOr<HostOutputs> host_outputs = host.compute(host_problem);
    ASSERT_OK(host_outputs.status()) << c << ": host reference";
    ASSERT_OK_AND_ASSIGN(auto want, EncodeExpected(reference, *host_outputs));

    // The reference kernel, run by SetProblem.
    absl::StatusOr<CompileResult> ref_compiled = Compile(gpu, reference);
    ASSERT_OK(ref_compiled.status())
        << c << ": reference " << reference.launches[0].name_expression;
    ASSERT_OK_AND_ASSIGN(v1::Problem problem,
                         BuildProblem(reference, *ref_compiled, kSeed));
    v1::Request set_problem;
    *set_problem.mutable_set_problem() = problem;
    const v1::Response ready = gpu.session->Handle(set_problem);
    ASSERT_TRUE(ready.has_problem_ready())
        << c << ": the reference did not run: " << ready.DebugString();
    std::string ref_names;
    for (const BoundLaunch &l : reference.launches) {
      absl::StrAppend(&ref_names, ref_names.empty() ? "" : " + ",
                      l.name_expression);
    }
    ExpectOutputsMatch(c, absl::StrCat("reference ", ref_names),
                       gpu.session->LastOutputs(), want, problem.atol(),
                       problem.rtol());

    // The default candidate, then one of each other kernel variant valid here,
    // each run by MeasureCandidate (checked there against the GPU reference,
    // here against the host).
    ASSERT_OK_AND_ASSIGN(ChosenCandidate candidate,
                         ChooseCandidate(tmpl, dtype, shape, target));
    CheckCandidate(c, candidate, "default candidate", want, problem);
    for (const KernelVariant &variant : KernelVariants(tmpl->name())) {
      if (gpu.session->poisoned())
        return;
      absl::StatusOr<ChosenCandidate> v =
          ChooseCandidate(tmpl, dtype, shape, target, variant.selects);
      if (absl::IsNotFound(v.status()))
        continue; // not valid at this shape
      ASSERT_OK(v.status()) << c << ": " << variant.name;
      CheckCandidate(c, *v, variant.name, want, problem);
      ++variants_checked_[variant.name];
    }
  }

  // Compiles and measures one candidate on the problem set up by CheckCase,
  // then compares its outputs with the host's.
  void CheckCandidate(const std::string &c, const ChosenCandidate &candidate,
                      const std::string &kind,
                      const std::map<std::string, std::string> &want,
                      const v1::Problem &problem) {
    Gpu &gpu = TheGpu();
    const std::string what =
        candidate.default_rejected_because.empty()
            ? absl::StrCat(kind, " ", ConfigString(candidate.config))
            : absl::StrCat(kind, " ", ConfigString(candidate.config),
                           " (the default ", candidate.default_rejected_because,
                           ")");
    absl::StatusOr<CompileResult> cand_compiled =
        Compile(gpu, candidate.instance);
    ASSERT_OK(cand_compiled.status()) << c << ": " << what;
    ASSERT_OK_AND_ASSIGN(v1::KernelBinary binary,
                         BuildKernelBinary(candidate.instance, *cand_compiled));
    v1::Request measure;
    *measure.mutable_measure()->mutable_candidate() = binary;
    // One untimed-worth run: the check is what matters here, not the time.
    v1::TimingOptions *timing = measure.mutable_measure()->mutable_timing();
    timing->set_warmup(1);
    timing->set_min_repeats(1);
    timing->set_max_repeats(1);
    timing->set_no_l2_flush(true);
    const v1::Response measured = gpu.session->Handle(measure);
    ASSERT_TRUE(measured.has_measurement())
        << c << ": " << what << ": " << measured.DebugString();
    const v1::Measurement &m = measured.measurement();
    ASSERT_FALSE(gpu.session->poisoned())
        << c << ": " << what << " crashed: " << m.detail();
    EXPECT_EQ(m.outcome(), "ok")
        << c << ": " << what << " vs the GPU reference: " << m.detail();
    if (m.outcome() == "ok" || m.outcome() == "wrong_result") {
      ExpectOutputsMatch(c, what, gpu.session->LastOutputs(), want,
                         problem.atol(), problem.rtol());
    }
  }

  // Cases each variant ran at, over the test.
  std::map<std::string, int> variants_checked_;
};

TEST_P(KernelsGpuTest, ReferenceAndCandidatesMatchTheHost) {
  Gpu &gpu = TheGpu();
  const std::string &name = GetParam();
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl =
      gpu.registry->Get(name);
  ASSERT_OK(tmpl.status()) << "host reference for template " << name
                           << ", which is not shipped";
  const HostReference &host = HostReferences().at(name);
  int cases = 0;
  for (DType dtype : (*tmpl)->dtypes()) {
    for (const Shape &shape : host.shapes(dtype)) {
      CheckCase(*tmpl, host, dtype, shape);
      ASSERT_FALSE(gpu.session->poisoned())
          << "the CUDA context is gone; later cases cannot run";
      ++cases;
    }
  }
  std::cout << name << ": " << cases
            << " cases (dtypes x shapes) checked against the host\n";
  for (const KernelVariant &variant : KernelVariants(name)) {
    EXPECT_GT(variants_checked_[variant.name], 0)
        << name << ": variant '" << variant.name << "' ran at no case";
    std::cout << name << ": variant '" << variant.name << "' at "
              << variants_checked_[variant.name] << " cases\n";
  }
}

std::vector<std::string> TemplateNames() {
  std::vector<std::string> names;
  for (const auto &[name, ref] : HostReferences())
    names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Shipped, KernelsGpuTest,
                         ::testing::ValuesIn(TemplateNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

} // namespace
} // namespace ktune::testing
