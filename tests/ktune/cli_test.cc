// Runs the built `ktune` program as a user would, and checks its exit status, stdout and
// stderr (commands.h: 0 done, 1 the work failed, 2 bad input with a message on stderr).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/base/config.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::NewTempDir;
using ::ktune::testing::ShippedTemplatesDir;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

using Result = testing::RunResult;

// Runs ktune with `args` to completion, hermetic (tests/testing/subprocess.h), in a fresh
// folder.
Result Ktune(const std::vector<std::string>& args) {
  return testing::RunToEnd(KTUNE_BINARY_DIR "/bin/ktune", args, NewTempDir());
}

// The rows of `ktune templates`, each split on runs of spaces.
std::vector<std::vector<std::string>> Rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
  }
  return rows;
}

const std::vector<std::string>* Row(const std::vector<std::vector<std::string>>& rows,
                                    const std::string& name) {
  for (const auto& r : rows) {
    if (!r.empty() && r[0] == name) return &r;
  }
  return nullptr;
}

// --- ktune templates ---------------------------------------------------------------------

TEST(CliTemplatesTest, ListsShippedTemplatesWithAHeader) {
  const Result r = Ktune({"templates", "--templates", ShippedTemplatesDir()});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, IsEmpty());
  const auto rows = Rows(r.out);
  ASSERT_GE(rows.size(), 3u) << r;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"TEMPLATE", "DTYPES", "DIMS", "DTYPE", "SHAPE",
                                               "CANDIDATES", "PARAM-POINTS"}));
  const auto* rms = Row(rows, "rmsnorm");
  const auto* ew = Row(rows, "elementwise");
  ASSERT_NE(rms, nullptr) << r;
  ASSERT_NE(ew, nullptr) << r;
  ASSERT_EQ(rms->size(), 7u) << r;
  ASSERT_EQ(ew->size(), 7u) << r;
  EXPECT_EQ((*rms)[1], "f32,f16,bf16");
  EXPECT_EQ((*rms)[2], "tokens,hidden");
  EXPECT_EQ((*rms)[3], "f32");                    // the first dtype when none is asked for
  EXPECT_EQ((*rms)[4], "hidden=4096,tokens=16");  // the examples
  EXPECT_EQ((*ew)[4], "n=1048576");
  for (const std::vector<std::string>* row : {rms, ew}) {
    EXPECT_THAT((*row)[5], ContainsRegex("^[1-9][0-9]*$")) << r;
    EXPECT_THAT((*row)[6], ContainsRegex("^[1-9][0-9]*/[1-9][0-9]*$")) << r;
  }
}

TEST(CliTemplatesTest, ShapeAndDtypeChangeTheCounts) {
  const Result base = Ktune({"templates", "--templates", ShippedTemplatesDir()});
  const Result big = Ktune({"templates", "--templates", ShippedTemplatesDir(), "--shape",
                            "tokens=4096,hidden=8192", "--dtype", "bf16"});
  ASSERT_EQ(base.exit_code, 0) << base;
  ASSERT_EQ(big.exit_code, 0) << big;
  const auto base_rows = Rows(base.out), big_rows = Rows(big.out);
  const auto* before = Row(base_rows, "rmsnorm");
  const auto* after = Row(big_rows, "rmsnorm");
  ASSERT_TRUE(before && after && before->size() == 7 && after->size() == 7) << base << big;
  EXPECT_EQ((*after)[3], "bf16");
  EXPECT_EQ((*after)[4], "hidden=8192,tokens=4096");
  EXPECT_NE((*after)[5], (*before)[5]) << "candidates";
  EXPECT_NE((*after)[6], (*before)[6]) << "param points";
  // elementwise has no tokens or hidden: its example n, but the dtype asked for.
  const auto* ew = Row(big_rows, "elementwise");
  ASSERT_NE(ew, nullptr);
  EXPECT_EQ((*ew)[3], "bf16");
  EXPECT_EQ((*ew)[4], "n=1048576");
}

