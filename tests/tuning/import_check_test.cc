#include "server/tuning/import_check.h"
#include "server/tuning/launch_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "server/base/sha256.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_cubin.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::ktune::testing::StatusIs;

constexpr char kH200[] = "NVIDIA H200|sm_90|132sm|6144bit";
constexpr char kKernel[] = "_Z4tinyIfLi128ELi1EEvPKT_PS0_i";

store::Device H200() {
  store::Device d;
  d.model_key = kH200;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.l2_bytes = 50 << 20;
  d.memory_bus_bits = 6144;
  d.memory_clock_khz = 3201000;
  d.copy_gbps = 4000;
  return d;
}

void SetCubin(store::Entry* e, const std::string& cubin) {
  e->cubin = cubin;
  e->cubin_sha256 = Sha256Hex(cubin);
}

// One entry of the "tiny" test template as `ktune cache export` writes it.
store::ExportFile GoodFile() {
  store::EntryBundle b;
  store::Entry& e = b.entry;
  e.key = {kH200, "tiny", "f32", "n=4096"};
  e.source_hash = "src";
  e.nvrtc_version = "13.0";
  e.config.params = {{"BLOCK", 128}, {"VEC", 1}};
  SetCubin(&e, testing::MakeFakeCubin({kKernel}));
  LaunchSpec l;
  l.lowered_name = kKernel;
  l.grid = {32, 1, 1};
  l.block = {128, 1, 1};
  l.args = {"x", "out", "count"};
  e.launches = {l};
  e.metrics.time_ns = 2500;
  e.metrics.repeats = 40;
  e.metrics.registers = 16;
  e.metrics.occupancy = 1;
  e.metrics.batch = 1;
  e.trials_total = 2;
  e.trials_ok = 1;
  e.tuning_seconds = 3;
  e.default_time_ns = 3000;
  b.job.key = e.key;
  b.job.state = store::JobState::kDone;
  b.job.done = 2;
  b.job.total = 2;
  store::Trial ok;
  ok.config = e.config;
  ok.metrics = e.metrics;
  store::Trial failed;
  failed.config = e.config;
  failed.outcome = Outcome::kCompileFailed;
  b.trials = {ok, failed};
  store::ExportFile f;
  f.devices = {H200()};
  f.entries = {b};
  return f;
}

class ImportCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TemplateRegistry>> r =
        LoadTemplateRegistry(testing::TestTemplatesDir());
    ASSERT_TRUE(r.ok()) << r.status();
    registry_ = *std::move(r);
  }
  absl::Status Check(const store::ExportFile& f, const std::vector<store::Device>& known = {}) {
    return CheckImportFile(*registry_, known, f);
  }
  std::unique_ptr<TemplateRegistry> registry_;
};

TEST_F(ImportCheckTest, AGoodFilePasses) {
  EXPECT_OK(Check(GoodFile()));
  // The device row may come from the store instead of the file.
  store::ExportFile f = GoodFile();
  f.devices.clear();
  EXPECT_OK(Check(f, {H200()}));
}

