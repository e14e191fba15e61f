#include "server/templates/kernel_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TinyManifest() {
  auto text = ReadFile(absl::StrCat(testing::TestTemplatesDir(), "/tiny/tiny.textproto"));
  EXPECT_TRUE(text.ok());
  return *text;
}

TEST(KernelTemplateTest, LoadsTheTestTemplate) {
  ASSERT_OK_AND_ASSIGN(auto t,
                       LoadKernelTemplate(absl::StrCat(testing::TestTemplatesDir(), "/tiny")));
  EXPECT_EQ(t->name(), "tiny");
  EXPECT_THAT(t->dtypes(), ::testing::ElementsAre(DType::kF32, DType::kBF16));
  EXPECT_TRUE(t->SupportsDType(DType::kBF16));
  EXPECT_FALSE(t->SupportsDType(DType::kF16));
  EXPECT_THAT(t->source(), HasSubstr("tiny_ref"));
  EXPECT_EQ(t->source_hash().size(), 64u);
  Scope scope;
  scope.values = {{"n", 1000}, {"BLOCK", 128}, {"VEC", 4}};
  EXPECT_THAT(t->Evaluate("ceil_div(n, BLOCK * VEC)", scope), testing::IsOkAndHolds(2));
  EXPECT_THAT(t->Evaluate("", scope, 7), testing::IsOkAndHolds(7));
  EXPECT_THAT(t->Evaluate("n + 1", scope),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("not one of its expressions")));
}

TEST(KernelTemplateTest, SourceHashCoversSharedHeaders) {
  const std::string dir = absl::StrCat(testing::TestTemplatesDir(), "/tiny");
  ASSERT_OK_AND_ASSIGN(auto a, LoadKernelTemplate(dir, "headers-1"));
  ASSERT_OK_AND_ASSIGN(auto b, LoadKernelTemplate(dir, "headers-1"));
  ASSERT_OK_AND_ASSIGN(auto c, LoadKernelTemplate(dir, "headers-2"));
  EXPECT_EQ(a->source_hash(), b->source_hash());
  EXPECT_NE(a->source_hash(), c->source_hash());
}

struct BrokenCase {
  const char* name;
  const char* find;     // text in the good manifest...
  const char* replace;  // ...replaced by this
  const char* error;    // the error, after "<dir>/tiny/tiny.textproto"
};

