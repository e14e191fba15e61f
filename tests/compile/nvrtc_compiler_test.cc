#include "server/compile/nvrtc_compiler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/base/scratch_dir.h"
#include "server/compile/cache_key.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/compile/cubin_sections.h"
#include "server/base/status_macros.h"
#include "server/compile/nvrtc_compiler.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Le;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

// The tiny test template (out = 2 * x) bound at its defaults for `arch`, as the tuning loop
// would send it.
absl::StatusOr<CompileRequest> TinyRequest(const TemplateRegistry& registry,
                                           const std::string& arch, int64_t block = 128) {
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl = registry.Get("tiny");
  if (!tmpl.ok()) return tmpl.status();
  absl::StatusOr<TargetInfo> target = TargetFromArch(arch);
  if (!target.ok()) return target.status();
  Config config = DefaultConfig(**tmpl, *target);
  config.params["BLOCK"] = block;
  config.knobs.target = arch;
  absl::StatusOr<BindResult> bound = Bind(*tmpl, DType::kBF16, {{"n", 1000}}, config, *target);
  if (!bound.ok()) return bound.status();
  if (!bound->instance) return absl::InternalError(bound->rejected_because);
  return BuildCompileRequest(*bound->instance);
}

class NvrtcCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
    ASSERT_THAT(registry_->errors(), IsEmpty());
    ASSERT_OK_AND_ASSIGN(compiler_, NewTemplateCompiler(*registry_, nullptr));
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<Compiler> compiler_;
};

TEST_F(NvrtcCompilerTest, CompilesTinyForSm90AndSm90a) {
  for (const std::string arch : {"sm_90", "sm_90a"}) {
    SCOPED_TRACE(arch);
    ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, arch));
    ASSERT_THAT(request.name_expressions, SizeIs(1));
    ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_THAT(r.cubin, StartsWith("\x7f"
                                    "ELF"));
    EXPECT_THAT(r.log, HasSubstr(absl::StrCat("for '", arch, "'")));
    EXPECT_GT(r.compile_ms, 0);
    EXPECT_FALSE(r.cache_hit);
    EXPECT_EQ(r.key, CompileCacheKey(request, compiler_->Identity()));
    ASSERT_THAT(r.kernels, SizeIs(1));
    const CompiledKernel& k = r.kernels[0];
    EXPECT_EQ(k.name_expression, "tiny<__nv_bfloat16, 128, 1>");
    EXPECT_THAT(k.lowered_name, StartsWith("_Z"));
    // The resources come from ptxas's report for this very kernel.
    EXPECT_EQ(k.resources.mangled_name, k.lowered_name);
    EXPECT_EQ(k.resources.arch, arch);
    EXPECT_GT(k.resources.registers, 0);
    EXPECT_EQ(k.resources.spill_stores + k.resources.spill_loads, 0);
    EXPECT_GT(k.resources.ptxas_ms, 0);
  }
}

TEST_F(NvrtcCompilerTest, Sm90aCubinDiffersFromSm90) {
  ASSERT_OK_AND_ASSIGN(CompileRequest portable, TinyRequest(*registry_, "sm_90"));
  ASSERT_OK_AND_ASSIGN(CompileRequest specific, TinyRequest(*registry_, "sm_90a"));
  ASSERT_OK_AND_ASSIGN(CompileResult a, compiler_->Compile(portable));
  ASSERT_OK_AND_ASSIGN(CompileResult b, compiler_->Compile(specific));
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_TRUE(a.cubin != b.cubin) << "sm_90 and sm_90a gave the same cubin";
  EXPECT_NE(a.key, b.key);
  // Beside the recorded ptxas command line, the arch-specific target is marked in the
  // compatibility attributes; the machine code itself may well be the same.
  ASSERT_OK_AND_ASSIGN(auto sections_a, ElfSections(a.cubin));
  ASSERT_OK_AND_ASSIGN(auto sections_b, ElfSections(b.cubin));
  ASSERT_THAT(sections_a, ::testing::Contains(::testing::Key(".nv.compat")));
  ASSERT_THAT(sections_b, ::testing::Contains(::testing::Key(".nv.compat")));
  EXPECT_TRUE(sections_a.at(".nv.compat") != sections_b.at(".nv.compat"));
}