TEST(CliTemplatesTest, BadInputIsUsageError) {
  const std::string dir = ShippedTemplatesDir();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--shape", "tokens16"}, "tokens16"},
      {{"--dtype", "f64"}, "unknown dtype 'f64'"},
      {{"--arch", "sm_9x"}, "arch 'sm_9x'"},
      {{"--bogus"}, "--bogus"},
      // --configs wants a whole key: the template's, every dim given.
      {{"--configs", "rmsnorm"}, "--configs: needs --dtype and --shape"},
      {{"--configs", "nope", "--dtype", "bf16", "--shape", "n=8"}, "nope"},
      {{"--configs", "rmsnorm", "--dtype", "bf16", "--shape", "tokens=16"}, "'hidden'"},
      {{"--configs", "rmsnorm", "--dtype", "f8e4m3", "--shape", "tokens=16,hidden=64"},
       "no dtype f8e4m3"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"templates", "--templates", dir};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = Ktune(args);
    SCOPED_TRACE(absl::StrJoin(c.args, " "));
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << r;
  }
  const Result missing = Ktune({"templates", "--templates", NewTempDir() + "/nope"});
  EXPECT_EQ(missing.exit_code, 2) << missing;
  EXPECT_THAT(missing.err, HasSubstr("templates:")) << missing;
}

// --configs lists the candidates the table counts: as many lines as its CANDIDATES cell,
// each the store's JSON of one distinct config of this key (what a tool driving another
// tuner over the same space reads: bench/kernel_tuner_compare.py).
TEST(CliTemplatesTest, ConfigsListsEveryCandidateTheTableCounts) {
  // `args` for the key bf16 tokens=4096,hidden=8192 with the shipped templates.
  auto run = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--templates", ShippedTemplatesDir(), "--dtype", "bf16", "--shape",
                             "tokens=4096,hidden=8192"});
    return Ktune(args);
  };
  const Result table = run({"templates"});
  const Result list = run({"templates", "--configs", "rmsnorm"});
  ASSERT_EQ(table.exit_code, 0) << table;
  ASSERT_EQ(list.exit_code, 0) << list;
  EXPECT_THAT(list.err, IsEmpty());
  const auto rows = Rows(table.out);
  const auto* row = Row(rows, "rmsnorm");
  ASSERT_TRUE(row != nullptr && row->size() == 7) << table;
  const std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty()) << list;
  EXPECT_EQ(absl::StrCat(lines.size()), (*row)[5]) << "lines vs the table's CANDIDATES";

  const std::set<std::string> param_names = {"BLOCK",   "CACHE",         "EDGE", "PER_SHIFT",
                                             "PREFETCH_W", "REUSE_W", "ROWS_PER_WARP", "VEC"};
  std::set<Config> seen;
  std::set<int64_t> min_blocks;
  for (const std::string& line : lines) {
    SCOPED_TRACE(line);
    std::string error;
    const std::optional<Config> c = ConfigFromJson(line, &error);
    ASSERT_TRUE(c.has_value()) << error;
    EXPECT_EQ(ConfigToJson(*c), line) << "not the store's form";
    std::set<std::string> names;
    for (const auto& [name, value] : c->params) names.insert(name);
    EXPECT_EQ(names, param_names);
    // The manifest's constraints at bf16, hidden 8192: 16-byte accesses at most, and
    // hidden a multiple of every VEC (no edge path).
    EXPECT_LE(c->params.at("VEC") * 2, 16);
    EXPECT_EQ(c->params.at("EDGE"), 0);
    EXPECT_EQ(c->params.at("REUSE_W"), 1);  // rows share a read only where it is shifted
    // rmsnorm's knobs: no register cap, no fast math, the portable target.
    EXPECT_EQ(c->knobs.maxrregcount, 0);
    EXPECT_FALSE(c->knobs.fast_math);
    EXPECT_EQ(c->knobs.target, "sm_90");
    min_blocks.insert(c->knobs.min_blocks);
    EXPECT_TRUE(seen.insert(*c).second) << "listed twice";
  }
  EXPECT_EQ(min_blocks, (std::set<int64_t>{1, 2}));
  Config default_config;
  default_config.params = {{"BLOCK", 256}, {"VEC", 4},        {"ROWS_PER_WARP", 0},
                           {"CACHE", 0},   {"PREFETCH_W", 0}, {"EDGE", 0},
                           {"REUSE_W", 1}, {"PER_SHIFT", 0}};
  EXPECT_EQ(seen.count(default_config), 1u) << "the default config is a candidate";
}