// One forged field per case, each refused naming the entry and the field.
TEST_F(ImportCheckTest, EveryForgedFieldIsRefusedNamingEntryAndField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    const char* name;
    std::function<void(store::ExportFile*)> forge;
    const char* message;
  };
  auto entry = [](store::ExportFile* f) -> store::Entry& { return f->entries[0].entry; };
  const std::vector<Case> cases = {
      {"negative time", [&](auto* f) { entry(f).metrics.time_ns = -1; },
       "metrics.time_ns: -1 is not a finite positive time"},
      {"zero time", [&](auto* f) { entry(f).metrics.time_ns = 0; },
       "metrics.time_ns: 0 is not a finite positive time"},
      {"nan time", [&](auto* f) { entry(f).metrics.time_ns = nan; }, "metrics.time_ns: nan"},
      {"negative spread", [&](auto* f) { entry(f).metrics.spread_ns = -5; },
       "metrics.spread_ns: -5 is not finite and >= 0"},
      {"negative registers", [&](auto* f) { entry(f).metrics.registers = -1; },
       "metrics.registers"},
      {"empty cubin", [&](auto* f) { SetCubin(&entry(f), ""); }, "cubin_base64: empty"},
      {"not ELF", [&](auto* f) { SetCubin(&entry(f), "MZ\x90\x00 not an elf"); },
       "cubin_base64: ELF: not an ELF64 file"},
      {"ELF magic and noise",
       [&](auto* f) {
         std::string noise = "\x7f" "ELF";
         for (int i = 0; i < 200; ++i) noise.push_back(static_cast<char>(i * 37 + 11));
         SetCubin(&entry(f), noise);
       },
       "cubin_base64: ELF:"},
      {"sha256", [&](auto* f) { entry(f).cubin_sha256 = std::string(64, '0'); },
       "cubin_sha256: does not match"},
      {"kernel not in cubin", [&](auto* f) { entry(f).launches[0].lowered_name = "_Z5evilv"; },
       "launches[0].lowered_name: '_Z5evilv' is not a kernel of the cubin"},
      {"no launches", [&](auto* f) { entry(f).launches.clear(); }, "launches: none"},
      {"zero block", [&](auto* f) { entry(f).launches[0].block[1] = 0; },
       "launches[0].block[1]: 0"},
      {"foreign arg", [&](auto* f) { entry(f).launches[0].args[1] = "secret"; },
       "launches[0].args[1]: 'secret' is not an arg"},
      {"grid of another shape", [&](auto* f) { entry(f).launches[0].grid[0] = 1; },
       "launches[0].grid: 1x1x1; the template launches 32x1x1 for this key and config"},
      {"block of another config", [&](auto* f) { entry(f).launches[0].block[0] = 256; },
       "launches[0].block: 256x1x1; the template launches 128x1x1"},
      {"shared memory", [&](auto* f) { entry(f).launches[0].shared_bytes = 1 << 20; },
       "launches[0].shared_bytes: 1048576; the template launches 0"},
      // Launched early, a kernel that does not wait would read its input half written.
      {"programmatic", [&](auto* f) { entry(f).launches[0].programmatic = true; },
       "launches[0].programmatic: true; the template launches false"},
      {"args swapped",
       [&](auto* f) { std::swap(entry(f).launches[0].args[0], entry(f).launches[0].args[1]); },
       "launches[0].args: (out, x, count); the template launches (x, out, count)"},
      {"a launch doubled",
       [&](auto* f) { entry(f).launches.push_back(entry(f).launches[0]); },
       "launches: 2 launches; the template launches 1"},
      {"kernel of another config", [&](auto* f) { entry(f).config.params["BLOCK"] = 256; },
       "launches[0].lowered_name: '_Z4tinyIfLi128ELi1EEvPKT_PS0_i'; the template launches "
       "'tiny<float, 256, 1>'"},
      {"config the shape rules out",
       [&](auto* f) {
         entry(f).config.params["VEC"] = 4;
         entry(f).key.shape = "n=4098";
       },
       "config: not a candidate for this key on sm_90"},
      {"occupancy", [&](auto* f) { entry(f).metrics.occupancy = 7; },
       "metrics.occupancy: 7 is not a fraction"},
      {"unknown template", [&](auto* f) { entry(f).key.template_id = "nope"; },
       "key.template_id: unknown template 'nope'"},
      {"template path", [&](auto* f) { entry(f).key.template_id = "../tiny"; },
       "key.template_id: unknown template '../tiny'"},
      {"dtype f64", [&](auto* f) { entry(f).key.dtype = "f64"; },
       "key.dtype: 'f64' is not a dtype of template 'tiny'"},
      {"dtype of another template", [&](auto* f) { entry(f).key.dtype = "f16"; },
       "key.dtype: 'f16'"},
      {"negative dim", [&](auto* f) { entry(f).key.shape = "n=-4096"; }, "key.shape:"},
      {"non-numeric dim", [&](auto* f) { entry(f).key.shape = "n=lots"; }, "key.shape:"},
      {"control character",
       [&](auto* f) { entry(f).key.shape = "n=4096\n"; }, "key.shape:"},
      {"foreign dim", [&](auto* f) { entry(f).key.shape = "m=1,n=4096"; }, "key.shape:"},
      {"not canonical", [&](auto* f) { entry(f).key.shape = "n=04096"; },
       "key.shape: 'n=04096' is not canonical"},
      {"foreign param", [&](auto* f) { entry(f).config.params["EVIL"] = 1; }, "config.params:"},
      {"param value", [&](auto* f) { entry(f).config.params["BLOCK"] = 100; },
       "config.params:"},
      {"unknown target", [&](auto* f) { entry(f).config.knobs.target = "sm_999"; },
       "config.knobs: '"},
      {"target of another device", [&](auto* f) { entry(f).config.knobs.target = "sm_80"; },
       "config.knobs:"},
      {"register cap", [&](auto* f) { entry(f).config.knobs.maxrregcount = 17; },
       "config.knobs:"},
      {"unknown device",
       [&](auto* f) { entry(f).key.device_model = "NVIDIA B200|sm_100|148sm|8192bit"; },
       "key.device_model: 'NVIDIA B200|sm_100|148sm|8192bit' has no device row"},
      {"negative trials", [&](auto* f) { entry(f).trials_total = -3; }, "trials_ok:"},
      {"ok above total", [&](auto* f) { entry(f).trials_ok = 9; }, "trials_ok: 9 of 2"},
      {"negative job count", [&](auto* f) { f->entries[0].job.total = -1; }, "job.done:"},
      {"negative tuning time", [&](auto* f) { entry(f).tuning_seconds = -1; },
       "tuning_seconds"},
      {"negative default time", [&](auto* f) { entry(f).default_time_ns = -1; },
       "default_time_ns"},
      {"trial time", [&](auto* f) { f->entries[0].trials[0].metrics.time_ns = -1; },
       "trials[0].metrics.time_ns: -1"},
      {"trial compile time", [&](auto* f) { f->entries[0].trials[1].compile_ms = nan; },
       "trials[1].compile_ms"},
      {"device cc", [&](auto* f) { f->devices[0].cc_major = -9; },
       "devices[0] (NVIDIA H200|sm_90|132sm|6144bit): cc_major"},
      {"device ceiling", [&](auto* f) { f->devices[0].copy_gbps = -1; },
       "devices[0] (NVIDIA H200|sm_90|132sm|6144bit): copy_gbps"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    store::ExportFile f = GoodFile();
    store::EntryBundle good = f.entries[0];
    c.forge(&f);
    // A good first entry, so the message must name the second.
    good.entry.key.shape = "n=1024";
    good.entry.launches[0].grid[0] = 1024 / 128;
    f.entries.insert(f.entries.begin(), good);
    const bool about_device = std::string(c.message).rfind("devices[", 0) == 0;
    EXPECT_THAT(Check(f),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(about_device ? "devices[0]" : "entries[1] ("),
                               HasSubstr(c.message))));
  }
}