TEST_F(NvrtcCompilerTest, StaticSharedMemoryTakesNoBytesOfTheCubin) {
  // 32 KB of static shared memory is a section of that size that the file does not hold
  // (SHT_NOBITS); the section reader once took it for a truncated file and refused the
  // cubin (ktune cache import of a layernorm staging weight and bias in shared memory).
  CompileRequest request;
  request.source =
      "template <int N> __global__ void staged(float* p) {\n"
      "  __shared__ float s[N];\n"
      "  for (int i = threadIdx.x; i < N; i += blockDim.x) s[i] = p[i];\n"
      "  __syncthreads();\n"
      "  p[threadIdx.x] = s[N - 1 - threadIdx.x];\n"
      "}\n";
  request.source_name = "staged.cu";
  request.name_expressions = {"staged<8192>"};
  request.options = {"--gpu-architecture=sm_90"};
  ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
  ASSERT_TRUE(r.ok) << r.log;
  ASSERT_LT(r.cubin.size(), 32768u) << "the shared array would fit in the file after all";
  ASSERT_OK_AND_ASSIGN(auto sections, ElfSections(r.cubin));
  const std::string shared = ".nv.shared." + r.kernels.at(0).lowered_name;
  ASSERT_THAT(sections, ::testing::Contains(::testing::Key(shared)));
  EXPECT_THAT(sections.at(shared), IsEmpty());
  ASSERT_OK_AND_ASSIGN(auto text, TextSections(r.cubin));
  EXPECT_THAT(text, ::testing::Contains(::testing::Key(".text." + r.kernels.at(0).lowered_name)));
}

TEST_F(NvrtcCompilerTest, SyntaxErrorIsAFailedResultNotAnError) {
  CompileRequest request;
  request.source = "template <int N> __global__ void broken(float* p) { p[0] = N +; }\n";
  request.source_name = "broken.cu";
  request.name_expressions = {"broken<1>"};
  request.options = {"--gpu-architecture=sm_90"};
  ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.log, AllOf(HasSubstr("error"), HasSubstr("broken.cu")));
  EXPECT_THAT(r.cubin, IsEmpty());
  EXPECT_THAT(r.kernels, IsEmpty());
  EXPECT_EQ(r.key, CompileCacheKey(request, compiler_->Identity()));
}

TEST_F(NvrtcCompilerTest, StaticAssertInTheTemplateIsAFailedResult) {
  CompileRequest request;
  request.source =
      "template <int N> __global__ void k(float* p) {\n"
      "  static_assert(N % 32 == 0, \"N must be a multiple of the warp size\");\n"
      "  p[0] = N;\n"
      "}\n";
  request.source_name = "assert.cu";
  request.name_expressions = {"k<33>"};
  request.options = {"--gpu-architecture=sm_90"};
  ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.log, HasSubstr("N must be a multiple of the warp size"));
}

TEST_F(NvrtcCompilerTest, Fp8TypesCompileFromTheToolkitHeaders) {
  // The dtype names ktune substitutes for {dtype} (DTypeCudaName) come from <cuda_fp8.h>,
  // which NVRTC finds on the toolkit include path.
  CompileRequest request;
  request.source =
      "#include <cuda_fp8.h>\n"
      "template <typename T> __global__ void to_fp8(const float* x, T* out) {\n"
      "  out[threadIdx.x] = T(x[threadIdx.x]);\n"
      "}\n";
  request.source_name = "fp8.cu";
  request.name_expressions = {"to_fp8<__nv_fp8_e4m3>", "to_fp8<__nv_fp8_e5m2>"};
  request.options = {"--gpu-architecture=sm_90"};
  ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_THAT(r.kernels, SizeIs(2));
}

