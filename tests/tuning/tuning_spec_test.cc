#include "server/tuning/tuning_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>


#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

class TuningSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = LoadTemplateRegistry(testing::TestTemplatesDir());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
  }

  absl::StatusOr<std::vector<SpecKey>> Expand(const std::string& text) {
    KTUNE_ASSIGN_OR_RETURN(TuningSpec spec, ParseTuningSpec(text, "m.textproto"));
    return ExpandTuningSpec(spec, *registry_);
  }

  std::unique_ptr<TemplateRegistry> registry_;
};

TEST_F(TuningSpecTest, ParsesValuesAndRanges) {
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(R"(
model: "toy-1b"
description: "for the test"
entries {
  template: "tiny"
  dtypes: ["f32", "bf16"]
  dims {
    name: "n"
    values: [3000, 16]
    range { first: 1 last: 16 factor: 2 }
    range { first: 100 last: 130 step: 10 }
  }
}
)", "m.textproto"));
  EXPECT_EQ(spec.model, "toy-1b");
  EXPECT_EQ(spec.description, "for the test");
  ASSERT_THAT(spec.entries, SizeIs(1));
  const SpecEntry& e = spec.entries[0];
  EXPECT_EQ(e.template_name, "tiny");
  EXPECT_EQ(e.line, 4);
  EXPECT_THAT(e.dtypes, ElementsAre(DType::kF32, DType::kBF16));
  ASSERT_THAT(e.dims, SizeIs(1));
  EXPECT_EQ(e.dims[0].line, 7);
  // Sorted, repeats (16) removed, ranges expanded; 130 is reached exactly, so it is in.
  EXPECT_THAT(e.dims[0].values,
              ElementsAre(1, 2, 4, 8, 16, 100, 110, 120, 130, 3000));
}

TEST_F(TuningSpecTest, RangeStopsAtLastEvenWhenItDoesNotLandOnIt) {
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(R"(
model: "m"
entries { template: "tiny" dtypes: ["f32"]
  dims { name: "n" range { first: 3 last: 100 factor: 3 } range { first: 5 last: 12 step: 4 } } }
)", "m.textproto"));
  // 3, 9, 27, 81 (243 is past 100) and 5, 9 (13 is past 12), together.
  EXPECT_THAT(spec.entries[0].dims[0].values, ElementsAre(3, 5, 9, 27, 81));
}

TEST_F(TuningSpecTest, ExpandsTheCrossProductInSpecOrderWithoutRepeats) {
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> keys, Expand(R"(
model: "m"
entries { template: "tiny" dtypes: ["bf16", "f32"] dims { name: "n" values: [64, 8] } }
entries { template: "tiny" dtypes: ["f32"] dims { name: "n" values: [8, 4096] } }
)"));
  std::vector<std::string> names;
  for (const SpecKey& k : keys) names.push_back(SpecKeyString(k));
  EXPECT_THAT(names, ElementsAre("tiny bf16 n=8", "tiny bf16 n=64", "tiny f32 n=8",
                                 "tiny f32 n=64", "tiny f32 n=4096"));
  EXPECT_EQ(keys[0].line, 3);
  EXPECT_EQ(keys[4].line, 4);  // the one key only the second entry gives
}

TEST_F(TuningSpecTest, ExpandsSeveralDimsFirstDimSlowest) {
  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(R"(
model: "m"
entries { template: "rmsnorm" dtypes: ["bf16"]
  dims { name: "tokens" range { first: 1 last: 4 factor: 2 } }
  dims { name: "hidden" values: [4096, 8192] } }
)", "m.textproto"));
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> keys, ExpandTuningSpec(spec, *registry));
  std::vector<std::string> names;
  for (const SpecKey& k : keys) names.push_back(ShapeString(k.shape));
  EXPECT_THAT(names, ElementsAre("hidden=4096,tokens=1", "hidden=8192,tokens=1",
                                 "hidden=4096,tokens=2", "hidden=8192,tokens=2",
                                 "hidden=4096,tokens=4", "hidden=8192,tokens=4"));
}

// Each bad spec, the field its message must name and the line it must point at.
struct BadSpec {
  const char* what;
  const char* text;
  const char* message;  // substring, after "m.textproto:"
};

class BadSpecTest : public TuningSpecTest, public ::testing::WithParamInterface<BadSpec> {};

TEST_P(BadSpecTest, NamesFileLineAndField) {
  const BadSpec& b = GetParam();
  absl::StatusOr<std::vector<SpecKey>> keys = Expand(b.text);
  ASSERT_FALSE(keys.ok()) << b.what;
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << keys.status();
  EXPECT_THAT(std::string(keys.status().message()),
              StartsWith(absl::StrCat("m.textproto:", b.message)))
      << b.what;
}

