// The shipped gemm template: its Hopper path exists on sm_90a only and is excluded from
// every other target by the manifest (before compiling, not failed at run time), its
// portable path serves other GPUs and rows TMA cannot read, its few-rows path decode steps
// only, its default config follows the device and the shape (default_alternatives), and
// its tensor maps follow the tile params.
// No GPU, no compiling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/dtype.h"
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

Shape Mnk(int64_t m, int64_t n, int64_t k) { return {{"m", m}, {"n", n}, {"k", k}}; }

class ShippedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = testing::LoadShippedRegistry();
    ASSERT_NE(registry_, nullptr);
    ASSERT_OK_AND_ASSIGN(gemm_, registry_->Get("gemm"));
  }

  // Candidates of the search space by target, and whether any is on the Hopper path.
  void Count(const SearchSpace& space, int* hopper_90a, int* hopper_other, int* portable) {
    *hopper_90a = *hopper_other = *portable = 0;
    for (const Config& c : space.configs) {
      if (c.params.at("WGMMA") == 0) {
        ++*portable;
      } else if (c.knobs.target == "sm_90a") {
        ++*hopper_90a;
      } else {
        ++*hopper_other;
      }
    }
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::shared_ptr<const KernelTemplate> gemm_;
};

// On an sm_90 device both targets are tried: every Hopper candidate is sm_90a, the plain
// sm_90 ones are rejected by the manifest's target constraint, and the portable path is
// there on sm_90 (not duplicated on sm_90a).
TEST_F(ShippedGemmTest, HopperPathOnlyOnSm90a) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       EnumerateSearchSpace(gemm_, DType::kBF16, Mnk(16, 4096, 4096), h200));
  int hopper_90a, hopper_other, portable;
  Count(space, &hopper_90a, &hopper_other, &portable);
  EXPECT_GT(hopper_90a, 0);
  EXPECT_EQ(hopper_other, 0);
  EXPECT_GT(portable, 0);
  for (const Config& c : space.configs) {
    if (c.params.at("WGMMA") == 0) {
      EXPECT_EQ(c.knobs.target, "sm_90") << ConfigString(c);
    }
  }
  bool target_rule = false;
  for (const auto& [why, count] : space.rejected) {
    target_rule |= absl::StrContains(why, "KTUNE_ARCH_SPECIFIC") && count > 0;
  }
  EXPECT_TRUE(target_rule) << "no sm_90 Hopper candidate was rejected by the manifest";

  // An Ampere GPU gets the portable path alone; fp8 has none there.
  ASSERT_OK_AND_ASSIGN(TargetInfo a100, TargetFromArch("sm_80"));
  ASSERT_OK_AND_ASSIGN(space, EnumerateSearchSpace(gemm_, DType::kBF16, Mnk(16, 4096, 4096), a100));
  Count(space, &hopper_90a, &hopper_other, &portable);
  EXPECT_EQ(hopper_90a + hopper_other, 0);
  EXPECT_GT(portable, 0);
  ASSERT_OK_AND_ASSIGN(space,
                       EnumerateSearchSpace(gemm_, DType::kF8E4M3, Mnk(16, 4096, 4096), a100));
  EXPECT_TRUE(space.configs.empty());
}

