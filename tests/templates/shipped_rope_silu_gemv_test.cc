// The shipped silu_and_mul, rope and gemv templates: they load, their search spaces at
// decode and prefill shapes are non-empty and hold their default config, out-of-range
// shapes are rejected naming the dim, and gemv's split-K is two launches. No GPU or
// compiler needed (tests/compile/shipped_templates_test.cc compiles them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "tests/templates/shipped_registry.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;

class ShippedRopeSiluGemvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = testing::LoadShippedRegistry();
    ASSERT_NE(registry_, nullptr);
  }

  std::shared_ptr<const KernelTemplate> Get(const std::string& name) {
    auto it = registry_->templates().find(name);
    EXPECT_NE(it, registry_->templates().end()) << name << " did not load";
    return it == registry_->templates().end() ? nullptr : it->second;
  }

  // Every dtype of `name` at `shape`: a valid request, a non-empty search space on sm_90,
  // and the default config (what FALLBACK serves) among its points.
  void ExpectSearchable(const std::string& name, const Shape& shape) {
    std::shared_ptr<const KernelTemplate> t = Get(name);
    ASSERT_NE(t, nullptr);
    const TargetInfo target = *TargetFromArch("sm_90");
    for (DType dtype : t->dtypes()) {
      SCOPED_TRACE(absl::StrCat(name, " ", DTypeName(dtype), " ", ShapeString(shape)));
      ASSERT_OK(ValidateRequest(*t, dtype, shape));
      ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(t, dtype, shape, target));
      EXPECT_GT(space.configs.size(), 0u);
      const Config d = DefaultConfig(*t, target);
      EXPECT_THAT(space.configs, Contains(d)) << ConfigString(d);
      ASSERT_OK_AND_ASSIGN(Instance reference, BindReference(t, dtype, shape, target));
      EXPECT_EQ(reference.launches.size(), 1u);
    }
  }

  // silu_and_mul's bf16 candidates with GRID_STRIDE `grid_stride` at `shape`: each binds
  // and launches a 1-D grid of `blocks(config, vector elements, tile vectors)` blocks.
  // Returns how many there are.
  int ExpectSiluGrids(const Shape& shape, int64_t grid_stride,
                      const std::function<int64_t(const Config&, int64_t, int64_t)>& blocks) {
    std::shared_ptr<const KernelTemplate> t = Get("silu_and_mul");
    if (t == nullptr) return 0;
    const TargetInfo target = *TargetFromArch("sm_90");
    absl::StatusOr<SearchSpace> space = EnumerateSearchSpace(t, DType::kBF16, shape, target);
    EXPECT_OK(space.status());
    if (!space.ok()) return 0;
    int count = 0;
    for (const Config& c : space->configs) {
      if (c.params.at("GRID_STRIDE") != grid_stride) continue;
      ++count;
      absl::StatusOr<BindResult> bound = Bind(t, DType::kBF16, shape, c, target);
      EXPECT_OK(bound.status());
      if (!bound.ok()) continue;
      EXPECT_TRUE(bound->instance) << bound->rejected_because;
      if (!bound->instance) continue;
      const int64_t vec = c.params.at("VEC_BYTES") / 2;
      const int64_t tile = c.params.at("BLOCK") * c.params.at("UNROLL");
      EXPECT_EQ(bound->instance->launches[0].grid[0], blocks(c, vec, tile)) << ConfigString(c);
      EXPECT_EQ(bound->instance->launches[0].grid[1], 1) << ConfigString(c);
    }
    return count;
  }

  std::unique_ptr<TemplateRegistry> registry_;
};

TEST_F(ShippedRopeSiluGemvTest, AllThreeLoad) {
  EXPECT_THAT(registry_->templates(), Contains(Key("silu_and_mul")));
  EXPECT_THAT(registry_->templates(), Contains(Key("rope")));
  EXPECT_THAT(registry_->templates(), Contains(Key("rope_qkv")));
  EXPECT_THAT(registry_->templates(), Contains(Key("gemv")));
}

TEST_F(ShippedRopeSiluGemvTest, SiluAndMulSearchSpaces) {
  for (int64_t tokens : {1, 16, 256, 4096, 16384}) {
    ExpectSearchable("silu_and_mul", {{"tokens", tokens}, {"inter", 14336}});
  }
  ExpectSearchable("silu_and_mul", {{"tokens", 4096}, {"inter", 11008}});
}