// One defect each; `error` is the whole message after the file name, so a change in
// wording or in the line reported shows up here.
const BrokenCase kBrokenCases[] = {
    {"buffer_count_names_a_param", "count: \"n\" role: OUTPUT", "count: \"n * VEC\" role: OUTPUT",
     ":10: args[1].buffer.count: 'VEC' is not a dim: a buffer's size may depend on the shape "
     "only (size scratch for the largest param value)"},
    {"syntax", "min: 1 max: 1048576", "min: one max: 1048576",
     ":5:23: Expected integer, got: one"},
    {"unknown_field", "description:", "summary:",
     ":3:8: Message type \"ktune.v1.TemplateManifest\" has no field named \"summary\"."},
    {"name_mismatch", "name: \"tiny\"", "name: \"tinier\"",
     ":2: name: 'tinier' must equal the folder name 'tiny'"},
    {"unknown_dtype", "dtypes: [\"f32\", \"bf16\"]", "dtypes: [\"f32\", \"f64\"]",
     ":4: dtypes[1]: unknown dtype 'f64'; expected f32, f16, bf16, f8e4m3 or f8e5m2"},
    {"repeated_dtype", "dtypes: [\"f32\", \"bf16\"]", "dtypes: [\"f32\", \"f32\"]",
     ":4: dtypes[1]: 'f32' listed twice"},
    {"dim_name", "dims { name: \"n\"", "dims { name: \"N\"",
     ":5: dims[0].name: 'N' is not a lower-case name [a-z][a-z0-9_]*"},
    {"dim_example", "example: 1000", "example: 0", ":5: dims[0].example: must lie within [min, max]"},
    {"dim_min_negative", "min: 1 max: 1048576", "min: -1 max: 1048576",
     ":5: dims[0].min: must be at least 0"},
    {"param_default", "default: 128", "default: 100",
     ":6: params[0].default: 100 is not one of the values"},
    {"param_repeated_value", "values: [1, 2, 4]", "values: [1, 2, 2]",
     ":7: params[1].values: value 2 repeated"},
    {"param_name", "name: \"VEC\"", "name: \"vec\"",
     ":7: params[1].name: 'vec' is not an upper-case name [A-Z][A-Z0-9_]* outside KTUNE_*"},
    {"param_reserved", "name: \"VEC\"", "name: \"KTUNE_VEC\"",
     ":7: params[1].name: 'KTUNE_VEC' is not an upper-case name [A-Z][A-Z0-9_]* outside KTUNE_*"},
    {"constraint_unknown_identifier", "\"n % VEC == 0\"", "\"rows % VEC == 0\"",
     ":8: constraints[0]: unknown identifier 'rows' in 'rows % VEC == 0'; known: dims, params "
     "and KTUNE_* knobs"},
    {"input_zero_fill", "fill { kind: UNIFORM lo: -1 hi: 1 }", "fill { kind: ZERO }",
     ":9: args[0].buffer.fill: inputs need a non-zero fill (UNIFORM, NORMAL or CONSTANT): a "
     "kernel that does nothing must not pass"},
    {"uniform_range", "lo: -1 hi: 1", "lo: 1 hi: -1", ":9: args[0].buffer.fill: UNIFORM needs lo < hi"},
    {"zero_once_not_scratch", "fill { kind: UNIFORM lo: -1 hi: 1 }", "fill { kind: ZERO_ONCE }",
     ":9: args[0].buffer.fill: ZERO_ONCE is for SCRATCH buffers only"},
    {"buffer_dtype", "dtype: \"dtype\" count: \"n\" role: OUTPUT",
     "dtype: \"double\" count: \"n\" role: OUTPUT",
     ":10: args[1].buffer.dtype: unknown dtype 'double'; expected dtype, f32, f16, bf16, f8e4m3, f8e5m2 or i32"},
    {"buffer_role", "role: OUTPUT", "", ":10: args[1].buffer.role: missing: INPUT, OUTPUT, INOUT or SCRATCH"},
    {"buffer_alignment", "role: OUTPUT", "role: OUTPUT alignment: 24",
     ":10: args[1].buffer.alignment: 24 is not a power of two in 1..256 (or 0 for the "
     "default, 16)"},
    {"buffer_alignment_negative", "role: OUTPUT", "role: OUTPUT alignment: -4",
     ":10: args[1].buffer.alignment: -4 is not a power of two in 1..256 (or 0 for the "
     "default, 16)"},
    {"duplicate_arg", "name: \"count\"", "name: \"out\"", ":11: args[2].name: 'out' declared twice"},
    {"scalar_type", "type: \"i32\"", "type: \"u8\"",
     ":11: args[2].scalar.type: unknown type 'u8'; expected i32, i64 or f32"},
    {"placeholder", "tiny<{dtype}, {BLOCK}, {VEC}>", "tiny<{dtype}, {BLOCKS}, {VEC}>",
     ":13: launches[0].kernel: placeholder {BLOCKS} is neither {dtype} nor a param"},
    {"grid_unknown_identifier", "ceil_div(n, BLOCK * VEC)", "ceil_div(n, THREADS)",
     ":14: launches[0].grid.x: unknown identifier 'THREADS' in 'ceil_div(n, THREADS)'; known: "
     "dims, params and KTUNE_* knobs"},
    {"block_max_threads", "block { x: \"BLOCK\" }", "block { x: \"KTUNE_MAX_THREADS\" }",
     ":15: launches[0].block.x: KTUNE_MAX_THREADS is derived from the block size and cannot "
     "define it"},
    {"launch_unknown_arg", "args: [\"x\", \"out\", \"count\"]\n}\nreference",
     "args: [\"x\", \"y\", \"count\"]\n}\nreference", ":16: launches[0].args[1]: no arg named 'y'"},
    {"no_reference",
     "reference {\n  kernel: \"tiny_ref<{dtype}>\"\n  grid { x: \"ceil_div(n, 128)\" }\n  block { x: "
     "\"128\" }\n  args: [\"x\", \"out\", \"count\"]\n}\n",
     "", ": reference: at least one launch is required"},
    {"reference_programmatic", "block { x: \"128\" }", "block { x: \"128\" }\n  programmatic: true",
     ":22: reference[0].programmatic: the reference is launched plainly, never programmatically"},
    {"cost_missing", "cost { bytes: \"2 * n * sizeof(dtype)\" flops: \"n\" }", "cost { flops: \"n\" }",
     ":24: cost.bytes: missing: bytes that must move for one run"},
    {"sizeof_unknown", "sizeof(dtype)", "sizeof(double)", ":24: cost.bytes: "},
    {"tolerance_dtype", "tolerances { dtype: \"bf16\"", "tolerances { dtype: \"f16\"",
     ":26: tolerances[1].dtype: 'f16' is not one of the template's dtypes"},
    {"tolerance_missing", "tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }\n", "",
     ": tolerances: missing a tolerance for dtype bf16"},
    {"maxrregcount", "maxrregcount: [0, 64]", "maxrregcount: [0, 8]",
     ":27: knobs.maxrregcount: 8 is outside 16..255 (0 means no limit)"},
    {"reference_params", "knobs {", "reference_params { key: \"WARPS\" value: 1 }\nknobs {",
     ":27: reference_params: 'WARPS' is not a param"},
    {"default_alternative_param", "knobs {",
     "default_alternatives { params { key: \"WARPS\" value: 1 } }\nknobs {",
     ":27: default_alternatives[0].params: 'WARPS' is not a param"},
    {"default_alternative_value", "knobs {",
     "default_alternatives { params { key: \"VEC\" value: 3 } }\nknobs {",
     ":27: default_alternatives[0].params: VEC=3 is not one of its values"},    // Manifests that would switch verification off, refused at load (issue #17, item 7).
    {"tolerance_inf", "tolerances { dtype: \"f32\" atol: 1e-6 rtol: 1e-6 }",
     "tolerances { dtype: \"f32\" atol: 1e-6 rtol: inf }",
     ":25: tolerances[0]: atol and rtol must be finite: an infinite or NaN bound passes any "
     "result"},
    {"tolerance_nan", "tolerances { dtype: \"f32\" atol: 1e-6 rtol: 1e-6 }",
     "tolerances { dtype: \"f32\" atol: nan rtol: 1e-6 }",
     ":25: tolerances[0]: atol and rtol must be finite"},
    {"tolerance_rtol_one", "tolerances { dtype: \"f32\" atol: 1e-6 rtol: 1e-6 }",
     "tolerances { dtype: \"f32\" atol: 1e-6 rtol: 1 }",
     ":25: tolerances[0].rtol: 1 must be below 1: an output of zeros would pass"},
    {"tolerance_atol_huge", "tolerances { dtype: \"f32\" atol: 1e-6 rtol: 1e-6 }",
     "tolerances { dtype: \"f32\" atol: 1e20 rtol: 1e-6 }",
     ":25: tolerances[0].atol: 1e+20 must be at most 1"},
    {"tolerance_twice", "tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }",
     "tolerances { dtype: \"f32\" atol: 0.5 rtol: 0.5 }\ntolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }",
     ":26: tolerances[1].dtype: 'f32' has a tolerance already"},
    {"fill_nan", "lo: -1 hi: 1", "lo: nan hi: 1", ":9: args[0].buffer.fill: lo and hi must be finite"},
    {"fill_inf", "lo: -1 hi: 1", "lo: -1 hi: inf", ":9: args[0].buffer.fill: lo and hi must be finite"},
    {"input_constant_zero", "fill { kind: UNIFORM lo: -1 hi: 1 }", "fill { kind: CONSTANT lo: 0 }",
     ":9: args[0].buffer.fill: CONSTANT 0 for an input is a zero fill: a kernel that does nothing "
     "must not pass"},
    {"scalar_nan", "scalar { type: \"i32\" expr: \"n\" }", "scalar { type: \"f32\" number: nan }",
     ":11: args[2].scalar.number: nan is not a finite f32"},
    {"cost_zero", "cost { bytes: \"2 * n * sizeof(dtype)\"", "cost { bytes: \"0 * n\"",
     ":24: cost.bytes: '0 * n' is 0 at the example shape (dims' examples, params' defaults) for "
     "f32; must be > 0"},
    {"cost_negative_flops", "flops: \"n\"", "flops: \"0 - n\"",
     ":24: cost.flops: '0 - n' is -1000 at the example shape (dims' examples, params' defaults) "
     "for f32; must be >= 0"},
    {"reference_param_value", "knobs {", "reference_params { key: \"VEC\" value: 3 }\nknobs {",
     ":27: reference_params: VEC=3 is not one of its values"},
    {"launch_arg_count", "args: [\"x\", \"out\", \"count\"]\n}\nreference",
     "args: [\"x\", \"out\"]\n}\nreference", ":12: launches[0].args: 2 args, but tiny in "},
    {"reference_arg_count", "args: [\"x\", \"out\", \"count\"]\n}\ncost",
     "args: [\"x\", \"out\", \"count\", \"x\"]\n}\ncost",
     ":18: reference[0].args: 4 args, but tiny_ref in "},
    // Arithmetic that fails at the example shape (issue #17, item 6): the template's defect,
    // with the line of the expression.
    {"example_divides_by_zero", "\"n % VEC == 0\"", "\"n % (n - 1000) == 0\"",
     ":8: example shape n=1000 (f32): "},
};