// The default config: the params' defaults on sm_90a on Hopper, the portable path on
// Ampere and Ada, for f32 and for rows TMA cannot read; none for fp8 before Ada, saying why.
TEST_F(ShippedGemmTest, DefaultConfigFollowsDeviceAndShape) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(TargetInfo a100, TargetFromArch("sm_80"));
  ASSERT_OK_AND_ASSIGN(Config hopper, DefaultConfigFor(gemm_, DType::kBF16, Mnk(1, 4096, 4096), h200));
  EXPECT_EQ(hopper.params.at("WGMMA"), 1);
  EXPECT_EQ(hopper.knobs.target, "sm_90a");
  ASSERT_OK_AND_ASSIGN(Config fp8, DefaultConfigFor(gemm_, DType::kF8E4M3, Mnk(4096, 4096, 4096), h200));
  EXPECT_EQ(fp8.knobs.target, "sm_90a");

  ASSERT_OK_AND_ASSIGN(Config odd_k, DefaultConfigFor(gemm_, DType::kF16, Mnk(33, 70, 77), h200));
  EXPECT_EQ(odd_k.params.at("WGMMA"), 0);
  EXPECT_EQ(odd_k.knobs.target, "sm_90");

  ASSERT_OK_AND_ASSIGN(Config ampere, DefaultConfigFor(gemm_, DType::kBF16, Mnk(16, 4096, 4096), a100));
  EXPECT_EQ(ampere.params.at("WGMMA"), 0);
  EXPECT_EQ(ampere.knobs.target, "sm_80");
  EXPECT_THAT(DefaultConfigFor(gemm_, DType::kF8E4M3, Mnk(16, 4096, 4096), a100).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no default config fits")));

  // f32 (3xTF32) on both paths: Hopper candidates on Hopper's sm_90a only, within the
  // shared memory their slots and rests take (the default's 128 x 128 x 4 slots do not fit,
  // so its default there has 3 stages); rows TMA cannot read take the portable path.
  for (bool on_hopper : {true, false}) {
    const TargetInfo& t = on_hopper ? h200 : a100;
    ASSERT_OK_AND_ASSIGN(Config f32, DefaultConfigFor(gemm_, DType::kF32, Mnk(16, 4096, 4096), t));
    EXPECT_EQ(f32.params.at("WGMMA"), on_hopper ? 1 : 0);
    if (on_hopper) {
      EXPECT_EQ(f32.params.at("STAGES"), 3);
      EXPECT_EQ(f32.knobs.target, "sm_90a");
    }
    ASSERT_OK_AND_ASSIGN(Config f32_odd_k,
                         DefaultConfigFor(gemm_, DType::kF32, Mnk(16, 4096, 4097), t));
    EXPECT_EQ(f32_odd_k.params.at("WGMMA"), 0);
    ASSERT_OK_AND_ASSIGN(SearchSpace space,
                         EnumerateSearchSpace(gemm_, DType::kF32, Mnk(1000, 4096, 4096), t));
    int hopper = 0;
    for (const Config& c : space.configs) {
      if (c.params.at("WGMMA") == 0) continue;
      ++hopper;
      EXPECT_EQ(c.knobs.target, "sm_90a") << ConfigString(c);
      EXPECT_EQ(c.params.at("EPI"), 0) << ConfigString(c);
      // Each stage's rows of x and w (128 bytes each) and their rests (as many again) fit
      // the opt-in shared memory less the kilobyte of alignment slack.
      EXPECT_LE(c.params.at("STAGES") * (c.params.at("BM") + c.params.at("BN")) * 256,
                232448 - 1024)
          << ConfigString(c);
    }
    EXPECT_EQ(hopper > 0, on_hopper) << hopper;
    EXPECT_LT(hopper, static_cast<int>(space.configs.size()));
  }

  // fp8 from sm_89 (Ada) on the portable path, and on Hopper where TMA cannot read the rows.
  ASSERT_OK_AND_ASSIGN(TargetInfo l40s, TargetFromArch("sm_89"));
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    ASSERT_OK_AND_ASSIGN(Config ada, DefaultConfigFor(gemm_, fp8, Mnk(16, 4096, 4096), l40s));
    EXPECT_EQ(ada.params.at("WGMMA"), 0);
    EXPECT_EQ(ada.knobs.target, "sm_89");
    ASSERT_OK_AND_ASSIGN(Config odd, DefaultConfigFor(gemm_, fp8, Mnk(33, 70, 77), h200));
    EXPECT_EQ(odd.params.at("WGMMA"), 0);
    EXPECT_EQ(odd.knobs.target, "sm_90");
  }
}

// The portable path binds where TMA cannot read (k * 2 bytes not a multiple of 16): the
// tensor maps no launch of it takes are not held to TMA's rules, only linked to their buffer.
TEST_F(ShippedGemmTest, PortablePathIgnoresMapsItDoesNotTake) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Config c, DefaultConfigFor(gemm_, DType::kBF16, Mnk(33, 70, 77), h200));
  ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kBF16, Mnk(33, 70, 77), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  ASSERT_EQ(bound.instance->launches.size(), 1u);
  EXPECT_THAT(bound.instance->launches[0].name_expression, HasSubstr("gemm_mma_kernel"));
  for (const BoundArg& a : bound.instance->args) {
    if (!a.is_tensor_map()) continue;
    EXPECT_EQ(a.tensor_map.rank(), 0) << a.name;
    EXPECT_GE(a.tensor_map.buffer_arg, 0) << a.name;
  }
  // The reference takes no map either, so it binds at such a shape too.
  EXPECT_OK(BindReference(gemm_, DType::kBF16, Mnk(33, 70, 77), h200).status());
}