TEST_F(ShippedRopeSiluGemvTest, SiluAndMulRowMajorGridHasABlockPerTile) {
  // GRID_STRIDE 2: one block per tile, the tiles of a row consecutive in a 1-D grid. Only
  // where it differs from the row-wise grid: more than one row and more than one tile a row.
  std::shared_ptr<const KernelTemplate> t = Get("silu_and_mul");
  ASSERT_NE(t, nullptr);
  const TargetInfo target = *TargetFromArch("sm_90");
  for (int64_t inter : {14336, 14338, 4097}) {
    const int row_major = ExpectSiluGrids(
        {{"tokens", 4096}, {"inter", inter}}, 2, [&](const Config& c, int64_t vec, int64_t tile) {
          const int64_t tiles = (inter / vec + tile - 1) / tile;
          EXPECT_GT(tiles, 1) << ConfigString(c);
          return 4096 * tiles;
        });
    EXPECT_GT(row_major, 0) << "inter " << inter;
  }
  ASSERT_OK_AND_ASSIGN(SearchSpace decode,
                       EnumerateSearchSpace(t, DType::kBF16, {{"tokens", 1}, {"inter", 14336}},
                                            target));
  for (const Config& c : decode.configs) EXPECT_NE(c.params.at("GRID_STRIDE"), 2);
  // A flat grid past CUDA's 2^31 - 1 blocks is left out by the binder's grid check.
  ASSERT_OK_AND_ASSIGN(SearchSpace huge,
                       EnumerateSearchSpace(t, DType::kBF16,
                                            {{"tokens", 2147483647}, {"inter", 4096}}, target));
  EXPECT_FALSE(huge.configs.empty());  // the row-wise grid still serves it
  for (const Config& c : huge.configs) EXPECT_NE(c.params.at("GRID_STRIDE"), 2);
}

TEST_F(ShippedRopeSiluGemvTest, SiluAndMulFlatGridCutsTheVectorsNotTheRows) {
  // GRID_STRIDE 3: out's vectors in tiles that run on across rows, one block per tile, with
  // more than one row. Aligned rows (EDGE 0): the tokens x inter / VEC vectors, only where
  // rows are no whole number of tiles (elsewhere it is the row-major grid's blocks). Odd
  // rows (EDGE 1): the tokens * inter elements as whole vectors from out's base (the last <
  // VEC go to the last block), any tile, rows of at least one vector, shifts found at run
  // time (PER_SHIFT 0).
  const auto flat_blocks = [](const Shape& shape) {
    return [shape](const Config& c, int64_t vec, int64_t tile) {
      const int64_t tokens = shape.at("tokens"), inter = shape.at("inter");
      EXPECT_GT(tokens, 1) << ConfigString(c);
      if (c.params.at("EDGE") == 0) {
        EXPECT_NE((inter / vec) % tile, 0) << ConfigString(c);
        return (tokens * (inter / vec) + tile - 1) / tile;
      }
      EXPECT_EQ(c.params.at("EDGE"), 1) << ConfigString(c);
      EXPECT_NE(inter % vec, 0) << ConfigString(c);
      EXPECT_GE(inter, vec) << ConfigString(c);
      EXPECT_EQ(c.params.at("PER_SHIFT"), 0) << ConfigString(c);
      return (tokens * inter / vec + tile - 1) / tile;
    };
  };
  for (int64_t tokens : {4096, 7}) {
    for (int64_t inter : {14338, 14337, 14336, 1000, 9, 3}) {
      const Shape shape = {{"tokens", tokens}, {"inter", inter}};
      // 14336 is 1792 16-byte vectors: tiles of 512 and 1024 leave part of one per row.
      EXPECT_GT(ExpectSiluGrids(shape, 3, flat_blocks(shape)), 0)
          << "tokens " << tokens << " inter " << inter;
    }
  }
  // One row has no flat candidate, and at 8192 (1024 16-byte vectors a row) only tiles that
  // do not divide the row are (those wider than it among them: rows share their blocks).
  const Shape decode = {{"tokens", 1}, {"inter", 14338}};
  EXPECT_EQ(ExpectSiluGrids(decode, 3, flat_blocks(decode)), 0);
  const Shape aligned = {{"tokens", 4096}, {"inter", 8192}};
  ExpectSiluGrids(aligned, 3, flat_blocks(aligned));
  // A row of 5 bf16 takes 2-byte vectors aligned (EDGE 0), and flat edge vectors of 8 bytes
  // (4 elements) only: a 16-byte one is wider than the row.
  std::shared_ptr<const KernelTemplate> t = Get("silu_and_mul");
  ASSERT_NE(t, nullptr);
  ASSERT_OK_AND_ASSIGN(SearchSpace five,
                       EnumerateSearchSpace(t, DType::kBF16, {{"tokens", 7}, {"inter", 5}},
                                            *TargetFromArch("sm_90")));
  int flat_edges = 0;
  for (const Config& c : five.configs) {
    if (c.params.at("GRID_STRIDE") == 3 && c.params.at("EDGE") == 1) {
      ++flat_edges;
      EXPECT_EQ(c.params.at("VEC_BYTES"), 8) << ConfigString(c);
    }
  }
  EXPECT_GT(flat_edges, 0);
}

