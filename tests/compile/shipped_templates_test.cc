// Every shipped template compiles: each dtype x each valid param point at default knobs (a
// covering sample of them for spaces past 128 points, see CompiledPoints), at each dim's
// example shape, for sm_90 and sm_90a, plus each reference. No GPU needed; a template edit
// that breaks one instantiation fails here, naming it. A template whose program cannot differ
// between the two targets (SameOnBothTargets) has its sm_90a points sampled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/compile/cache_key.h"
#include "server/compile/compile_pool.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::SizeIs;
using ::testing::StartsWith;

struct Item {
  std::string group;  // "rmsnorm bf16 sm_90a"
  std::string what;   // the config, or "reference"
  CompileRequest request;
};

struct GroupSummary {
  int compiles = 0;
  int spilling = 0;
  int64_t max_registers = 0;
  double compile_s = 0;  // NVRTC's time summed: where this test's (and CI's) time goes
};

// The points of a group that are compiled: all of them up to kAllUpTo (every template but
// gemm); past that a sample that has every value of every param at least once (greedy, in
// enumeration order) and then evenly spaced points up to kSample. gemm has ~150 valid points
// per dtype and target at its example shape: ~600 compiles, past a CI machine's per-test
// limit on two busy cores.
constexpr size_t kAllUpTo = 128;
constexpr size_t kSample = 64;
// A template's points on its second target when the program is the same on both (below):
// every value of every param, then evenly spaced points up to this many.
constexpr size_t kSecondTargetSample = 16;

std::vector<Config> CompiledPoints(const std::vector<Config>& all, size_t all_up_to = kAllUpTo,
                                   size_t sample = kSample) {
  if (all.size() <= all_up_to) return all;
  std::vector<bool> taken(all.size(), false);
  std::set<std::pair<std::string, int64_t>> covered;
  std::vector<Config> out;
  for (size_t i = 0; i < all.size(); ++i) {
    bool adds = false;
    for (const auto& [name, value] : all[i].params) adds |= !covered.count({name, value});
    if (!adds) continue;
    for (const auto& [name, value] : all[i].params) covered.insert({name, value});
    taken[i] = true;
    out.push_back(all[i]);
  }
  const size_t step = all.size() / sample + 1;
  for (size_t i = 0; i < all.size() && out.size() < sample; i += step) {
    if (!taken[i]) out.push_back(all[i]);
  }
  return out;
}

// Whether a shared header (under the registry's include folder) tests an arch-specific
// feature macro (__CUDA_ARCH_FEAT_...).
bool HeadersTestArchFeatures(const TemplateRegistry& registry) {
  if (registry.include_dir().empty()) return false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(registry.include_dir())) {
    if (!e.is_regular_file()) continue;
    absl::StatusOr<std::string> text = ReadFile(e.path().string());
    EXPECT_TRUE(text.ok()) << text.status();
    if (text.ok() && absl::StrContains(*text, "__CUDA_ARCH_FEAT")) return true;
  }
  return false;
}