TEST_F(ImportCheckTest, EchoedTextIsEscapedAndShort) {
  store::ExportFile f = GoodFile();
  f.entries[0].entry.key.template_id = std::string("evil\n", 5) + std::string(5000, 'x');
  const absl::Status s = Check(f);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("evil\\n")));
  EXPECT_LT(s.message().size(), 600u);
}

TEST(LaunchCheckTest, SymbolsNameTheKernelOfTheirInstanceOnly) {
  EXPECT_TRUE(SymbolNamesKernel("_Z4tinyIfLi128ELi1EEvPKT_PS0_i", "tiny<float, 128, 1>"));
  EXPECT_TRUE(SymbolNamesKernel("_Z7rmsnormI13__nv_bfloat16Li256ELi4EEvv",
                                "rmsnorm<__nv_bfloat16, 256, 4>"));
  EXPECT_TRUE(SymbolNamesKernel("_ZN5ktune4tinyIfLi128ELi1EEEvv", "tiny<float, 128, 1>"));
  EXPECT_TRUE(SymbolNamesKernel("_Z4tinyIfLin1ELi1EEvv", "tiny<float, -1, 1>"));
  EXPECT_TRUE(SymbolNamesKernel("tiny<float, 128, 1>", "tiny<float,128,1>"));  // not mangled
  EXPECT_FALSE(SymbolNamesKernel("_Z4tinyIfLi128ELi1EEvPKT_PS0_i", "tiny<float, 256, 1>"));
  EXPECT_FALSE(SymbolNamesKernel("_Z4tinyIfLi128ELi1EEvPKT_PS0_i", "tiny<__half, 128, 1>"));
  EXPECT_FALSE(SymbolNamesKernel("_Z8tiny_refIfEvv", "tiny<float, 128, 1>"));
  EXPECT_FALSE(SymbolNamesKernel("_Z5nottyIfLi128ELi1EEvv", "tiny<float, 128, 1>"));
}

}  // namespace
}  // namespace ktune
