// The row templates' edge paths (param EDGE: rows whose length is no multiple of the vector
// width keep their vector accesses, the unaligned head and tail elements taken in scalar
// ones). At the example shape, whose row lengths are multiples of every VEC, EDGE is never
// 1, so the space is what it was without it; at an odd shape every vector wider than one
// element goes through EDGE = 1 or 2 (whose body starts on a 128-byte line), the default
// config serves the shape (FALLBACK before any tuning), and a covering sample of the edge
// candidates compiles for every dtype. No GPU needed; the GPU check (kernels_gpu_test) runs
// them at odd shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/dtype.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/compile/shipped_template_compiles.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::IsEmpty;
using testing::ExpectAllCompile;

// The templates with an edge path, and each one's row-length dim.
const std::vector<std::pair<std::string, std::string>>& EdgeTemplates() {
  static const auto* all = new std::vector<std::pair<std::string, std::string>>{
      {"softmax", "cols"},    {"rmsnorm", "hidden"},     {"add_rmsnorm", "hidden"},
      {"layernorm", "hidden"}, {"silu_and_mul", "inter"}};
  return *all;
}

Shape ExampleShape(const KernelTemplate& tmpl) {
  Shape shape;
  for (const v1::Dim& d : tmpl.manifest().dims()) shape[d.name()] = d.example();
  return shape;
}

// Elements per vector access of a config: VEC, or VEC_BYTES over the element size.
int64_t VectorElements(const Config& c, DType dtype) {
  auto vec = c.params.find("VEC");
  if (vec != c.params.end()) return vec->second;
  return c.params.at("VEC_BYTES") / DTypeSize(dtype);
}

// The configs of `all` with edges (EDGE >= 1), thinned to a sample that has every value of
// every param at least once (greedy, in enumeration order).
std::vector<Config> CoveringEdgeConfigs(const std::vector<Config>& all) {
  std::set<std::pair<std::string, int64_t>> covered;
  std::vector<Config> out;
  for (const Config& c : all) {
    if (c.params.at("EDGE") == 0) continue;
    bool adds = false;
    for (const auto& [name, value] : c.params) adds |= !covered.count({name, value});
    if (!adds) continue;
    for (const auto& [name, value] : c.params) covered.insert({name, value});
    out.push_back(c);
  }
  return out;
}

class EdgePathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
    ASSERT_THAT(registry_->errors(), IsEmpty());
    ASSERT_OK_AND_ASSIGN(target_, TargetFromArch("sm_90"));
  }
  std::shared_ptr<const KernelTemplate> Template(const std::string& name) {
    auto it = registry_->templates().find(name);
    EXPECT_NE(it, registry_->templates().end()) << name;
    return it == registry_->templates().end() ? nullptr : it->second;
  }
  absl::StatusOr<SearchSpace> Space(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                    const Shape& shape) {
    Knobs knobs = DefaultConfig(*tmpl, target_).knobs;
    return EnumerateParams(tmpl, dtype, shape, target_, knobs);
  }

  std::unique_ptr<TemplateRegistry> registry_;
  TargetInfo target_;
};

TEST_F(EdgePathsTest, EdgeFollowsTheRowLength) {
  for (const auto& [name, row_dim] : EdgeTemplates()) {
    std::shared_ptr<const KernelTemplate> tmpl = Template(name);
    ASSERT_NE(tmpl, nullptr);
    for (DType dtype : tmpl->dtypes()) {
      SCOPED_TRACE(absl::StrCat(name, " ", DTypeName(dtype)));
      Shape aligned = ExampleShape(*tmpl);
      ASSERT_OK_AND_ASSIGN(SearchSpace space, Space(tmpl, dtype, aligned));
      ASSERT_FALSE(space.configs.empty());
      for (const Config& c : space.configs) EXPECT_EQ(c.params.at("EDGE"), 0) << ConfigString(c);

      // One more than a multiple of every VEC: no row but the first starts aligned.
      Shape odd = aligned;
      odd[row_dim] = aligned[row_dim] + 1;
      ASSERT_OK_AND_ASSIGN(space, Space(tmpl, dtype, odd));
      int edges = 0;
      for (const Config& c : space.configs) {
        // Vectors of several elements take an edge path: 1, or 2, whose body starts on a
        // 128-byte line, for 16-byte vectors only.
        const int64_t edge = c.params.at("EDGE");
        if (VectorElements(c, dtype) == 1) {
          EXPECT_EQ(edge, 0) << ConfigString(c);
        } else if (edge == 2) {
          EXPECT_EQ(VectorElements(c, dtype) * DTypeSize(dtype), 16) << ConfigString(c);
        } else {
          EXPECT_EQ(edge, 1) << ConfigString(c);
        }
        edges += edge >= 1;
      }
      EXPECT_GT(edges, 0);
      // FALLBACK's config for the odd shape keeps the default's vectors, through the edges.
      ASSERT_OK_AND_ASSIGN(Config fallback, DefaultConfigFor(tmpl, dtype, odd, target_));
      EXPECT_EQ(fallback.params.at("EDGE"), 1);
      EXPECT_GT(VectorElements(fallback, dtype), 1);
    }
  }
}

TEST_F(EdgePathsTest, EveryEdgeVariantCompiles) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler,
                       NewTemplateCompiler(*registry_, nullptr));
  std::vector<std::string> what;
  std::vector<CompileRequest> requests;
  for (const auto& [name, row_dim] : EdgeTemplates()) {
    std::shared_ptr<const KernelTemplate> tmpl = Template(name);
    ASSERT_NE(tmpl, nullptr);
    for (DType dtype : tmpl->dtypes()) {
      // Every dim odd where that is a size (out_bytes and with_bias are no sizes): the rows
      // start at every alignment, and the row-per-warp, cluster and split variants stay valid.
      Shape odd = ExampleShape(*tmpl);
      for (auto& [dim, value] : odd) {
        if (value > 4) value |= 1;
      }
      ASSERT_OK_AND_ASSIGN(SearchSpace space, Space(tmpl, dtype, odd));
      const std::vector<Config> configs = CoveringEdgeConfigs(space.configs);
      EXPECT_FALSE(configs.empty()) << name << " " << DTypeName(dtype);
      for (const Config& config : configs) {
        ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(tmpl, dtype, odd, config, target_));
        ASSERT_TRUE(bound.instance) << ConfigString(config) << ": " << bound.rejected_because;
        what.push_back(absl::StrCat(name, " ", DTypeName(dtype), " ", ShapeString(odd), " ",
                                    ConfigString(config)));
        requests.push_back(BuildCompileRequest(*bound.instance));
      }
    }
  }
  ExpectAllCompile(compiler.get(), what, std::move(requests), /*no_spills=*/false);
  std::printf("%zu edge-path candidates compiled\n", what.size());
}

}  // namespace
}  // namespace ktune