class BrokenManifestTest : public ::testing::TestWithParam<BrokenCase> {};

// Breaks `manifest` per `c`, writes it as template `name` (with `write`) and checks the
// load's error.
void ExpectBroken(const BrokenCase& c, std::string manifest, const std::string& name,
                  void (*write)(const std::string&, const std::string&)) {
  ASSERT_NE(manifest.find(c.find), std::string::npos) << c.find;
  manifest = absl::StrReplaceAll(manifest, {{c.find, c.replace}});
  const std::string root = testing::NewTempDir();
  write(root, manifest);
  const std::string file = absl::StrCat(root, "/", name, "/", name, ".textproto");
  auto loaded = LoadKernelTemplate(absl::StrCat(root, "/", name));
  ASSERT_FALSE(loaded.ok()) << c.name;
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), StartsWith(absl::StrCat(file, c.error)))
      << c.name;
}

TEST_P(BrokenManifestTest, RejectedWithFileLineAndReason) {
  ExpectBroken(GetParam(), TinyManifest(), "tiny",
               [](const std::string& root, const std::string& m) { testing::WriteTiny(root, m); });
}

INSTANTIATE_TEST_SUITE_P(Table, BrokenManifestTest, ::testing::ValuesIn(kBrokenCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The arity check reads every shipped kernel's parameter list: one arg less in any
// template's first launch or reference is refused naming the kernel.
TEST(KernelTemplateTest, EveryShippedKernelsArityIsChecked) {
  const std::string shipped = testing::ShippedTemplatesDir();
  for (const char* name : {"add_rmsnorm", "elementwise", "gemm", "gemv", "layernorm", "rmsnorm",
                           "rope", "rope_qkv", "silu_and_mul", "softmax"}) {
    for (const char* list : {"launches {", "reference {"}) {
      const std::string dir = absl::StrCat(shipped, "/", name, "/", name);
      absl::StatusOr<std::string> manifest = ReadFile(dir + ".textproto");
      absl::StatusOr<std::string> source = ReadFile(dir + ".cu");
      ASSERT_TRUE(manifest.ok() && source.ok()) << name;
      const size_t launch = manifest->find(absl::StrCat("\n", list));
      ASSERT_NE(launch, std::string::npos) << name << " " << list;
      const size_t close = manifest->find("]", manifest->find("args: [", launch));
      const size_t last_comma = manifest->rfind(",", close);
      ASSERT_GT(last_comma, launch) << name << " " << list;
      manifest->erase(last_comma, close - last_comma);  // drops the last arg
      const std::string root = testing::NewTempDir();
      ASSERT_OK(MakeDirs(absl::StrCat(root, "/", name)));
      ASSERT_OK(AtomicWriteFile(absl::StrCat(root, "/", name, "/", name, ".textproto"), *manifest));
      ASSERT_OK(AtomicWriteFile(absl::StrCat(root, "/", name, "/", name, ".cu"), *source));
      auto loaded = LoadKernelTemplate(absl::StrCat(root, "/", name));
      EXPECT_THAT(loaded.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("args, but")))
          << name << " " << list;
    }
  }
}

std::string TmaManifest() {
  auto text = ReadFile(absl::StrCat(testing::TmaTemplatesDir(), "/tma_copy/tma_copy.textproto"));
  EXPECT_TRUE(text.ok());
  return *text;
}

TEST(KernelTemplateTest, LoadsATensorMapArg) {
  ASSERT_OK_AND_ASSIGN(auto t,
                       LoadKernelTemplate(absl::StrCat(testing::TmaTemplatesDir(), "/tma_copy")));
  const v1::Arg& a = t->manifest().args(1);
  ASSERT_TRUE(a.has_tensor_map());
  EXPECT_EQ(a.tensor_map().buffer(), "x");
  EXPECT_THAT(a.tensor_map().box(), ::testing::ElementsAre("BOX_COLS", "BOX_ROWS"));
  EXPECT_EQ(a.tensor_map().swizzle(), v1::TensorMap::SWIZZLE_NONE);
}

// The tensor map, dtype_for and atol_scale fields, broken one at a time in tma_copy's
// manifest (line 15 is the tensor map, 16 the output buffer, 32 the f32 tolerance).
const BrokenCase kBrokenTmaCases[] = {
    {"tm_buffer_unknown", "buffer: \"x\" dims", "buffer: \"y\" dims",
     ":15: args[1].tensor_map.buffer: 'y' is not a buffer arg"},
    {"tm_buffer_is_a_scalar", "buffer: \"x\" dims", "buffer: \"nrows\" dims",
     ":15: args[1].tensor_map.buffer: 'nrows' is not a buffer arg"},
    {"tm_buffer_missing", "buffer: \"x\" dims", "dims",
     ":15: args[1].tensor_map.buffer: missing: the Buffer arg the map covers"},
    {"tm_no_dims", "dims: [\"cols\", \"rows\"] ", "",
     ":15: args[1].tensor_map.dims: 0 dims; a tensor map has rank 1..5"},
    {"tm_rank_6", "dims: [\"cols\", \"rows\"]", "dims: [\"cols\", \"rows\", \"1\", \"1\", \"1\", \"1\"]",
     ":15: args[1].tensor_map.dims: 6 dims; a tensor map has rank 1..5"},
    {"tm_strides_count", "strides: [\"cols * sizeof(dtype)\"]", "strides: []",
     ":15: args[1].tensor_map.strides: 0 strides for rank 2; need rank - 1 (byte strides of "
     "dims[1..])"},
    {"tm_box_count", "box: [\"BOX_COLS\", \"BOX_ROWS\"]", "box: [\"BOX_COLS\"]",
     ":15: args[1].tensor_map.box: 1 values for rank 2; need rank"},
    {"tm_element_strides_count", "box: [\"BOX_COLS\", \"BOX_ROWS\"]",
     "box: [\"BOX_COLS\", \"BOX_ROWS\"] element_strides: [\"1\"]",
     ":15: args[1].tensor_map.element_strides: 1 values for rank 2; need none (all 1) or rank"},
    {"tm_box_unknown_identifier", "box: [\"BOX_COLS\", \"BOX_ROWS\"]",
     "box: [\"BOX_COLS\", \"TILE\"]",
     ":15: args[1].tensor_map.box[1]: unknown identifier 'TILE' in 'TILE'; known: dims, params "
     "and KTUNE_* knobs"},
    {"tm_swizzle_value", "box: [\"BOX_COLS\", \"BOX_ROWS\"]",
     "box: [\"BOX_COLS\", \"BOX_ROWS\"] swizzle: 7",
     ":15: args[1].tensor_map.swizzle: unknown value"},
    {"dtype_for_key", "role: OUTPUT }", "role: OUTPUT dtype_for { key: \"f16\" value: \"f32\" } }",
     ":16: args[2].buffer.dtype_for: key 'f16' is not one of the template's dtypes"},
    {"dtype_for_value", "role: OUTPUT }",
     "role: OUTPUT dtype_for { key: \"bf16\" value: \"f64\" } }",
     ":16: args[2].buffer.dtype_for: value 'f64' for 'bf16' is not a dtype; expected f32, f16, "
     "bf16, f8e4m3, f8e5m2 or i32"},
    {"atol_scale_param", "tolerances { dtype: \"f32\" atol: 0 rtol: 0 }",
     "tolerances { dtype: \"f32\" atol: 0 rtol: 0 atol_scale: \"BOX_COLS\" }",
     ":32: tolerances[0].atol_scale: 'BOX_COLS' is not a dim: the tolerance may depend on the "
     "shape only"},
    {"atol_scale_unknown", "tolerances { dtype: \"f32\" atol: 0 rtol: 0 }",
     "tolerances { dtype: \"f32\" atol: 0 rtol: 0 atol_scale: \"k\" }",
     ":32: tolerances[0].atol_scale: unknown identifier 'k' in 'k'"},
    {"atol_scale_syntax", "tolerances { dtype: \"f32\" atol: 0 rtol: 0 }",
     "tolerances { dtype: \"f32\" atol: 0 rtol: 0 atol_scale: \"rows *\" }",
     ":32: tolerances[0].atol_scale: col "},
};

class BrokenTmaManifestTest : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenTmaManifestTest, RejectedWithFileLineAndReason) {
  ExpectBroken(GetParam(), TmaManifest(), "tma_copy", [](const std::string& root,
                                                          const std::string& m) {
    testing::WriteTmaCopy(root, m);
  });
}

