// The shipped templates compile with NVRTC, no GPU needed (shipped_template_compiles.h): a
// covering sample of every group's points in every run (every point is
// compile_all_points_test's, label slow), the rule that samples the second target, and
// gemm's TAIL candidates, which bind only at shapes past the example's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/compile/shipped_template_compiles.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using testing::CompileShippedTemplates;
using testing::CompiledPoints;
using testing::ExpectAllCompile;
using testing::HeadersTestArchFeatures;
using testing::SameOnBothTargets;

// Every value of every param of each group at least once, then evenly spaced points up to
// 16 (8 on a second target whose program is the same), at any space size: ~800 compiles,
// two fifths of every point's, with the same references.
TEST(ShippedTemplatesTest, ACoveringSampleOfEachGroupAndEveryReferenceCompiles) {
  CompileShippedTemplates({/*all_up_to=*/0, /*sample=*/16, /*second_target_sample=*/8});
}

TEST(ShippedTemplatesTest, TheSampleHasEveryValueOfEveryParam) {
  std::vector<Config> all;
  for (int64_t a : {1, 2, 4, 8}) {
    for (int64_t b : {32, 64, 128}) {
      for (int64_t c : {0, 1}) all.push_back(Config{{{"A", a}, {"B", b}, {"C", c}}, {}});
    }
  }
  const std::vector<Config> few = CompiledPoints(all, 0, 2);
  std::set<std::pair<std::string, int64_t>> seen;
  for (const Config& c : few) {
    for (const auto& [name, value] : c.params) seen.insert({name, value});
  }
  EXPECT_EQ(seen.size(), 4u + 3u + 2u);  // the covering part alone, past the sample's 2
  const std::vector<Config> more = CompiledPoints(all, 0, 20);  // evenly spaced ones added
  EXPECT_GT(more.size(), few.size());
  EXPECT_LE(more.size(), 20u);
  EXPECT_EQ(std::set<Config>(more.begin(), more.end()).size(), more.size());  // no repeats
  EXPECT_EQ(CompiledPoints(all, 24, 2).size(), 24u);  // small enough: all of them
}

TEST(ShippedTemplatesTest, SecondTargetIsSampledOnlyWhereTheProgramCannotDiffer) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry,
                       LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> gemm, registry->Get("gemm"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> rmsnorm, registry->Get("rmsnorm"));
  const bool headers = HeadersTestArchFeatures(*registry);
  EXPECT_FALSE(SameOnBothTargets(*gemm, headers));  // its Hopper path exists on sm_90a alone
  EXPECT_TRUE(SameOnBothTargets(*rmsnorm, headers));
}

// The gemm template's candidates beyond the covering sample, compiled by NVRTC with no cache.
class ShippedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(gemm_, registry_->Get("gemm"));
    ASSERT_OK_AND_ASSIGN(compiler_, NewTemplateCompiler(*registry_, nullptr));
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::shared_ptr<const KernelTemplate> gemm_;
  std::unique_ptr<Compiler> compiler_;
};

// gemm's TAIL (the last wave's tiles split along K) binds only at shapes of more tiles than
// one wave, which the example shape is not: one candidate of each epilogue and cluster
// choice with TAIL 1, every dtype of the Hopper path, at the GPU check's m 1100 x n 2056 x
// k 272, compiles.
TEST_F(ShippedGemmTest, GemmTailCandidatesCompile) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90a"));
  const Shape shape = {{"m", 1100}, {"n", 2056}, {"k", 272}};
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (DType dtype : gemm_->dtypes()) {
    // f32's TAIL kernels (no EPI 1) are among GemmF32HopperCandidatesCompile's kinds.
    if (dtype == DType::kF32) continue;
    ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm_, dtype, shape, target));
    std::set<std::pair<int64_t, int64_t>> kinds;  // (EPI, CLUSTER) taken
    for (const Config& c : space.configs) {
      if (c.params.at("TAIL") != 1) continue;
      if (!kinds.insert({c.params.at("EPI"), c.params.at("CLUSTER")}).second) continue;
      ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, dtype, shape, c, target));
      ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
      what.push_back(absl::StrCat(DTypeName(dtype), " ", ConfigString(c)));
      requests.push_back(BuildCompileRequest(*bound.instance));
    }
    EXPECT_EQ(kinds.size(), 4u) << DTypeName(dtype) << ": EPI 0/1 x CLUSTER 1/2 with TAIL 1";
  }
  ExpectAllCompile(compiler_.get(), what, std::move(requests), /*no_spills=*/false);
}