// What the launchers check of each buffer's address: 16 bytes where the kernels load
// vectors (or TMA reads), 4 for the scales and counters, read one element at a time (a
// scale may be any element of a caller's array of scales).
TEST_F(ShippedGemmTest, BuffersCarryTheAlignmentTheKernelsNeed) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Instance ref, BindReference(gemm_, DType::kF8E4M3, Mnk(16, 4096, 4096),
                                                   h200));
  std::map<std::string, int> alignment;
  for (const BoundArg& a : ref.args) {
    if (a.is_buffer) alignment[a.name] = a.alignment;
  }
  EXPECT_EQ(alignment, (std::map<std::string, int>{{"x", 16},
                                                   {"w", 16},
                                                   {"out", 16},
                                                   {"scale_x", 4},
                                                   {"scale_w", 4},
                                                   {"partial", 16},
                                                   {"counters", 4}}));
}

// The maps of a Hopper candidate follow its tiles: x's box is BM rows (SWAP 0), split
// between a cluster's blocks; with SWAP 1 w's box is BM rows and x's BN.
TEST_F(ShippedGemmTest, TensorMapsFollowTheTile) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Config c, DefaultConfigFor(gemm_, DType::kBF16, Mnk(256, 6144, 4096), h200));
  c.params["BN"] = 64;
  c.params["CLUSTER"] = 2;
  ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kBF16, Mnk(256, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  const Instance& i = *bound.instance;
  auto map = [&](const std::string& name) -> const TensorMapDesc& {
    for (const BoundArg& a : i.args) {
      if (a.name == name) return a.tensor_map;
    }
    ADD_FAILURE() << "no arg " << name;
    static TensorMapDesc none;
    return none;
  };
  EXPECT_EQ(map("tm_x").box, (std::vector<int64_t>{64, 128 / 2}));
  EXPECT_EQ(map("tm_w").box, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(map("tm_x").dims, (std::vector<int64_t>{4096, 256}));
  EXPECT_EQ(map("tm_x").strides, (std::vector<int64_t>{8192}));
  // Whole clusters in the persistent grid.
  EXPECT_EQ(i.launches[0].grid[0] % 2, 0);

  c.params["SWAP"] = 1;
  c.params["CLUSTER"] = 1;
  c.params["BN"] = 16;
  ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kF8E4M3, Mnk(16, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  for (const BoundArg& a : bound.instance->args) {
    if (a.name == "tm_w") {
      EXPECT_EQ(a.tensor_map.box, (std::vector<int64_t>{128, 128}));
    }
    if (a.name == "tm_x") {
      EXPECT_EQ(a.tensor_map.box, (std::vector<int64_t>{128, 16}));
    }
    if (a.name == "out") {
      EXPECT_EQ(a.dtype, DType::kBF16);  // fp8 writes bf16
    }
  }
}

// A cluster sharing w's tile (SHARE_W 1): w's box is split between the blocks, x's is
// whole, and the units walk along m; it needs a second row of tiles over m to share with.
TEST_F(ShippedGemmTest, SharingWSplitsTheWeightTile) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Config c, DefaultConfigFor(gemm_, DType::kBF16, Mnk(256, 6144, 4096), h200));
  c.params["BN"] = 64;
  c.params["CLUSTER"] = 2;
  c.params["SHARE_W"] = 1;
  ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kBF16, Mnk(256, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  for (const BoundArg& a : bound.instance->args) {
    if (a.name == "tm_x") {
      EXPECT_EQ(a.tensor_map.box, (std::vector<int64_t>{64, 128}));
    }
    if (a.name == "tm_w") {
      EXPECT_EQ(a.tensor_map.box, (std::vector<int64_t>{64, 32}));
    }
  }
  // 2 rows of tiles over m make 1 unit of 2; 96 columns over n: 96 units, 66 clusters.
  EXPECT_EQ(bound.instance->launches[0].grid[0], 132);
  EXPECT_THAT(bound.instance->launches[0].name_expression,
              HasSubstr("gemm_wgmma_kernel<__nv_bfloat16, 128, 64, 4, 1, 8, 0, 2, 1, 0>"));

  ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, Mnk(128, 6144, 4096), c, h200));
  EXPECT_FALSE(bound.instance);
  EXPECT_THAT(bound.rejected_because, HasSubstr("SHARE_W"));
}