// The tensor-map test template (tests/templates/testdata/tma): a `const __grid_constant__
// ktune::TensorMap` parameter, cp.async.bulk.tensor.2d into shared memory on an mbarrier.
class NvrtcTmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TmaTemplatesDir()));
    ASSERT_THAT(registry_->errors(), IsEmpty());
    NvrtcOptions options;
    options.include_dirs = {absl::StrCat(testing::ShippedTemplatesDir(), "/include")};
    ASSERT_OK_AND_ASSIGN(compiler_, NewNvrtcCompiler(options));
  }

  absl::StatusOr<CompileRequest> Request(DType dtype, int64_t path, const std::string& arch) {
    KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("tma_copy"));
    KTUNE_ASSIGN_OR_RETURN(TargetInfo target, TargetFromArch(arch));
    Config config = DefaultConfig(*tmpl, target);
    config.params = {{"BOX_COLS", 64}, {"BOX_ROWS", 8}, {"PATH", path}};
    config.knobs.target = arch;
    KTUNE_ASSIGN_OR_RETURN(BindResult bound,
                           Bind(tmpl, dtype, {{"rows", 100}, {"cols", 200}}, config, target));
    if (!bound.instance) return absl::InternalError(bound.rejected_because);
    return BuildCompileRequest(*bound.instance);
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<Compiler> compiler_;
};

TEST_F(NvrtcTmaTest, CompilesForSm90AndSm90a) {
  for (const std::string arch : {"sm_90", "sm_90a"}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(arch, " ", DTypeName(dtype)));
      ASSERT_OK_AND_ASSIGN(CompileRequest request, Request(dtype, 0, arch));
      ASSERT_OK_AND_ASSIGN(CompileResult r, compiler_->Compile(request));
      ASSERT_TRUE(r.ok) << r.log;
      EXPECT_THAT(r.cubin, StartsWith("\x7f" "ELF"));
      ASSERT_THAT(r.kernels, SizeIs(1));
      EXPECT_THAT(r.kernels[0].lowered_name, HasSubstr("tma_copy"));
      EXPECT_EQ(r.kernels[0].resources.arch, arch);
    }
  }
}

TEST_F(NvrtcTmaTest, TheHopperOnlyPathCompilesForSm90aOnly) {
  // What the manifest's "PATH == 0 || KTUNE_ARCH_SPECIFIC" saves the tuning loop from: the
  // same PATH 1 candidate compiled for plain sm_90 fails.
  ASSERT_OK_AND_ASSIGN(CompileRequest specific, Request(DType::kBF16, 1, "sm_90a"));
  ASSERT_OK_AND_ASSIGN(CompileResult ok, compiler_->Compile(specific));
  EXPECT_TRUE(ok.ok) << ok.log;
  CompileRequest portable = specific;
  for (std::string& o : portable.options) {
    if (o == "--gpu-architecture=sm_90a") o = "--gpu-architecture=sm_90";
  }
  ASSERT_OK_AND_ASSIGN(CompileResult failed, compiler_->Compile(portable));
  EXPECT_FALSE(failed.ok);
  EXPECT_THAT(failed.log, HasSubstr("PATH 1 needs the arch-specific target sm_90a"));
}

TEST_F(NvrtcCompilerTest, NoNameExpressionIsInvalid) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, "sm_90"));
  request.name_expressions.clear();
  EXPECT_THAT(compiler_->Compile(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no name expression")));
}

TEST_F(NvrtcCompilerTest, VirtualArchitectureIsInvalid) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, "sm_90"));
  for (std::string& o : request.options) {
    if (o == "--gpu-architecture=sm_90") o = "--gpu-architecture=compute_90";
  }
  ASSERT_THAT(request.options, ::testing::Contains("--gpu-architecture=compute_90"));
  EXPECT_THAT(compiler_->Compile(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("real architecture")));

  request.options = {"-DKTUNE_MAX_THREADS=128", "-DKTUNE_MIN_BLOCKS=1"};  // no arch at all
  EXPECT_THAT(compiler_->Compile(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("real architecture")));
}

