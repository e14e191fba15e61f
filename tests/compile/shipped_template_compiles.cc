// CompileShippedTemplates and its helpers (see shipped_template_compiles.h).
#include "tests/compile/shipped_template_compiles.h"

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
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/compile/cache_key.h"
#include "server/compile/compile_pool.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune::testing {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::SizeIs;
using ::testing::StartsWith;

namespace {

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

}  // namespace

std::vector<Config> CompiledPoints(const std::vector<Config>& all, size_t all_up_to,
                                   size_t sample) {
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

bool SameOnBothTargets(const KernelTemplate& t, bool headers_test_arch_features) {
  return !headers_test_arch_features &&
         !absl::StrContains(t.manifest().DebugString(), "KTUNE_ARCH_SPECIFIC") &&
         !absl::StrContains(t.source(), "__CUDA_ARCH_FEAT");
}

void ExpectAllCompile(Compiler* compiler, const std::vector<std::string>& what,
                      std::vector<CompileRequest> requests, bool no_spills) {
  CompilePool pool(compiler, /*threads=*/0);
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(std::move(requests));
  ASSERT_EQ(results.size(), what.size());
  for (size_t i = 0; i < what.size(); ++i) {
    SCOPED_TRACE(what[i]);
    ASSERT_OK(results[i]);
    ASSERT_TRUE(results[i]->ok) << results[i]->log;
    EXPECT_THAT(results[i]->cubin, StartsWith("\x7f"
                                              "ELF"));
    if (!no_spills) continue;
    for (const CompiledKernel& k : results[i]->kernels) {
      EXPECT_EQ(k.resources.spill_stores + k.resources.spill_loads, 0) << k.lowered_name;
    }
  }
}

void CompileShippedTemplates(const PointSample& sample) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> registry,
                       LoadTemplateRegistry(ShippedTemplatesDir()));
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
             second_of_same
                 ? CompiledPoints(space.configs, 0, sample.second_target_sample)
                 : CompiledPoints(space.configs, sample.all_up_to, sample.sample)) {
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
  ::testing::Test::RecordProperty("compiles", static_cast<int>(items.size()));
  ::testing::Test::RecordProperty("spilling", spilling);
  ::testing::Test::RecordProperty("wall_ms", static_cast<int>(wall_s * 1000));
}

}  // namespace ktune::testing