// EPI 1 launches gemm_wgmma_tma_out_kernel with a map over out (64 columns by a warp's 16
// rows) and room for the staging; it needs rows of out in 16-byte multiples, no split-K and
// no SWAP. With EPI 0 the map over out is never evaluated, so odd n still binds.
TEST_F(ShippedGemmTest, TmaStoreEpilogueTakesAMapOverOut) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Config c, DefaultConfigFor(gemm_, DType::kBF16, Mnk(256, 6144, 4096), h200));
  c.params["EPI"] = 1;
  ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kBF16, Mnk(256, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  const BoundLaunch& l = bound.instance->launches[0];
  EXPECT_THAT(l.name_expression,
              HasSubstr("gemm_wgmma_tma_out_kernel<__nv_bfloat16, 128, 128, 4, 8, 1, 0, 0>"));
  EXPECT_EQ(l.args, (std::vector<std::string>{"tm_x", "tm_w", "tm_out", "partial", "counters",
                                              "scale_x", "scale_w", "m", "n", "k"}));
  // 4 slots of (128 + 128) rows x 128 bytes, 2 x 16 KiB of staging, alignment, barriers.
  EXPECT_EQ(l.shared_bytes, 4 * 256 * 128 + 2 * 16384 + 1024 + 16 * 4);
  for (const BoundArg& a : bound.instance->args) {
    if (a.name != "tm_out") continue;
    EXPECT_EQ(a.tensor_map.box, (std::vector<int64_t>{64, 16}));
    EXPECT_EQ(a.tensor_map.dims, (std::vector<int64_t>{6144, 256}));
    EXPECT_EQ(a.tensor_map.strides, (std::vector<int64_t>{6144 * 2}));
  }

  for (const auto& [shape, param, value] :
       std::vector<std::tuple<Shape, std::string, int64_t>>{
           {Mnk(256, 1003, 4096), "EPI", 1}, {Mnk(256, 6144, 4096), "SPLIT_K", 2}}) {
    Config bad = c;
    bad.params[param] = value;
    ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, shape, bad, h200));
    EXPECT_FALSE(bound.instance) << param;
    EXPECT_THAT(bound.rejected_because, HasSubstr("EPI")) << param;
  }
  c.params["EPI"] = 0;
  ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, Mnk(256, 1003, 4096), c, h200));
  EXPECT_TRUE(bound.instance) << bound.rejected_because;
}

// Split-K's partials are a BM x BN region per split of each split tile: every split
// candidate at decode, odd and prefill shapes fits the buffer the shape sizes, which stays
// at 16 MB or less however large the shape.
TEST_F(ShippedGemmTest, SplitKPartialsFitTheirBuffer) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  int split = 0;
  for (const Shape& shape : {Mnk(1, 4096, 4096), Mnk(3, 1000, 4112), Mnk(77, 6144, 4096),
                             Mnk(128, 28672, 4096), Mnk(1000, 4096, 14336),
                             Mnk(4096, 128256, 4096)}) {
    for (DType dtype : {DType::kBF16, DType::kF8E4M3, DType::kF32}) {
      ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm_, dtype, shape, h200));
      for (const Config& c : space.configs) {
        const int64_t split_k = c.params.at("SPLIT_K");
        // The few-rows path's partials: FewRowsPathOnlyForDecodeRows.
        if (split_k == 1 || c.params.at("ROWS_X") > 0) continue;
        ++split;
        ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, dtype, shape, c, h200));
        ASSERT_TRUE(bound.instance) << bound.rejected_because;
        const int64_t m = shape.at("m"), n = shape.at("n");
        const bool swap = c.params.at("SWAP") == 1;
        const int64_t bm = c.params.at("BM"), bn = c.params.at("BN");
        const int64_t p = swap ? n : m, q = swap ? m : n;
        const int64_t need = (p + bm - 1) / bm * bm * ((q + bn - 1) / bn * bn) * split_k;
        for (const BoundArg& a : bound.instance->args) {
          if (a.name != "partial") continue;
          EXPECT_LE(need, a.count) << ConfigString(c);
          EXPECT_LE(a.count, 4194304) << ConfigString(c);
        }
      }
    }
  }
  EXPECT_GT(split, 0) << "no split-K candidate at any shape";
}