TEST_F(NvrtcCompilerTest, UnknownOptionIsInvalidAndNamesTheCall) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, "sm_90"));
  request.options.push_back("--no-such-nvrtc-option");
  EXPECT_THAT(compiler_->Compile(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nvrtcCompileProgram")));
}

TEST_F(NvrtcCompilerTest, VersionAndIdentity) {
  EXPECT_THAT(compiler_->Version(), MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_EQ(compiler_->Version(), NvrtcVersionString());
  // The identity names the NVRTC build (the library file carries major.minor.build), the
  // compiler's own options and the shared headers' digest, never a folder: two checkouts
  // of the same tree share cache entries.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> shipped,
                       LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  ASSERT_THAT(shipped->include_dir(), Not(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> with_headers,
                       NewTemplateCompiler(*shipped, nullptr));
  EXPECT_THAT(with_headers->Identity(),
              AllOf(HasSubstr(absl::StrCat("nvrtc ", compiler_->Version())), HasSubstr("libnvrtc"),
                    HasSubstr("-Xptxas=-v"), HasSubstr("headers "),
                    Not(HasSubstr(shipped->include_dir())), Not(HasSubstr("/usr/local/cuda"))));
  EXPECT_NE(with_headers->Identity(), compiler_->Identity());
}

TEST_F(NvrtcCompilerTest, MissingCudaHeadersIsFailedPrecondition) {
  NvrtcOptions options;
  options.cuda_include_dir = testing::NewTempDir();
  EXPECT_THAT(NewNvrtcCompiler(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("cuda_fp16.h"), HasSubstr(options.cuda_include_dir))));
}

TEST_F(NvrtcCompilerTest, SameRequestGivesTheSameCubinAndKey) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, "sm_90a"));
  ASSERT_OK_AND_ASSIGN(CompileResult a, compiler_->Compile(request));
  ASSERT_OK_AND_ASSIGN(CompileResult b, compiler_->Compile(request));
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_TRUE(a.cubin == b.cubin) << "NVRTC is not deterministic: the cache would be wrong";
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.kernels[0].lowered_name, b.kernels[0].lowered_name);
  EXPECT_EQ(a.kernels[0].resources.registers, b.kernels[0].resources.registers);
  // A second compiler made the same way has the same identity, so the same key.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> again, NewTemplateCompiler(*registry_, nullptr));
  EXPECT_EQ(again->Identity(), compiler_->Identity());
}

// Automatic precompiled headers change how fast NVRTC is, not what it makes: the same
// kernels' machine code, the same identity (so the same cache keys), and the state in the
// folder given.
TEST_F(NvrtcCompilerTest, PrecompiledHeadersKeepTheCodeAndTheIdentity) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ScratchDir> pch, ScratchDir::Create("ktune-pch-test-"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> with_pch,
                       NewTemplateCompiler(*registry_, nullptr, pch->path()));
  EXPECT_EQ(with_pch->Identity(), compiler_->Identity());
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_, "sm_90a"));
  ASSERT_OK_AND_ASSIGN(CompileResult plain, compiler_->Compile(request));
  for (int i = 0; i < 2; ++i) {  // the first creates the header state, the second uses it
    ASSERT_OK_AND_ASSIGN(CompileResult r, with_pch->Compile(request));
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_EQ(r.key, plain.key);
    ASSERT_OK_AND_ASSIGN(auto text, TextSections(r.cubin));
    ASSERT_OK_AND_ASSIGN(auto plain_text, TextSections(plain.cubin));
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(text == plain_text) << "compile " << i;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> state, ListDir(pch->path()));
  EXPECT_FALSE(state.empty());
}