// The few-rows path (CUDA cores): every point at the decode rows that take each chunking
// of x (f32: 1, 3 and 32 rows; the others 1 and 8), every dtype on an Ada GPU (fp8 from
// sm_89), compiles without spilling: its sums (up to 64 floats a thread) and a step's loads
// of w stay in registers.
TEST_F(ShippedGemmTest, GemmFewRowsCandidatesCompile) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_89"));
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (DType dtype : gemm_->dtypes()) {
    const std::vector<int64_t> ms =
        dtype == DType::kF32 ? std::vector<int64_t>{1, 3, 32} : std::vector<int64_t>{1, 8};
    for (int64_t m : ms) {
      const Shape shape = {{"m", m}, {"n", 1003}, {"k", 4096}};
      ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm_, dtype, shape, target));
      int found = 0;
      for (const Config& c : space.configs) {
        if (c.params.at("ROWS_X") == 0) continue;
        ++found;
        ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, dtype, shape, c, target));
        ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
        what.push_back(absl::StrCat(DTypeName(dtype), " m=", m, " ", ConfigString(c)));
        requests.push_back(BuildCompileRequest(*bound.instance));
      }
      EXPECT_GT(found, 0) << DTypeName(dtype) << " m=" << m;
    }
  }
  ExpectAllCompile(compiler_.get(), what, std::move(requests), /*no_spills=*/true);
}

// fp8 and f32 on the portable path (mma.sync m16n8k32 from sm_89; 3xTF32 m16n8k8 from
// sm_80): every point of an Ada GPU's fp8 space and of an Ampere GPU's f32 space (rows
// copied 16 bytes at a time), and of the plain sm_90 target's at rows TMA cannot read (k not
// a multiple of 16: copied element by element), compile without spilling.
TEST_F(ShippedGemmTest, GemmFp8AndF32PortableCandidatesCompile) {
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (const auto& [arch, shape, dtypes] :
       std::vector<std::tuple<std::string, Shape, std::vector<DType>>>{
           {"sm_89", {{"m", 77}, {"n", 1000}, {"k", 4096}}, {DType::kF8E4M3, DType::kF8E5M2}},
           {"sm_80", {{"m", 77}, {"n", 1000}, {"k", 4096}}, {DType::kF32}},
           {"sm_90", {{"m", 33}, {"n", 70}, {"k", 77}},
            {DType::kF8E4M3, DType::kF8E5M2, DType::kF32}}}) {
    ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch(arch));
    for (DType dtype : dtypes) {
      ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm_, dtype, shape, target));
      EXPECT_FALSE(space.configs.empty()) << arch << " " << DTypeName(dtype);
      for (const Config& c : space.configs) {
        EXPECT_EQ(c.params.at("WGMMA"), 0) << arch << " " << ConfigString(c);
        ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, dtype, shape, c, target));
        ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
        what.push_back(absl::StrCat(arch, " ", DTypeName(dtype), " ", ConfigString(c)));
        requests.push_back(BuildCompileRequest(*bound.instance));
      }
    }
  }
  ExpectAllCompile(compiler_.get(), what, std::move(requests), /*no_spills=*/true);
}

// f32 on the Hopper path (3xTF32 on wgmma, the rests written by the producer warpgroup): one
// point per kind of kernel it builds (tile, SWAP, cluster, split, TAIL), each at its most
// stages (the most shared memory and the longest ring), compiles without spilling. The
// producer warpgroup's 40 registers after setmaxnreg hold its walk and the rests' loop.
TEST_F(ShippedGemmTest, GemmF32HopperCandidatesCompile) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  // (shape, kind) -> the shape and the kind's point of most stages there.
  std::map<std::vector<int64_t>, std::pair<Shape, Config>> kinds;
  for (const Shape& shape : {Shape{{"m", 200}, {"n", 1003}, {"k", 4112}},
                             Shape{{"m", 1}, {"n", 4096}, {"k", 4096}}}) {
    ASSERT_OK_AND_ASSIGN(SearchSpace space,
                         EnumerateSearchSpace(gemm_, DType::kF32, shape, target));
    for (const Config& c : space.configs) {
      const auto p = [&](const char* name) { return c.params.at(name); };
      if (p("WGMMA") == 0) continue;
      const std::vector<int64_t> kind = {shape.at("m"), p("BM"),      p("BN"),
                                         p("SWAP"),     p("CLUSTER"), p("SHARE_W"),
                                         p("SPLIT_K") > 1, p("TAIL")};
      auto [it, added] = kinds.try_emplace(kind, shape, c);
      if (!added && p("STAGES") > it->second.second.params.at("STAGES")) it->second.second = c;
    }
  }
  EXPECT_GE(kinds.size(), 40u);
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (const auto& [kind, point] : kinds) {
    const auto& [shape, c] = point;
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kF32, shape, c, target));
    ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
    what.push_back(absl::StrCat("f32 ", ConfigString(c)));
    requests.push_back(BuildCompileRequest(*bound.instance));
  }
  ExpectAllCompile(compiler_.get(), what, std::move(requests), /*no_spills=*/true);
}

}  // namespace
}  // namespace ktune