// The portable path splits K too (grid.z = SPLIT_K blocks per tile), but only where its
// tiles leave SMs idle: the decode rows of a projection get splits (f32 on an A100: 192
// tiles of 64 x 32 at m = 1), a prefill's tiles none.
TEST_F(ShippedGemmTest, PortableSplitKOnlyWhereTilesLeaveSmsIdle) {
  ASSERT_OK_AND_ASSIGN(TargetInfo a100, TargetFromArch("sm_80"));
  ASSERT_OK_AND_ASSIGN(SearchSpace decode,
                       EnumerateSearchSpace(gemm_, DType::kF32, Mnk(1, 6144, 4096), a100));
  int split = 0;
  for (const Config& c : decode.configs) {
    const int64_t split_k = c.params.at("SPLIT_K");
    if (split_k == 1 || c.params.at("ROWS_X") > 0) continue;
    ++split;
    EXPECT_EQ(c.params.at("WGMMA"), 0) << ConfigString(c);
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, DType::kF32, Mnk(1, 6144, 4096), c, a100));
    ASSERT_TRUE(bound.instance) << bound.rejected_because;
    const BoundLaunch& l = bound.instance->launches[0];
    EXPECT_THAT(l.name_expression, HasSubstr(absl::StrCat(", ", split_k, ">")));
    EXPECT_EQ(l.grid[2], split_k) << ConfigString(c);
    // Every split of every tile resident at once, at most 8 blocks per SM.
    EXPECT_LE(l.grid[0] * l.grid[1] * l.grid[2], 8 * 108) << ConfigString(c);
    EXPECT_THAT(l.args, ::testing::Contains("partial"));
    EXPECT_THAT(l.args, ::testing::Contains("counters"));
  }
  EXPECT_GT(split, 0) << "no portable split-K candidate at m = 1";
  ASSERT_OK_AND_ASSIGN(SearchSpace prefill,
                       EnumerateSearchSpace(gemm_, DType::kF32, Mnk(4096, 6144, 4096), a100));
  for (const Config& c : prefill.configs) EXPECT_EQ(c.params.at("SPLIT_K"), 1) << ConfigString(c);
}

