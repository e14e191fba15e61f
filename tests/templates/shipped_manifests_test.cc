// The shipped norm and softmax templates (add_rmsnorm, layernorm, softmax) load, have
// candidates at decode (one row) and prefill (16384 rows) shapes for every dtype, serve
// their default config there (what FALLBACK answers before tuning), and reject bad shapes
// naming the dim. No GPU, no compiling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/templates/shape.h"
#include "tests/templates/shipped_registry.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // decode and prefill
  Shape zero;                 // a dim at 0
  Shape over;                 // a dim past its max
  std::string over_dim;
};

std::vector<Case> Cases() {
  return {
      {"add_rmsnorm",
       {{{"tokens", 1}, {"hidden", 4096}},
        {{"tokens", 1}, {"hidden", 8192}},
        {{"tokens", 16384}, {"hidden", 4096}},
        {{"tokens", 16384}, {"hidden", 8192}}},
       {{"tokens", 16}, {"hidden", 0}},
       {{"tokens", 16}, {"hidden", 65537}},
       "hidden"},
      {"layernorm",
       {{{"tokens", 1}, {"hidden", 4096}, {"with_bias", 1}},
        {{"tokens", 1}, {"hidden", 8192}, {"with_bias", 0}},
        {{"tokens", 16384}, {"hidden", 4096}, {"with_bias", 0}},
        {{"tokens", 16384}, {"hidden", 8192}, {"with_bias", 1}}},
       {{"tokens", 16}, {"hidden", 0}, {"with_bias", 1}},
       {{"tokens", 16}, {"hidden", 4096}, {"with_bias", 2}},
       "with_bias"},
      {"softmax",
       {{{"rows", 1}, {"cols", 32000}, {"out_bytes", 4}},
        {{"rows", 1}, {"cols", 128256}, {"out_bytes", 4}},
        {{"rows", 16384}, {"cols", 32000}, {"out_bytes", 4}},
        {{"rows", 16384}, {"cols", 128256}, {"out_bytes", 4}},
        {{"rows", 4096}, {"cols", 262144}, {"out_bytes", 4}},
        {{"rows", 7}, {"cols", 1}, {"out_bytes", 4}}},
       {{"rows", 16}, {"cols", 0}, {"out_bytes", 4}},
       {{"rows", 16}, {"cols", 262145}, {"out_bytes", 4}},
       "cols"},
  };
}

class ShippedManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = testing::LoadShippedRegistry();
    ASSERT_NE(registry_, nullptr);
  }
  std::unique_ptr<TemplateRegistry> registry_;
};

TEST_F(ShippedManifestsTest, SearchSpacesAtDecodeAndPrefillShapes) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  for (const Case& c : Cases()) {
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get(c.name));
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (Shape shape : c.shapes) {
        // f16/bf16 softmax also with its own-type output.
        std::vector<Shape> variants = {shape};
        if (shape.count("out_bytes") && dtype != DType::kF32) {
          variants.push_back(shape);
          variants.back()["out_bytes"] = 2;
        }
        for (const Shape& s : variants) {
          SCOPED_TRACE(absl::StrCat(c.name, " ", DTypeName(dtype), " ", ShapeString(s)));
          ASSERT_OK(ValidateRequest(*tmpl, dtype, s));
          ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(tmpl, dtype, s, target));
          EXPECT_GT(space.configs.size(), 0u);
          ASSERT_OK(BindReference(tmpl, dtype, s, target).status());
          // The default config binds wherever the row is a multiple of 4 and >= 1024 long.
          const int64_t len = s.count("hidden") ? s.at("hidden") : s.at("cols");
          if (len % 4 == 0 && len >= 1024) {
            ASSERT_OK_AND_ASSIGN(BindResult bound,
                                 Bind(tmpl, dtype, s, DefaultConfig(*tmpl, target), target));
            EXPECT_TRUE(bound.instance) << bound.rejected_because;
          }
        }
      }
    }
  }
}