// Whether a template compiles one program for sm_90 and sm_90a: its manifest never reads
// KTUNE_ARCH_SPECIFIC (so both targets bind the same points and defines) and neither its
// source nor a shared header tests an arch-specific feature macro. Then its sm_90a compile of
// a point differs from the sm_90 one only in the instruction set ptxas is told, and a sample
// of them stands for all (about a third of this test's time).
bool SameOnBothTargets(const KernelTemplate& t, bool headers_test_arch_features) {
  return !headers_test_arch_features &&
         !absl::StrContains(t.manifest().DebugString(), "KTUNE_ARCH_SPECIFIC") &&
         !absl::StrContains(t.source(), "__CUDA_ARCH_FEAT");
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

TEST(ShippedTemplatesTest, EveryParamPointAndReferenceCompiles) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry,
                       LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  for (const absl::Status& e : registry->errors()) ADD_FAILURE() << e;
  ASSERT_THAT(registry->errors(), IsEmpty());
  ASSERT_THAT(registry->templates(), Contains(Key("elementwise")));
  ASSERT_THAT(registry->templates(), Contains(Key("rmsnorm")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler, NewTemplateCompiler(*registry, nullptr));

  const bool headers_test_arch_features = HeadersTestArchFeatures(*registry);
  std::vector<Item> items;
  std::set<std::string> keys;  // a reference is the same compile for both targets
  for (const auto& [name, tmpl] : registry->templates()) {
    Shape shape;
    for (const v1::Dim& d : tmpl->manifest().dims()) shape[d.name()] = d.example();
    for (DType dtype : tmpl->dtypes()) {
      ASSERT_OK(ValidateRequest(*tmpl, dtype, shape)) << name;
      // A template may serve a dtype on one of the targets only (gemm's fp8 needs sm_90a),
      // but on one at least.
      size_t points = 0;
      for (const std::string arch : {"sm_90", "sm_90a"}) {
        const std::string group = absl::StrCat(name, " ", DTypeName(dtype), " ", arch);
        SCOPED_TRACE(group);
        ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch(arch));
        Knobs knobs = DefaultConfig(*tmpl, target).knobs;
        knobs.target = arch;
        ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateParams(tmpl, dtype, shape, target, knobs));
        points += space.configs.size();
        const bool second_of_same =
            arch == "sm_90a" && SameOnBothTargets(*tmpl, headers_test_arch_features);
        for (const Config& config :
             second_of_same ? CompiledPoints(space.configs, 0, kSecondTargetSample)
                            : CompiledPoints(space.configs)) {
          ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(tmpl, dtype, shape, config, target));
          ASSERT_TRUE(bound.instance) << ConfigString(config) << ": " << bound.rejected_because;
          CompileRequest request = BuildCompileRequest(*bound.instance);
          ASSERT_THAT(request.options, Contains(absl::StrCat("--gpu-architecture=", arch)));
          keys.insert(CompileCacheKey(request, compiler->Identity()));
          items.push_back({group, ConfigString(config), std::move(request)});
        }
        ASSERT_OK_AND_ASSIGN(Instance reference, BindReference(tmpl, dtype, shape, target));
        CompileRequest request = BuildCompileRequest(reference);
        if (keys.insert(CompileCacheKey(request, compiler->Identity())).second) {
          items.push_back({group, "reference", std::move(request)});
        }
      }
      EXPECT_GT(points, 0u) << name << " " << DTypeName(dtype) << ": no valid param point at "
                            << ShapeString(shape) << " on either target";
    }
  }

  std::vector<CompileRequest> requests;
  for (const Item& item : items) requests.push_back(item.request);
  CompilePool pool(compiler.get(), /*threads=*/0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(std::move(requests));
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(results.size(), items.size());

  std::map<std::string, GroupSummary> summary;
  int spilling = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    SCOPED_TRACE(absl::StrCat(item.group, " ", item.what));
    ASSERT_OK(results[i]);
    const CompileResult& r = *results[i];
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_THAT(r.cubin, StartsWith("\x7f"
                                    "ELF"));
    ASSERT_THAT(r.kernels, SizeIs(item.request.name_expressions.size()));
    GroupSummary& g = summary[item.group];
    ++g.compiles;
    g.compile_s += r.compile_ms / 1000;
    bool spills = false;
    for (const CompiledKernel& k : r.kernels) {
      EXPECT_THAT(k.lowered_name, StartsWith("_Z"));
      EXPECT_EQ(k.resources.mangled_name, k.lowered_name) << "no ptxas report:\n" << r.log;
      EXPECT_GT(k.resources.registers, 0);
      g.max_registers = std::max(g.max_registers, k.resources.registers);
      if (k.resources.spill_stores + k.resources.spill_loads > 0) {
        spills = true;
        std::printf("  spills: %s %s: %lld B stores, %lld B loads, %lld registers\n",
                    item.group.c_str(), item.what.c_str(),
                    static_cast<long long>(k.resources.spill_stores),
                    static_cast<long long>(k.resources.spill_loads),
                    static_cast<long long>(k.resources.registers));
      }
    }
    g.spilling += spills;
    spilling += spills;
  }

  std::printf("%-28s %8s %8s %8s %9s\n", "TEMPLATE DTYPE TARGET", "COMPILES", "SPILLING",
              "MAX-REGS", "NVRTC-S");
  for (const auto& [group, g] : summary) {
    std::printf("%-28s %8d %8d %8lld %9.1f\n", group.c_str(), g.compiles, g.spilling,
                static_cast<long long>(g.max_registers), g.compile_s);
  }
  std::printf("%zu compiles (%d spilling at default knobs) on %d threads in %.1f s\n", items.size(),
              spilling, pool.threads(), wall_s);
  RecordProperty("compiles", static_cast<int>(items.size()));
  RecordProperty("spilling", spilling);
  RecordProperty("wall_ms", static_cast<int>(wall_s * 1000));
}

// gemm's TAIL (the last wave's tiles split along K) binds only at shapes of more tiles than
// one wave, which the example shape is not: one candidate of each epilogue and cluster
// choice with TAIL 1, every dtype, at the GPU check's m 1100 x n 2056 x k 272, compiles.
TEST(ShippedTemplatesTest, GemmTailCandidatesCompile) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry,
                       LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> gemm, registry->Get("gemm"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler, NewTemplateCompiler(*registry, nullptr));
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90a"));
  const Shape shape = {{"m", 1100}, {"n", 2056}, {"k", 272}};
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (DType dtype : gemm->dtypes()) {
    ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm, dtype, shape, target));
    std::set<std::pair<int64_t, int64_t>> kinds;  // (EPI, CLUSTER) taken
    for (const Config& c : space.configs) {
      if (c.params.at("TAIL") != 1) continue;
      if (!kinds.insert({c.params.at("EPI"), c.params.at("CLUSTER")}).second) continue;
      ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm, dtype, shape, c, target));
      ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
      what.push_back(absl::StrCat(DTypeName(dtype), " ", ConfigString(c)));
      requests.push_back(BuildCompileRequest(*bound.instance));
    }
    EXPECT_EQ(kinds.size(), 4u) << DTypeName(dtype) << ": EPI 0/1 x CLUSTER 1/2 with TAIL 1";
  }
  CompilePool pool(compiler.get(), /*threads=*/0);
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(std::move(requests));
  ASSERT_EQ(results.size(), what.size());
  for (size_t i = 0; i < what.size(); ++i) {
    SCOPED_TRACE(what[i]);
    ASSERT_OK(results[i]);
    EXPECT_TRUE(results[i]->ok) << results[i]->log;
  }
}

}  // namespace
}  // namespace ktune