// A manifest whose arithmetic divides by zero used to make `ktune templates` exit 2 with no
// file or line, listing none of the others. At its example shape it is refused at load
// (FILE:LINE); at a shape asked for, its row says "-" with the reason.
TEST(CliTemplatesTest, AManifestDefectIsSkippedAndTheOthersListed) {
  const std::string root = NewTempDir();
  const std::string good = *ReadFile(ShippedTemplatesDir() + "/rmsnorm/rmsnorm.textproto");
  ASSERT_TRUE(MakeDirs(root + "/rmsnorm").ok());
  ASSERT_TRUE(AtomicWriteFile(root + "/rmsnorm/rmsnorm.textproto", good).ok());
  ASSERT_TRUE(AtomicWriteFile(root + "/rmsnorm/rmsnorm.cu",
                              *ReadFile(ShippedTemplatesDir() + "/rmsnorm/rmsnorm.cu"))
                  .ok());
  const std::string tiny = *ReadFile(testing::TestTemplatesDir() + "/tiny/tiny.textproto");
  auto with_constraint = [&](const std::string& c) {
    std::string m = tiny;
    m.replace(m.find("\"n % VEC == 0\""), 14, "\"" + c + "\"");
    return m;
  };
  testing::WriteTiny(root, with_constraint("n % (n - 1000) == 0"));
  Result r = Ktune({"templates", "--templates", root});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr(root + "/tiny/tiny.textproto:8: example shape n=1000")) << r;
  EXPECT_NE(Row(Rows(r.out), "rmsnorm"), nullptr) << r;
  EXPECT_EQ(Row(Rows(r.out), "tiny"), nullptr) << r;

  testing::WriteTiny(root, with_constraint("n % (n - 999) == 0"));
  r = Ktune({"templates", "--templates", root, "--shape", "n=999"});
  EXPECT_EQ(r.exit_code, 0) << r;
  const auto rows = Rows(r.out);
  ASSERT_NE(Row(rows, "tiny"), nullptr) << r;
  EXPECT_EQ(Row(rows, "tiny")->at(5), "-") << r;
  EXPECT_NE(Row(rows, "rmsnorm"), nullptr) << r;
  EXPECT_THAT(r.err, HasSubstr("tiny: ")) << r;
}

TEST(CliTest, NoSubcommandIsUsageErrorAndHelpIsNot) {
  const Result none = Ktune({});
  EXPECT_EQ(none.exit_code, 2) << none;
  EXPECT_THAT(none.err, HasSubstr("subcommand")) << none;
  const Result help = Ktune({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_THAT(help.out, AllOf(HasSubstr("templates"), HasSubstr("compile"))) << help;
}

// --- ktune compile -----------------------------------------------------------------------

class CliCompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    cache_dir_ = dir_ + "/cache";
  }

  // ktune compile with the shipped templates and this test's cache, then `args`.
  Result Compile(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"compile"};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), {"--templates", ShippedTemplatesDir(), "--cache-dir", cache_dir_});
    return Ktune(all);
  }

  std::string dir_;
  std::string cache_dir_;
};

TEST_F(CliCompileTest, CompilesRmsnormAndHitsTheCacheTheSecondTime) {
  const std::string out = dir_ + "/rmsnorm.cubin";
  const std::vector<std::string> args = {
      "rmsnorm", "--dtype", "bf16",  "--shape", "tokens=16,hidden=4096",
      "--arch",  "sm_90a",  "--out", out};
  const Result first = Compile(args);
  ASSERT_EQ(first.exit_code, 0) << first;
  EXPECT_THAT(first.err, IsEmpty());
  EXPECT_THAT(first.out, HasSubstr("template  rmsnorm bf16 hidden=4096,tokens=16\n"));
  EXPECT_THAT(first.out,
              HasSubstr("config    BLOCK=256,CACHE=0,EDGE=0,PER_SHIFT=0,PREFETCH_W=0,"
                        "REUSE_W=1,ROWS_PER_WARP=0,VEC=4 maxrreg=0 minb=1 fastmath=0 sm_90a\n"));
  EXPECT_THAT(first.out,
              HasSubstr("kernel    rmsnorm_kernel<__nv_bfloat16, 256, 4, 0, 0, 0, 0, 1, 0>\n"));
  EXPECT_THAT(first.out, ContainsRegex("lowered   _Z[A-Za-z0-9_]+\n"));
  // ROWS_PER_WARP = 0: one row per block.
  EXPECT_THAT(first.out, HasSubstr("grid      [16, 1, 1]  block [256, 1, 1]"));
  EXPECT_THAT(first.out, ContainsRegex("registers [1-9][0-9]*  spills [0-9]+ B"));
  EXPECT_THAT(first.out, ContainsRegex("compile   [0-9]+\\.[0-9] ms\n"));
  EXPECT_THAT(first.out, Not(HasSubstr("cache hit")));
  EXPECT_THAT(first.out, ContainsRegex("wrote     .*rmsnorm.cubin \\([0-9]+ bytes, sha256 "
                                       "[0-9a-f]{64}\\)"));
  ASSERT_OK_AND_ASSIGN(std::string cubin, ReadFile(out));
  EXPECT_THAT(cubin, StartsWith("\x7f"
                                "ELF"));

  ASSERT_EQ(::unlink(out.c_str()), 0);
  const Result second = Compile(args);
  ASSERT_EQ(second.exit_code, 0) << second;
  EXPECT_THAT(second.out, ContainsRegex("compile   [0-9]+\\.[0-9] ms \\(cubin cache hit\\)\n"));
  ASSERT_OK_AND_ASSIGN(std::string again, ReadFile(out));
  EXPECT_TRUE(again == cubin) << "the cached cubin differs from the compiled one";

  // --no-cache compiles again, and says nothing of the cache.
  std::vector<std::string> no_cache = args;
  no_cache.push_back("--no-cache");
  const Result third = Compile(no_cache);
  ASSERT_EQ(third.exit_code, 0) << third;
  EXPECT_THAT(third.out, Not(HasSubstr("cache hit")));
}