// Every shipped kernel waits for the kernel before it before touching memory
// (ktune/grid_dependency.cuh), so every candidate's launches may be programmatic where
// griddepcontrol exists (sm_90 on) and none before; the reference never is. Every shipped
// template at its manifest's example shape; gemm, whose spaces are larger, at its default
// config.
TEST_F(ShippedManifestsTest, LaunchesAreProgrammaticFromSm90On) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch(arch));
    for (const auto& [name, tmpl] : registry_->templates()) {
      Shape shape;
      for (const v1::Dim& d : tmpl->manifest().dims()) shape[d.name()] = d.example();
      SCOPED_TRACE(absl::StrCat(name, " ", ShapeString(shape), " on ", arch));
      std::vector<Config> configs;
      if (name == "gemm") {
        ASSERT_OK_AND_ASSIGN(Config config,
                             DefaultConfigFor(tmpl, DType::kBF16, shape, target));
        configs.push_back(config);
      } else {
        ASSERT_OK_AND_ASSIGN(SearchSpace space,
                             EnumerateSearchSpace(tmpl, DType::kBF16, shape, target));
        configs = space.configs;
      }
      int bound = 0;
      for (const Config& config : configs) {
        ASSERT_OK_AND_ASSIGN(BindResult r, Bind(tmpl, DType::kBF16, shape, config, target));
        if (!r.instance) continue;
        ++bound;
        for (const BoundLaunch& l : r.instance->launches) {
          EXPECT_EQ(l.programmatic, target.sm >= 90) << l.name_expression;
        }
      }
      EXPECT_GT(bound, 0);
      ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(tmpl, DType::kBF16, shape, target));
      for (const BoundLaunch& l : ref.launches) EXPECT_FALSE(l.programmatic);
    }
  }
}

// The enumeration counts whole subtrees of params that a constraint of the params alone
// rejects, without binding them; binding every point and knob choice must find the same
// candidates in the same order, as many points, and each rejected one under the same
// reason. Every shipped template at decode and prefill shapes (odd ones included: they
// reach the edge params), on sm_90 and sm_90a.
TEST_F(ShippedManifestsTest, EnumerationMatchesBindingEveryPoint) {
  std::vector<std::pair<std::string, std::vector<Shape>>> cases;
  for (const Case& c : Cases()) cases.emplace_back(c.name, c.shapes);
  cases.push_back({"rmsnorm", {{{"tokens", 64}, {"hidden", 4097}}, {{"tokens", 7}, {"hidden", 4096}}}});
  cases.push_back({"silu_and_mul", {{{"tokens", 4096}, {"inter", 14338}}}});
  cases.push_back({"gemm", {{{"m", 77}, {"n", 1000}, {"k", 4112}}, {{"m", 4096}, {"n", 4096}, {"k", 4096}}}});
  cases.push_back({"gemv", {{{"n", 6144}, {"k", 4096}, {"batch", 3}}}});
  cases.push_back({"elementwise", {{{"n", 4097}}, {{"n", 1 << 24}}}});
  for (const char* rope : {"rope", "rope_qkv"}) {
    cases.push_back({rope, {{{"tokens", 77}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128},
                             {"interleaved", 0}}}});
  }
  for (const char* arch : {"sm_90", "sm_90a"}) {
    ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch(arch));
    for (const auto& [name, shapes] : cases) {
      ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get(name));
      const DType dtype = tmpl->dtypes().back();
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(absl::StrCat(name, " ", ShapeString(shape), " ", arch));
        ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(tmpl, dtype, shape, target));
        std::vector<Config> every;
        std::map<std::string, int64_t> why;  // as SearchSpace groups reasons: digits as N
        int64_t points = 0;
        const auto& params = tmpl->manifest().params();
        std::vector<int> idx(params.size(), 0);
        for (bool more = true; more;) {
          Config config;
          for (int i = 0; i < params.size(); ++i) {
            config.params[params[i].name()] = params[i].values(idx[i]);
          }
          for (const Knobs& k : KnobChoices(*tmpl, target)) {
            ++points;
            config.knobs = k;
            ASSERT_OK_AND_ASSIGN(BindResult r, Bind(tmpl, dtype, shape, config, target));
            if (r.instance) {
              every.push_back(config);
            } else {
              ++why[ReasonGroup(r.rejected_because)];
            }
          }
          int i = 0;
          for (; i < params.size() && ++idx[i] == params[i].values_size(); ++i) idx[i] = 0;
          more = i < params.size();
        }
        EXPECT_EQ(space.configs, every);
        EXPECT_EQ(space.points, points);
        EXPECT_EQ(space.rejected, why);  // each point under the reason binding it gives
        int64_t rejected = 0;
        for (const auto& [why, count] : space.rejected) rejected += count;
        EXPECT_EQ(rejected + static_cast<int64_t>(space.configs.size()), points);
      }
    }
  }
}

TEST_F(ShippedManifestsTest, BadShapesNameTheDim) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get(c.name));
    const std::string zero_dim = c.zero.count("hidden") ? "hidden" : "cols";
    EXPECT_THAT(ValidateRequest(*tmpl, DType::kBF16, c.zero),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("dim '", zero_dim, "' = 0 is outside"))));
    EXPECT_THAT(ValidateRequest(*tmpl, DType::kBF16, c.over),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("dim '", c.over_dim, "'"))));
    Shape missing = c.shapes.front();
    missing.erase(missing.begin());
    EXPECT_THAT(ValidateRequest(*tmpl, DType::kBF16, missing),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing dim")));
  }
}