TEST_F(NvrtcCompilerTest, ConcurrentCompilesFromFourThreads) {
  // Two threads share a request, two have their own: each gets its own program.
  const std::vector<int64_t> blocks = {64, 128, 128, 256};
  std::vector<CompileRequest> requests;
  for (int64_t b : blocks) {
    ASSERT_OK_AND_ASSIGN(CompileRequest r, TinyRequest(*registry_, "sm_90", b));
    requests.push_back(std::move(r));
  }
  std::vector<absl::StatusOr<CompileResult>> results(requests.size(),
                                                     absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = compiler_->Compile(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("BLOCK=", blocks[i]));
    ASSERT_OK(results[i]);
    ASSERT_TRUE(results[i]->ok) << results[i]->log;
    EXPECT_THAT(results[i]->cubin, StartsWith("\x7f"
                                              "ELF"));
    ASSERT_THAT(results[i]->kernels, SizeIs(1));
    EXPECT_EQ(results[i]->kernels[0].name_expression,
              absl::StrCat("tiny<__nv_bfloat16, ", blocks[i], ", 1>"));
  }
  EXPECT_TRUE(results[1]->cubin == results[2]->cubin);
  EXPECT_NE(results[0]->kernels[0].lowered_name, results[3]->kernels[0].lowered_name);
  // The same as compiled alone.
  ASSERT_OK_AND_ASSIGN(CompileResult alone, compiler_->Compile(requests[3]));
  EXPECT_TRUE(alone.cubin == results[3]->cubin);
}

// --- Knobs: each changes something checkable -------------------------------------------

// `hungry` keeps 64 floats live across a mixing loop (~70-80 registers when free);
// `mathy` uses expf, sinf and a division, which fast math replaces by approximations.
// KTUNE_BOUNDS is the templates' __launch_bounds__(KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS)
// when the compile defines them, and nothing otherwise.
constexpr char kKnobsSource[] = R"(
#ifdef KTUNE_MAX_THREADS
#define KTUNE_BOUNDS __launch_bounds__(KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS)
#else
#define KTUNE_BOUNDS
#endif
template <int N>
__global__ void KTUNE_BOUNDS hungry(const float* __restrict__ in, float* __restrict__ out) {
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = in[threadIdx.x + i * 1024];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i + r + 1) % N] + 1.0f;
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) s += acc[i] * (i + 1);
  out[threadIdx.x] = s;
}
template <int UNUSED>
__global__ void KTUNE_BOUNDS mathy(const float* __restrict__ in, float* __restrict__ out) {
  const float x = in[threadIdx.x];
  out[threadIdx.x] = expf(x) / (x + 3.0f) + sinf(x);
}
)";

class KnobsTest : public NvrtcCompilerTest {
 protected:
  // The one kernel `name` compiled with `options` (the sm_90 target first).
  void Compile(const std::string& name, std::vector<std::string> options, CompileResult* out) {
    CompileRequest request;
    request.source = kKnobsSource;
    request.source_name = "knobs.cu";
    request.name_expressions = {name};
    request.options = {"--gpu-architecture=sm_90"};
    request.options.insert(request.options.end(), options.begin(), options.end());
    ASSERT_OK_AND_ASSIGN(*out, compiler_->Compile(request));
    ASSERT_TRUE(out->ok) << out->log;
    ASSERT_THAT(out->kernels, SizeIs(1));
    ASSERT_EQ(out->kernels[0].resources.mangled_name, out->kernels[0].lowered_name) << out->log;
  }
  static int64_t Registers(const CompileResult& r) { return r.kernels[0].resources.registers; }
  static int64_t Spills(const CompileResult& r) {
    return r.kernels[0].resources.spill_stores + r.kernels[0].resources.spill_loads;
  }
  // The kernels' machine code (the .text sections), without the notes in which the cubin
  // records its ptxas command line: two cubins compiled with different options always
  // differ in bytes, so only a difference here says the option changed the code.
  static std::map<std::string, std::string> Code(const CompileResult& r) {
    absl::StatusOr<std::map<std::string, std::string>> text = TextSections(r.cubin);
    EXPECT_OK(text.status());
    EXPECT_THAT(text.value_or(std::map<std::string, std::string>{}), SizeIs(1));
    return text.value_or(std::map<std::string, std::string>{});
  }
};