TEST_F(ShippedRopeSiluGemvTest, RopeSearchSpacesForBothStyles) {
  for (int64_t tokens : {1, 16, 256, 4096, 16384}) {
    for (int64_t interleaved : {0, 1}) {
      ExpectSearchable("rope", {{"tokens", tokens}, {"heads", 32}, {"kv_heads", 8},
                                {"head_dim", 128}, {"interleaved", interleaved}});
    }
  }
  ExpectSearchable("rope", {{"tokens", 4096}, {"heads", 64}, {"kv_heads", 8}, {"head_dim", 64},
                            {"interleaved", 1}});
}

// rope_qkv is rope with q and k inside fused qkv rows: the same search at the same shapes,
// and its one buffer is the whole rows, v's part included.
TEST_F(ShippedRopeSiluGemvTest, RopeQkvSearchesAsRopeDoesOverTheWholeRows) {
  const TargetInfo target = *TargetFromArch("sm_90");
  for (int64_t tokens : {1, 16, 4096}) {
    const Shape shape = {{"tokens", tokens}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128},
                         {"interleaved", 0}};
    ExpectSearchable("rope_qkv", shape);
    ASSERT_OK_AND_ASSIGN(SearchSpace fused,
                         EnumerateSearchSpace(Get("rope_qkv"), DType::kBF16, shape, target));
    ASSERT_OK_AND_ASSIGN(SearchSpace apart,
                         EnumerateSearchSpace(Get("rope"), DType::kBF16, shape, target));
    ASSERT_EQ(fused.configs.size(), apart.configs.size());
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(Get("rope_qkv"), DType::kBF16, shape,
                                                fused.configs.front(), target));
    ASSERT_TRUE(bound.instance) << bound.rejected_because;
    EXPECT_EQ(bound.instance->args.front().name, "qkv");
    EXPECT_EQ(bound.instance->args.front().count, tokens * (32 + 2 * 8) * 128);
  }
}

TEST_F(ShippedRopeSiluGemvTest, GemvSearchSpaces) {
  for (int64_t batch : {1, 2, 3, 8}) {
    ExpectSearchable("gemv", {{"n", 4096}, {"k", 4096}, {"batch", batch}});
    ExpectSearchable("gemv", {{"n", 14336}, {"k", 4096}, {"batch", batch}});
    ExpectSearchable("gemv", {{"n", 4096}, {"k", 14336}, {"batch", batch}});
    ExpectSearchable("gemv", {{"n", 128256}, {"k", 4096}, {"batch", batch}});
  }
}