// --reference compiles the kernel that checks every candidate (one 32-thread block per row
// here), e.g. to see its resources or to compare its machine code across an edit.
TEST_F(CliCompileTest, ReferenceCompilesTheCheckingKernel) {
  const std::string out = dir_ + "/reference.cubin";
  const Result r = Compile({"rmsnorm", "--dtype", "bf16", "--shape", "tokens=3,hidden=5",
                            "--reference", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("config    reference "));
  EXPECT_THAT(r.out, HasSubstr("kernel    rmsnorm_reference<__nv_bfloat16>\n"));
  EXPECT_THAT(r.out, HasSubstr("grid      [3, 1, 1]  block [32, 1, 1]"));
  ASSERT_OK_AND_ASSIGN(std::string cubin, ReadFile(out));
  EXPECT_THAT(cubin, StartsWith("\x7f"
                                "ELF"));
}

TEST_F(CliCompileTest, KnobFlagsReachTheConfig) {
  const Result r =
      Compile({"elementwise", "--dtype", "f16", "--shape", "n=4096", "--param", "BLOCK=128",
               "--param", "VEC=8", "--min-blocks", "2", "--maxrregcount", "64", "--fast-math"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("config    BLOCK=128,GRID_STRIDE=0,UNROLL=2,VEC=8 maxrreg=64 "
                               "minb=2 fastmath=1 sm_90\n"));
  EXPECT_THAT(r.out, HasSubstr("kernel    axpby_kernel<__half, 128, 8, 2, 0>\n"));
  // 4096 / (128 * 8 * 2) blocks.
  EXPECT_THAT(r.out, HasSubstr("grid      [2, 1, 1]  block [128, 1, 1]"));
}

struct BadCase {
  std::string name;
  std::vector<std::string> args;
  std::string message;
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

class CliCompileBadInputTest : public CliCompileTest,
                               public ::testing::WithParamInterface<BadCase> {};

TEST_P(CliCompileBadInputTest, ExitsTwoWithTheReasonOnStderr) {
  const Result r = Compile(GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr(GetParam().message)) << r;
  EXPECT_THAT(r.out, IsEmpty()) << r;
}

const std::vector<std::string> kRms = {"rmsnorm", "--dtype", "bf16", "--shape",
                                       "tokens=16,hidden=4096"};

std::vector<std::string> Rms(std::vector<std::string> extra) {
  std::vector<std::string> args = kRms;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    All, CliCompileBadInputTest,
    ::testing::Values(
        BadCase{"UnknownTemplate",
                {"groupnorm", "--dtype", "bf16", "--shape", "n=1"},
                "unknown template 'groupnorm'; known: add_rmsnorm, elementwise, gemm, gemv, layernorm, "
                "rmsnorm, rope, rope_qkv, silu_and_mul, softmax"},
        BadCase{"UnknownDtype",
                {"rmsnorm", "--dtype", "f64", "--shape", "tokens=16,hidden=4096"},
                "unknown dtype 'f64'"},
        BadCase{"DtypeTheTemplateLacks",
                {"rmsnorm", "--dtype", "i32", "--shape", "tokens=16,hidden=4096"},
                "template rmsnorm has no dtype i32"},
        BadCase{"MissingDim",
                {"rmsnorm", "--dtype", "bf16", "--shape", "tokens=16"},
                "missing dim 'hidden'"},
        BadCase{"UnknownDim",
                {"rmsnorm", "--dtype", "bf16", "--shape", "tokens=16,hidden=4096,batch=2"},
                "unknown dim 'batch'"},
        BadCase{"DimOutOfRange",
                {"rmsnorm", "--dtype", "bf16", "--shape", "tokens=16,hidden=0"},
                "dim 'hidden' = 0 is outside [1, 65536]"},
        BadCase{"DimOverItsMax",
                {"rmsnorm", "--dtype", "bf16", "--shape", "tokens=16,hidden=65537"},
                "dim 'hidden' = 65537 is outside [1, 65536]"},
        BadCase{"MalformedShape",
                {"rmsnorm", "--dtype", "bf16", "--shape", "tokens16,hidden=4096"},
                "tokens16"},
        BadCase{"ParamUnknown", Rms({"--param", "WARPS=2"}), "no param 'WARPS'"},
        BadCase{"ParamValueNotListed", Rms({"--param", "BLOCK=100"}),
                "BLOCK=100 is not one of its values"},
        BadCase{"ParamNotNameEqualsInt", Rms({"--param", "BLOCK"}), "'BLOCK' is not NAME=INTEGER"},
        BadCase{"ParamValueNotInt", Rms({"--param", "BLOCK=big"}),
                "'BLOCK=big' is not NAME=INTEGER"},
        BadCase{"BadArch", Rms({"--arch", "sm90"}), "arch 'sm90'"},
        BadCase{"VirtualArch", Rms({"--arch", "compute_90"}), "arch 'compute_90'"},
        BadCase{"ArchSpecificBeforeSm90", Rms({"--arch", "sm_80a"}),
                "arch-specific targets start at sm_90a"},
        BadCase{"MaxrregcountOutOfRange", Rms({"--maxrregcount", "8"}), "outside 16..255"},
        BadCase{"MinBlocksOutOfRange", Rms({"--min-blocks", "0"}), "outside 1..32"},
        // hidden = 4100 is a multiple of 4 (the default VEC) but not of 8.
        BadCase{
            "ConfigRejectedByAConstraint",
            {"rmsnorm", "--dtype", "bf16", "--shape", "tokens=16,hidden=4100", "--param", "VEC=8"},
            "constraint '(EDGE == 0) == (hidden % VEC == 0)'"},
        BadCase{
            "ConfigOverTheWidestAccess",
            {"rmsnorm", "--dtype", "f32", "--shape", "tokens=16,hidden=4096", "--param", "VEC=8"},
            "constraint 'VEC * sizeof(dtype) <= 16'"},
        BadCase{"ReferenceWithAParam", Rms({"--reference", "--param", "BLOCK=128"}),
                "--reference compiles the template's reference kernel: it takes no --param"},
        BadCase{"ReferenceWithAKnob", Rms({"--reference", "--min-blocks", "2"}),
                "it takes no --param, --maxrregcount, --min-blocks or --fast-math"},
        BadCase{"UnknownFlag", Rms({"--bogus"}), "--bogus"},
        BadCase{"MissingRequiredFlag", {"rmsnorm", "--shape", "tokens=16,hidden=4096"}, "--dtype"},
        BadCase{
            "MissingTemplateName", {"--dtype", "bf16", "--shape", "n=1"}, "template is required"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

// `ktune compile` of the tiny template (f32, n = 1000) with `kernel` as its candidate kernel's
// body, into a cache of its own.
Result CompileTinyWithBody(const std::string& kernel) {
  const std::string templates = NewTempDir();
  testing::WriteTiny(templates);
  EXPECT_OK(AtomicWriteFile(templates + "/tiny/tiny.cu",
                            "template <typename T, int BLOCK, int VEC>\n"
                            "__global__ void tiny(const T* x, T* out, int n) {\n" + kernel +
                                "}\n"
                                "template <typename T>\n"
                                "__global__ void tiny_ref(const T* x, T* out, int n) {}\n"));
  return Ktune({"compile", "tiny", "--dtype", "f32", "--shape", "n=1000", "--templates",
                templates, "--cache-dir", NewTempDir()});
}

TEST(CliCompileFailureTest, CompileErrorExitsOneAndPrintsTheLog) {
  const Result r = CompileTinyWithBody("  out[0] = x[0] +;\n");
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("tiny.cu"), HasSubstr("error"), HasSubstr("ktune: compile failed")))
      << r;
  EXPECT_THAT(r.out, HasSubstr("template  tiny f32 n=1000")) << r;
}

// A compile that succeeds with warnings shows them (on stderr): a warning of the front end or
// of ptxas would otherwise vanish with the log of a successful compile.
TEST(CliCompileWarningTest, WarningsOfASuccessfulCompileGoToStderr) {
  const Result r = CompileTinyWithBody("  int never_read;\n  out[0] = x[0];\n");
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.err, AllOf(HasSubstr("warning"), HasSubstr("never_read"))) << r;
  EXPECT_THAT(r.out, ContainsRegex("compile   [0-9]+\\.[0-9] ms\n")) << r;
}

}  // namespace
}  // namespace ktune