TEST_F(KnobsTest, MaxrregcountCapsRegisters) {
  CompileResult free, capped;
  ASSERT_NO_FATAL_FAILURE(Compile("hungry<64>", {}, &free));
  ASSERT_NO_FATAL_FAILURE(Compile("hungry<64>", {"--maxrregcount=32"}, &capped));
  EXPECT_GT(Registers(free), 32);
  EXPECT_EQ(Spills(free), 0);
  EXPECT_THAT(Registers(capped), AllOf(Gt(0), Le(32)));
  EXPECT_GT(Spills(capped), 0);
  EXPECT_TRUE(Code(free) != Code(capped)) << "same machine code";
}

TEST_F(KnobsTest, MinBlocksLaunchBoundLowersRegisters) {
  // 256 threads x 8 blocks = 2048 threads per SM leaves 65536 / 2048 = 32 registers each.
  CompileResult one, eight;
  ASSERT_NO_FATAL_FAILURE(
      Compile("hungry<64>", {"-DKTUNE_MAX_THREADS=256", "-DKTUNE_MIN_BLOCKS=1"}, &one));
  ASSERT_NO_FATAL_FAILURE(
      Compile("hungry<64>", {"-DKTUNE_MAX_THREADS=256", "-DKTUNE_MIN_BLOCKS=8"}, &eight));
  EXPECT_GT(Registers(one), 32);
  EXPECT_THAT(Registers(eight), AllOf(Gt(0), Le(32)));
  EXPECT_TRUE(Code(one) != Code(eight)) << "same machine code";
}

// Pins a toolchain fact the knob space has to live with: ptxas ignores --maxrregcount for
// a kernel that has __launch_bounds__ (as every ktune template has), so a maxrregcount
// knob compiles the same code as no cap. If this starts failing, NVRTC changed and the
// knob began to matter for templates.
TEST_F(KnobsTest, MaxrregcountIsIgnoredUnderLaunchBounds) {
  CompileResult free, capped;
  const std::vector<std::string> bounds = {"-DKTUNE_MAX_THREADS=256", "-DKTUNE_MIN_BLOCKS=1"};
  ASSERT_NO_FATAL_FAILURE(Compile("hungry<64>", bounds, &free));
  std::vector<std::string> with_cap = bounds;
  with_cap.push_back("--maxrregcount=32");
  ASSERT_NO_FATAL_FAILURE(Compile("hungry<64>", with_cap, &capped));
  EXPECT_GT(Registers(free), 32);
  EXPECT_EQ(Registers(capped), Registers(free));
  EXPECT_TRUE(Code(capped) == Code(free)) << "the cap changed the machine code";
}

TEST_F(KnobsTest, FastMathChangesTheCode) {
  CompileResult precise, fast;
  ASSERT_NO_FATAL_FAILURE(Compile("mathy<0>", {}, &precise));
  ASSERT_NO_FATAL_FAILURE(Compile("mathy<0>", {"--use_fast_math"}, &fast));
  EXPECT_TRUE(Code(precise) != Code(fast)) << "same machine code";
  // The approximations need fewer instructions than the precise expf/sinf/division.
  ASSERT_THAT(Code(fast), SizeIs(1));
  EXPECT_LT(Code(fast).begin()->second.size(), Code(precise).begin()->second.size());
}

}  // namespace
}  // namespace ktune