TEST_F(ShippedRopeSiluGemvTest, GemvSplitKIsTwoLaunches) {
  std::shared_ptr<const KernelTemplate> t = Get("gemv");
  ASSERT_NE(t, nullptr);
  const TargetInfo target = *TargetFromArch("sm_90");
  const Shape shape = {{"n", 4096}, {"k", 4096}, {"batch", 1}};
  ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(t, DType::kBF16, shape, target));
  bool saw_split = false;
  for (const Config& c : space.configs) {
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(t, DType::kBF16, shape, c, target));
    ASSERT_TRUE(bound.instance) << bound.rejected_because;
    const Instance& inst = *bound.instance;
    const int64_t split = c.params.at("SPLIT_K");
    ASSERT_EQ(inst.launches.size(), split > 1 ? 2u : 1u) << ConfigString(c);
    EXPECT_EQ(inst.launches[0].grid[1], split);
    if (split > 1) {
      saw_split = true;
      EXPECT_THAT(inst.launches[1].name_expression, HasSubstr("gemv_splitk_reduce"));
      auto partial = std::find_if(inst.args.begin(), inst.args.end(),
                                  [](const BoundArg& a) { return a.name == "partial"; });
      ASSERT_NE(partial, inst.args.end());
      // Sized for the largest SPLIT_K whatever the candidate's: buffers follow the shape.
      EXPECT_EQ(partial->count, 4 * 4096);
    }
  }
  EXPECT_TRUE(saw_split) << "no split-K point at n = k = 4096, batch 1";
}

TEST_F(ShippedRopeSiluGemvTest, BadShapesAreRejectedNamingTheDim) {
  auto silu = Get("silu_and_mul");
  auto rope = Get("rope");
  auto gemv = Get("gemv");
  ASSERT_TRUE(silu && rope && gemv);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ValidateRequest(*silu, DType::kBF16, {{"tokens", 4}, {"inter", 0}}),
              StatusIs(kInvalid, HasSubstr("dim 'inter'")));
  EXPECT_THAT(ValidateRequest(*silu, DType::kBF16, {{"tokens", 4}}),
              StatusIs(kInvalid, HasSubstr("missing dim 'inter'")));
  const Shape rope_shape = {{"tokens", 4}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}};
  Shape bad_flag = rope_shape;
  bad_flag["interleaved"] = 2;
  EXPECT_THAT(ValidateRequest(*rope, DType::kF16, bad_flag),
              StatusIs(kInvalid, HasSubstr("dim 'interleaved'")));
  EXPECT_THAT(ValidateRequest(*rope, DType::kF16, rope_shape),
              StatusIs(kInvalid, HasSubstr("missing dim 'interleaved'")));
  EXPECT_THAT(ValidateRequest(*gemv, DType::kBF16, {{"n", 4096}, {"k", 4096}, {"batch", 9}}),
              StatusIs(kInvalid, HasSubstr("dim 'batch'")));
  EXPECT_THAT(ValidateRequest(*gemv, DType::kBF16, {{"n", 0}, {"k", 4096}, {"batch", 1}}),
              StatusIs(kInvalid, HasSubstr("dim 'n'")));
}

TEST_F(ShippedRopeSiluGemvTest, OddSizesPruneToWhatFits) {
  // An odd head_dim has no pairs to rotate: no point fits (rather than one that rotates
  // head_dim - 1 elements). An odd inter is served, by one-element vectors without edges or
  // by 8- and 16-byte vectors with them (EDGE = 1; 16-byte ones also from out's 128-byte
  // line, EDGE = 2).
  const TargetInfo target = *TargetFromArch("sm_90");
  ASSERT_OK_AND_ASSIGN(
      SearchSpace odd,
      EnumerateSearchSpace(Get("rope"), DType::kBF16,
                           {{"tokens", 4}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 63},
                            {"interleaved", 0}},
                           target));
  EXPECT_THAT(odd.configs, IsEmpty());
  ASSERT_OK_AND_ASSIGN(
      SearchSpace odd_inter,
      EnumerateSearchSpace(Get("silu_and_mul"), DType::kBF16, {{"tokens", 4}, {"inter", 4097}},
                           target));
  int edges = 0;
  for (const Config& c : odd_inter.configs) {
    if (c.params.at("VEC_BYTES") == 2) {
      EXPECT_EQ(c.params.at("EDGE"), 0);
    } else {
      const int64_t edge = c.params.at("EDGE");
      EXPECT_TRUE(edge == 1 || edge == 2) << ConfigString(c);
      if (edge == 2) {
        EXPECT_EQ(c.params.at("VEC_BYTES"), 16) << ConfigString(c);
      }
      EXPECT_GE(c.params.at("VEC_BYTES"), 8) << ConfigString(c);
      ++edges;
    }
  }
  EXPECT_GT(edges, 0);
}

}  // namespace
}  // namespace ktune