// The few-rows path (CUDA cores) is in the race at decode rows only, f32 up to 32 and the
// other dtypes up to 8, on every GPU (the plain target: the program is the same on sm_90a),
// fp8 from Ada; its unused params take one value each, so it adds no duplicate candidates.
// Its grid is the chunks of x's rows times the blocks of 4 ROWS_W rows of w, its splits
// along y, and their partials and counters fit the buffers the shape sizes.
TEST_F(ShippedGemmTest, FewRowsPathOnlyForDecodeRows) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h100, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(TargetInfo a100, TargetFromArch("sm_80"));
  ASSERT_OK_AND_ASSIGN(TargetInfo l40s, TargetFromArch("sm_89"));
  const auto few_rows = [&](DType dtype, const Shape& shape, const TargetInfo& target) {
    std::vector<Config> found;
    absl::StatusOr<SearchSpace> space = EnumerateSearchSpace(gemm_, dtype, shape, target);
    EXPECT_TRUE(space.ok()) << space.status();
    if (!space.ok()) return found;
    for (const Config& c : space->configs) {
      if (c.params.at("ROWS_X") > 0) found.push_back(c);
    }
    return found;
  };
  struct Case {
    DType dtype;
    Shape shape;
    const TargetInfo* target;
    bool has;
  };
  const std::vector<Case> cases = {
      {DType::kF32, Mnk(1, 6144, 4096), &h100, true},
      {DType::kF32, Mnk(32, 1003, 4096), &h100, true},
      {DType::kF32, Mnk(33, 6144, 4096), &h100, false},
      {DType::kF32, Mnk(16, 6144, 4096), &a100, true},
      {DType::kBF16, Mnk(8, 4096, 4096), &h100, true},
      {DType::kBF16, Mnk(9, 4096, 4096), &h100, false},
      {DType::kF16, Mnk(3, 1003, 144), &a100, true},
      {DType::kF8E4M3, Mnk(1, 4096, 4096), &l40s, true},
      {DType::kF8E5M2, Mnk(8, 4096, 4096), &h100, true},
      {DType::kF8E4M3, Mnk(1, 4096, 4096), &a100, false},  // fp8 from sm_89
      {DType::kBF16, Mnk(1, 4096, 4100), &h100, false},    // rows not 16-byte aligned
  };
  for (const Case& t : cases) {
    const std::string what =
        absl::StrCat(DTypeName(t.dtype), " ", ShapeString(t.shape), " on ", t.target->PortableTarget());
    const std::vector<Config> found = few_rows(t.dtype, t.shape, *t.target);
    EXPECT_EQ(!found.empty(), t.has) << what << ": " << found.size();
    std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
    int split = 0;
    for (const Config& c : found) {
      EXPECT_EQ(c.knobs.target, t.target->PortableTarget()) << ConfigString(c);
      for (const auto& [param, value] : std::vector<std::pair<std::string, int64_t>>{
               {"WGMMA", 0}, {"BM", 64}, {"BN", 64}, {"STAGES", 4}, {"GROUP", 8},
               {"CLUSTER", 1}, {"SWAP", 0}, {"SHARE_W", 0}, {"EPI", 0}, {"TAIL", 0}}) {
        EXPECT_EQ(c.params.at(param), value) << param << " of " << ConfigString(c);
      }
      const int64_t rx = c.params.at("ROWS_X"), rw = c.params.at("ROWS_W");
      const int64_t split_k = c.params.at("SPLIT_K");
      EXPECT_TRUE(seen.insert({rx, rw, split_k}).second) << "twice: " << ConfigString(c);
      EXPECT_LE(rx * rw, 64) << ConfigString(c);
      const int64_t m = t.shape.at("m"), n = t.shape.at("n");
      EXPECT_TRUE(rx == 1 || rx < 2 * m) << ConfigString(c);
      ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, t.dtype, t.shape, c, *t.target));
      ASSERT_TRUE(bound.instance) << ConfigString(c) << ": " << bound.rejected_because;
      ASSERT_EQ(bound.instance->launches.size(), 1u);
      const BoundLaunch& l = bound.instance->launches[0];
      EXPECT_THAT(l.name_expression, HasSubstr(absl::StrCat("gemm_rows_kernel<", DTypeCudaName(t.dtype),
                                                            ", ", rx, ", ", rw, ", ", split_k, ">")));
      const int64_t tiles = (m + rx - 1) / rx * ((n + 4 * rw - 1) / (4 * rw));
      EXPECT_EQ(l.grid[0], tiles) << ConfigString(c);
      EXPECT_EQ(l.grid[1], split_k) << ConfigString(c);
      EXPECT_EQ(l.block[0], 128) << ConfigString(c);
      if (split_k == 1) continue;
      ++split;
      // Splits only while the blocks fit 4 to an SM; one counter per tile; 4 warps of rx x rw
      // partial sums per split of each tile.
      EXPECT_LE(tiles * split_k, 4 * t.target->sm_count) << ConfigString(c);
      for (const BoundArg& a : bound.instance->args) {
        if (a.name == "counters") EXPECT_LE(tiles, a.count) << ConfigString(c);
        if (a.name == "partial") EXPECT_LE(tiles * split_k * 4 * rx * rw, a.count) << ConfigString(c);
      }
    }
    if (t.has && t.shape.at("n") < 2000) EXPECT_GT(split, 0) << what << ": no split-K candidate";
  }
}