INSTANTIATE_TEST_SUITE_P(Table, BrokenTmaManifestTest, ::testing::ValuesIn(kBrokenTmaCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(KernelTemplateTest, Fp8DTypesAreRequestDTypes) {
  std::string manifest = TinyManifest();
  manifest = absl::StrReplaceAll(
      manifest, {{"dtypes: [\"f32\", \"bf16\"]", "dtypes: [\"f32\", \"bf16\", \"f8e4m3\", \"f8e5m2\"]"},
                 {"tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }",
                  "tolerances { dtype: \"bf16\" atol: 1e-2 rtol: 1e-2 }\n"
                  "tolerances { dtype: \"f8e4m3\" atol: 0.1 rtol: 0.1 }\n"
                  "tolerances { dtype: \"f8e5m2\" atol: 0.2 rtol: 0.2 }"}});
  const std::string root = testing::NewTempDir();
  testing::WriteTiny(root, manifest);
  ASSERT_OK_AND_ASSIGN(auto t, LoadKernelTemplate(absl::StrCat(root, "/tiny")));
  EXPECT_THAT(t->dtypes(), ::testing::ElementsAre(DType::kF32, DType::kBF16, DType::kF8E4M3,
                                                  DType::kF8E5M2));
}

TEST(KernelTemplateTest, BufferDTypeFollowsDtypeFor) {
  v1::Buffer b;
  b.set_dtype("dtype");
  (*b.mutable_dtype_for())["f8e4m3"] = "bf16";
  EXPECT_EQ(BufferDType(b, DType::kF8E4M3), DType::kBF16);
  EXPECT_EQ(BufferDType(b, DType::kF16), DType::kF16);
  b.set_dtype("f32");
  EXPECT_EQ(BufferDType(b, DType::kF16), DType::kF32);
  EXPECT_EQ(BufferDType(b, DType::kF8E4M3), DType::kBF16);
}

TEST(KernelTemplateTest, MissingSourceFile) {
  const std::string root = testing::NewTempDir();
  testing::WriteTiny(root);
  ASSERT_EQ(::unlink(absl::StrCat(root, "/tiny/tiny.cu").c_str()), 0);
  EXPECT_THAT(LoadKernelTemplate(absl::StrCat(root, "/tiny")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tiny/tiny.cu: cannot read the kernel source")));
}

TEST(KernelTemplateTest, MissingManifest) {
  const std::string root = testing::NewTempDir();
  ASSERT_OK(MakeDirs(root + "/empty"));
  EXPECT_THAT(LoadKernelTemplate(root + "/empty"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty/empty.textproto: cannot read the manifest")));
}

}  // namespace
}  // namespace ktune