INSTANTIATE_TEST_SUITE_P(
    Specs, BadSpecTest,
    ::testing::Values(
        BadSpec{"syntax", "model: \"m\"\nentries { templ: \"tiny\" }\n",
                "2:16: Message type \"ktune.v1.SpecEntry\" has no field named \"templ\""},
        BadSpec{"no model", "entries { template: \"tiny\" }\n", "1: model: required"},
        BadSpec{"bad model", "\nmodel: \"a b\"\n", "2: model: 'a b' may hold only"},
        BadSpec{"no entries", "model: \"m\"\n", "1: entries: at least one"},
        BadSpec{"no template", "model: \"m\"\n\nentries { dtypes: [\"f32\"] }\n",
                "3: entries[0].template: required"},
        BadSpec{"no dtypes", "model: \"m\"\nentries {\n template: \"tiny\"\n}\n",
                "2: entries[0].dtypes: at least one"},
        BadSpec{"bad dtype",
                "model: \"m\"\nentries {\n template: \"tiny\"\n dtypes: [\"f32\"]\n dtypes: "
                "\"fp8\"\n}\n",
                "5: entries[0].dtypes: unknown dtype 'fp8'"},
        BadSpec{"repeated dtype",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\", \"f32\"] }\n",
                "2: entries[0].dtypes: 'f32' is listed twice"},
        BadSpec{"no dims", "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"] }\n",
                "2: entries[0].dims: at least one"},
        BadSpec{"dim without name",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { values: [1] } }\n",
                "3: entries[0].dims[0].name: required"},
        BadSpec{"dim twice",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" values: [1] }\n  dims { name: \"n\" values: [2] } }\n",
                "4: entries[0].dims[1].name: dim 'n' is given twice"},
        BadSpec{"dim without values",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" } }\n",
                "3: entries[0].dims[0]: dim 'n' has no values"},
        BadSpec{"negative value",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\"\n values: [-1] } }\n",
                "4: entries[0].dims[0].values: -1 is below 0"},
        BadSpec{"geometric range from 0",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\"\n    range { first: 0 last: 8 factor: 2 } } }\n",
                "4: entries[0].dims[0].range[0].first: a geometric range (factor) must start at 1"},
        BadSpec{"range with step and factor",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\"\n    range { first: 1 last: 8 step: 1 factor: 2 } } }\n",
                "4: entries[0].dims[0].range[0]: set exactly one of step"},
        BadSpec{"range with neither",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" range { first: 1 last: 8 } } }\n",
                "3: entries[0].dims[0].range[0]: set exactly one"},
        BadSpec{"factor 1",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" range { first: 1 last: 8 factor: 1 } } }\n",
                "3: entries[0].dims[0].range[0].factor: must be >= 2"},
        BadSpec{"last below first",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" range { first: 9 last: 8 step: 1 } } }\n",
                "3: entries[0].dims[0].range[0].last: 8 is below first (9)"},
        BadSpec{"first negative",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" range { first: -1 last: 8 step: 1 } } }\n",
                "3: entries[0].dims[0].range[0].first: must be >= 0"},
        BadSpec{"too many values",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" range { first: 1 last: 1000000 step: 1 } } }\n",
                "3: entries[0].dims[0].range[0]: gives more than 4096 values"},
        // Against the template:
        BadSpec{"unknown template",
                "model: \"m\"\n\nentries { template: \"nope\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" values: [1] } }\n",
                "3: entries[0].template: unknown template 'nope'"},
        BadSpec{"unsupported dtype",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f16\"]\n"
                "  dims { name: \"n\" values: [1] } }\n",
                "2: entries[0].dtypes: template tiny has no dtype f16"},
        BadSpec{"unknown dim",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" values: [1] }\n  dims { name: \"hidden\" values: [1] } }\n",
                "4: entries[0].dims: unknown dim 'hidden'; template tiny has n"},
        BadSpec{"wrong dim name",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"hidden\" values: [1] } }\n",
                "3: entries[0].dims: unknown dim 'hidden'"},
        BadSpec{"out of range",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\"\n  range { first: 1 last: 4194304 factor: 2 } } }\n",
                "3: entries[0].dims: dim 'n' = 2097152 is outside [1, 1048576]"},
        BadSpec{"bad search",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" values: [1] } }\nsearch {\n min_gain: 2 }\n",
                "4: search.min_gain: must be in [0, 1)"},
        BadSpec{"unknown strategy",
                "model: \"m\"\nentries { template: \"tiny\" dtypes: [\"f32\"]\n"
                "  dims { name: \"n\" values: [1] } }\nsearch { strategy: \"bayes\" }\n",
                "4: search.strategy: unknown strategy 'bayes'"}));