// out_bytes other than the dtype's size or 4 passes the dim's range but no candidate: the
// search space is empty and says why.
TEST_F(ShippedManifestsTest, SoftmaxOutBytesMustNameATypeSize) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("softmax"));
  for (auto [dtype, out_bytes] : {std::pair{DType::kBF16, 3}, std::pair{DType::kF32, 2}}) {
    const Shape shape = {{"rows", 16}, {"cols", 4096}, {"out_bytes", out_bytes}};
    ASSERT_OK(ValidateRequest(*tmpl, dtype, shape));
    ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(tmpl, dtype, shape, target));
    EXPECT_THAT(space.configs, IsEmpty());
    EXPECT_EQ(space.rejected.count("constraint 'out_bytes == sizeof(dtype) || out_bytes == N'"),
              1u);
  }
}

// The split variants bind as the manifest says: a cluster (one launch) when the slices are
// cached, two launches sharing the scratch buffer when not; the scratch size depends on the
// shape alone, so candidate and reference agree on it.
TEST_F(ShippedManifestsTest, SoftmaxSplitLaunches) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("softmax"));
  const Shape shape = {{"rows", 4}, {"cols", 128256}, {"out_bytes", 2}};
  Config config = DefaultConfig(*tmpl, target);
  config.params = {{"BLOCK", 512}, {"VEC", 8}, {"ROWS_PER_WARP", 0},
                   {"CACHE", 0},   {"SPLIT", 16}, {"EDGE", 0}};
  ASSERT_OK_AND_ASSIGN(BindResult split, Bind(tmpl, DType::kBF16, shape, config, target));
  ASSERT_TRUE(split.instance) << split.rejected_because;
  ASSERT_EQ(split.instance->launches.size(), 2u);
  EXPECT_EQ(split.instance->launches[0].grid[0], 4 * 16);
  ASSERT_OK_AND_ASSIGN(Instance reference, BindReference(tmpl, DType::kBF16, shape, target));
  for (size_t i = 0; i < reference.args.size(); ++i) {
    EXPECT_EQ(reference.args[i].count, split.instance->args[i].count) << reference.args[i].name;
  }

  config.params = {{"BLOCK", 1024}, {"VEC", 8}, {"ROWS_PER_WARP", 0},
                   {"CACHE", 2},    {"SPLIT", 8}, {"EDGE", 0}};
  ASSERT_OK_AND_ASSIGN(BindResult cluster, Bind(tmpl, DType::kBF16, shape, config, target));
  ASSERT_TRUE(cluster.instance) << cluster.rejected_because;
  ASSERT_EQ(cluster.instance->launches.size(), 1u);
  EXPECT_THAT(cluster.instance->launches[0].name_expression,
              HasSubstr("softmax_cluster_kernel<__nv_bfloat16, 1024, 8, 2, 8, 0>"));
}

// gemv's tensor-core kernel: one launch of 16 * ROWS rows per block (and split-K's reduction
// after it); f16/bf16 only, so an f32 request never gets it.
TEST_F(ShippedManifestsTest, GemvMmaLaunches) {
  ASSERT_OK_AND_ASSIGN(TargetInfo target, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("gemv"));
  const Shape shape = {{"n", 4100}, {"k", 4096}, {"batch", 3}};
  Config config = DefaultConfig(*tmpl, target);
  config.params = {{"MMA", 1},     {"BLOCK", 256}, {"TPR", 32},    {"ROWS", 2},
                   {"VEC_BYTES", 16}, {"UNROLL", 2}, {"SPLIT_K", 2}, {"BATCH", 8}};
  ASSERT_OK_AND_ASSIGN(BindResult mma, Bind(tmpl, DType::kBF16, shape, config, target));
  ASSERT_TRUE(mma.instance) << mma.rejected_because;
  ASSERT_EQ(mma.instance->launches.size(), 2u);
  EXPECT_THAT(mma.instance->launches[0].name_expression,
              HasSubstr("gemv_mma_kernel<__nv_bfloat16, 256, 2, 2, 2>"));
  EXPECT_EQ(mma.instance->launches[0].grid[0], (4100 + 31) / 32);
  EXPECT_EQ(mma.instance->launches[0].grid[1], 2);
  EXPECT_THAT(mma.instance->launches[1].name_expression, HasSubstr("gemv_splitk_reduce"));

  ASSERT_OK_AND_ASSIGN(BindResult f32, Bind(tmpl, DType::kF32, shape, config, target));
  EXPECT_FALSE(f32.instance);
  EXPECT_THAT(f32.rejected_because, HasSubstr("sizeof(dtype) == 2"));
}

}  // namespace
}  // namespace ktune