// TAIL splits the last wave's tiles along K: it binds only where the tiles (units of CLUSTER)
// leave a partial last wave of at most half the grid, and never beside split-K or SWAP.
// qkv at m = 1024 in 128 x 256 tiles: 8 x 24 = 192 tiles on 132 SMs, a last wave of 60.
TEST_F(ShippedGemmTest, TailSplitsOnlyAPartialLastWave) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  ASSERT_OK_AND_ASSIGN(Config c,
                       DefaultConfigFor(gemm_, DType::kBF16, Mnk(1024, 6144, 4096), h200));
  c.params["BN"] = 256;
  c.params["TAIL"] = 1;
  ASSERT_OK_AND_ASSIGN(BindResult bound,
                       Bind(gemm_, DType::kBF16, Mnk(1024, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  EXPECT_THAT(bound.instance->launches[0].name_expression,
              HasSubstr("gemm_wgmma_kernel<__nv_bfloat16, 128, 256, 4, 1, 8, 0, 1, 0, 1>"));
  EXPECT_EQ(bound.instance->launches[0].grid[0], 132);
  c.params["EPI"] = 1;
  ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, Mnk(1024, 6144, 4096), c, h200));
  ASSERT_TRUE(bound.instance) << bound.rejected_because;
  EXPECT_THAT(bound.instance->launches[0].name_expression,
              HasSubstr("gemm_wgmma_tma_out_kernel<__nv_bfloat16, 128, 256, 4, 8, 1, 0, 1>"));

  // One wave (2 x 24 tiles), nothing idle to split for; 512 tiles, a last wave of 116 of
  // 132; beside split-K (2 x 32 tiles of 128 x 128, split in two: a valid split-K point).
  c.params["EPI"] = 0;
  Config split = c;
  split.params["BN"] = 128;
  split.params["SPLIT_K"] = 2;
  for (const auto& [shape, bad] : std::vector<std::tuple<Shape, Config>>{
           {Mnk(130, 6144, 4096), c}, {Mnk(4096, 4096, 4096), c}, {Mnk(256, 4096, 4096), split}}) {
    ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, shape, bad, h200));
    EXPECT_FALSE(bound.instance) << ShapeString(shape);
    EXPECT_THAT(bound.rejected_because, HasSubstr("TAIL")) << ShapeString(shape);
    Config without = bad;
    without.params["TAIL"] = 0;
    ASSERT_OK_AND_ASSIGN(bound, Bind(gemm_, DType::kBF16, shape, without, h200));
    EXPECT_TRUE(bound.instance) << ShapeString(shape) << ": " << bound.rejected_because;
  }
}

// What TAIL's kernel splits (gemm.cu's Walk: as many slices as the last wave leaves clusters
// idle, at most one per K slot and as many as the partials' buffer holds) is at least two for
// every TAIL candidate the manifest admits, and its partials fit the buffer.
TEST_F(ShippedGemmTest, TailPartialsFitTheirBuffer) {
  ASSERT_OK_AND_ASSIGN(TargetInfo h200, TargetFromArch("sm_90"));
  int tails = 0;
  for (const Shape& shape : {Mnk(1024, 6144, 4096), Mnk(1024, 4096, 14336),
                             Mnk(1000, 28672, 4112), Mnk(4096, 28672, 4096),
                             Mnk(16384, 6144, 4096), Mnk(777, 128256, 4096)}) {
    for (DType dtype : {DType::kBF16, DType::kF8E4M3, DType::kF32}) {
      ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(gemm_, dtype, shape, h200));
      for (const Config& c : space.configs) {
        if (c.params.at("TAIL") == 0) continue;
        ++tails;
        ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(gemm_, dtype, shape, c, h200));
        ASSERT_TRUE(bound.instance) << bound.rejected_because;
        const int64_t m = shape.at("m"), n = shape.at("n"), k = shape.at("k");
        const int64_t bm = c.params.at("BM"), bn = c.params.at("BN");
        const int64_t cluster = c.params.at("CLUSTER");
        const bool share_w = c.params.at("SHARE_W") == 1;
        EXPECT_EQ(c.params.at("SPLIT_K"), 1);
        EXPECT_EQ(c.params.at("SWAP"), 0);
        int64_t tiles_p = (m + bm - 1) / bm, tiles_q = (n + bn - 1) / bn;
        if (share_w) tiles_p = (tiles_p + cluster - 1) / cluster;
        else tiles_q = (tiles_q + cluster - 1) / cluster;
        const int64_t units = tiles_p * tiles_q;
        const int64_t stride = bound.instance->launches[0].grid[0] / cluster;
        ASSERT_EQ(stride, h200.sm_count / cluster) << ConfigString(c);
        const int64_t tail = units % stride;
        const int64_t room = std::min<int64_t>(8 * (m + 127) * (n + 127), 4194304) / (bm * bn);
        const int64_t kblocks = (k * DTypeSize(dtype) + 127) / 128;
        const int64_t split =
            std::min({stride / tail, kblocks, room / (tail * cluster)});
        EXPECT_GE(split, 2) << ShapeString(shape) << " " << ConfigString(c);
        for (const BoundArg& a : bound.instance->args) {
          if (a.name == "partial") {
            EXPECT_LE(tail * cluster * split * bm * bn, a.count) << ConfigString(c);
          } else if (a.name == "counters") {
            EXPECT_LE(tail * cluster, a.count) << ConfigString(c);
          }
        }
      }
    }
  }
  EXPECT_GT(tails, 0) << "no TAIL candidate at any shape";
}

}  // namespace
}  // namespace ktune