TEST_F(TuningSpecTest, SearchBlockSaysWhichFieldsItSets) {
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(R"(
model: "m"
entries { template: "tiny" dtypes: ["f32"] dims { name: "n" values: [1] } }
search { strategy: "random" budget: 12 roofline_stop: 0 }
)", "m.textproto"));
  EXPECT_EQ(spec.search.strategy, "random");
  EXPECT_EQ(spec.search.budget, 12);
  EXPECT_EQ(spec.search.roofline_stop, 0);
  EXPECT_EQ(spec.search.min_gain, SearchSettings{}.min_gain);
  EXPECT_EQ(spec.search_fields, (std::set<std::string>{"strategy", "budget", "roofline_stop"}));
  ASSERT_OK_AND_ASSIGN(spec, ParseTuningSpec(R"(
model: "m"
entries { template: "tiny" dtypes: ["f32"] dims { name: "n" values: [1] } }
)", "m.textproto"));
  EXPECT_TRUE(spec.search_fields.empty());
  EXPECT_EQ(spec.search, SearchSettings{});
}

// Picking a spec's keys by template keeps their order; names no key has are errors naming
// the field, as is a choice that leaves nothing.
TEST(SelectSpecKeysTest, KeepsOnlyAndDropsSkipInSpecOrder) {
  const auto key = [](const std::string& t, int64_t n) {
    SpecKey k;
    k.template_name = t;
    k.shape = {{"n", n}};
    return k;
  };
  const std::vector<SpecKey> keys = {key("rmsnorm", 1), key("gemm", 16), key("softmax", 1),
                                     key("rmsnorm", 2), key("gemm", 32)};
  const auto names = [](const std::vector<SpecKey>& ks) {
    std::vector<std::string> out;
    for (const SpecKey& k : ks) out.push_back(SpecKeyString(k));
    return out;
  };
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> no_gemm, SelectSpecKeys(keys, {}, {"gemm"}, "o", "s"));
  EXPECT_THAT(names(no_gemm),
              ElementsAre("rmsnorm f32 n=1", "softmax f32 n=1", "rmsnorm f32 n=2"));
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> gemm, SelectSpecKeys(keys, {"gemm"}, {}, "o", "s"));
  EXPECT_THAT(names(gemm), ElementsAre("gemm f32 n=16", "gemm f32 n=32"));
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> both,
                       SelectSpecKeys(keys, {"rmsnorm", "gemm"}, {"gemm"}, "o", "s"));
  EXPECT_THAT(names(both), ElementsAre("rmsnorm f32 n=1", "rmsnorm f32 n=2"));
  ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> all, SelectSpecKeys(keys, {}, {}, "o", "s"));
  EXPECT_THAT(all, SizeIs(5));

  EXPECT_THAT(SelectSpecKeys(keys, {"layernorm"}, {}, "--only", "--skip"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--only: no key of the spec is of template 'layernorm' (its "
                                 "templates: gemm, rmsnorm, softmax)")));
  EXPECT_THAT(SelectSpecKeys(keys, {}, {"rope"}, "--only", "--skip"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--skip: no key")));
  EXPECT_THAT(SelectSpecKeys(keys, {"gemm"}, {"gemm"}, "--only", "--skip"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--only and --skip leave no key of the spec")));
}

TEST_F(TuningSpecTest, MissingDimIsNamed) {
  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(
      "model: \"m\"\nentries { template: \"rmsnorm\" dtypes: [\"f32\"]\n"
      "  dims { name: \"tokens\" values: [1] } }\n", "m.textproto"));
  EXPECT_THAT(ExpandTuningSpec(spec, *registry),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("m.textproto:2: entries[0].dims: missing dim 'hidden' of "
                                 "template rmsnorm")));
}

TEST_F(TuningSpecTest, TooManyKeysIsOutOfRange) {
  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  // 4096 x 4096 shapes: each dim is fine, the product is 16M keys.
  ASSERT_OK_AND_ASSIGN(TuningSpec spec, ParseTuningSpec(
      "model: \"m\"\nentries { template: \"rmsnorm\" dtypes: [\"f32\"]\n"
      "  dims { name: \"tokens\" range { first: 1 last: 4096 step: 1 } }\n"
      "  dims { name: \"hidden\" range { first: 1 last: 4096 step: 1 } } }\n", "m.textproto"));
  EXPECT_THAT(ExpandTuningSpec(spec, *registry),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("m.textproto:2: entries[0]: the spec gives more than 100000")));
}

TEST_F(TuningSpecTest, UnreadableFileIsNotFound) {
  EXPECT_THAT(LoadTuningSpec("/nonexistent/spec.textproto"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("--spec: cannot read")));
}

// Every shipped spec (specs/, and the benchmarks' judges in bench/) loads and every key it
// gives is valid for the shipped templates.
TEST(ShippedSpecsTest, EveryShippedSpecExpandsAgainstTheShippedTemplates) {
  ASSERT_OK_AND_ASSIGN(auto registry, LoadTemplateRegistry(testing::ShippedTemplatesDir()));
  EXPECT_THAT(registry->errors(), SizeIs(0));
  for (const char* folder : {"/specs", "/bench"}) {
    const std::string dir = absl::StrCat(testing::SourceDir(), folder);
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, ListDir(dir));
    int specs = 0;
    for (const std::string& name : names) {
      if (!absl::EndsWith(name, ".textproto")) continue;
      ++specs;
      SCOPED_TRACE(name);
      ASSERT_OK_AND_ASSIGN(TuningSpec spec, LoadTuningSpec(absl::StrCat(dir, "/", name)));
      ASSERT_OK_AND_ASSIGN(std::vector<SpecKey> keys, ExpandTuningSpec(spec, *registry));
      EXPECT_FALSE(keys.empty());
    }
    EXPECT_GT(specs, 0) << folder;
  }
}

}  // namespace
}  // namespace ktune
