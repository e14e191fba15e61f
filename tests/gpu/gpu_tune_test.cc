// End-to-end tuning on a real GPU (CTest label `gpu`): NVRTC, the ktune-worker process,
// verification, timing and the store together. Skips where no GPU driver is present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/base/paths.h"
#include "server/compile/compile_pool.h"
#include "server/gpu/process_gpu.h"
#include "server/store/store.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/tuning_job.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

std::string WorkerPath() {
  const char* env = std::getenv("KTUNE_WORKER");
  return env != nullptr && *env != '\0' ? env : absl::StrCat(KTUNE_BINARY_DIR, "/bin/ktune-worker");
}

class GpuTuneTest : public ::testing::Test {
 protected:
  void Init(const std::string& templates_dir) {
    ProcessGpuOptions o;
    o.worker_path = WorkerPath();
    auto gpu = StartProcessGpu(o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    auto info = gpu_->Info();
    if (!info.ok()) GTEST_SKIP() << "no GPU here: " << info.status();
    auto registry = LoadTemplateRegistry(templates_dir);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    for (const absl::Status& e : registry_->errors()) ADD_FAILURE() << e;
    auto compiler = NewTemplateCompiler(*registry_, nullptr);
    ASSERT_TRUE(compiler.ok()) << compiler.status();
    compiler_ = *std::move(compiler);
    pool_ = std::make_unique<CompilePool>(compiler_.get(), 0);
    auto store = store::OpenSqliteStore(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  TuningEnv Env() { return {registry_.get(), compiler_.get(), pool_.get(), gpu_.get(), store_.get()}; }

  std::unique_ptr<Gpu> gpu_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<Compiler> compiler_;
  std::unique_ptr<CompilePool> pool_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(GpuTuneTest, FaultsAreRecordedAndTheRightCandidateWins) {
  Init(absl::StrCat(testing::SourceDir(), "/tests/gpu/testdata"));
  if (IsSkipped()) return;
  TuneRequest r;
  r.template_name = "faulty";
  r.dtype = DType::kF32;
  r.shape = {{"n", 1 << 20}};
  r.timing.set_time_cap_ms(200);
  ASSERT_OK_AND_ASSIGN(TuneResult result, RunTuning(r, Env()));
  std::map<int64_t, store::Trial> by_mode;
  for (const store::Trial& t : result.trials) by_mode[t.config.params.at("MODE")] = t;
  ASSERT_EQ(by_mode.size(), 7u);
  EXPECT_EQ(by_mode[0].outcome, Outcome::kOk) << by_mode[0].log;
  EXPECT_EQ(by_mode[1].outcome, Outcome::kCrashed) << by_mode[1].log;
  EXPECT_EQ(by_mode[2].outcome, Outcome::kCrashed) << by_mode[2].log;
  EXPECT_EQ(by_mode[3].outcome, Outcome::kCrashed) << by_mode[3].log;
  EXPECT_EQ(by_mode[4].outcome, Outcome::kTimedOut) << by_mode[4].log;
  EXPECT_EQ(by_mode[5].outcome, Outcome::kResourceLimit) << by_mode[5].log;
  EXPECT_EQ(by_mode[6].outcome, Outcome::kWrongResult) << by_mode[6].log;
  for (const auto& [mode, t] : by_mode) {
    std::printf("MODE %lld: %s  %s\n", static_cast<long long>(mode),
                std::string(OutcomeName(t.outcome)).c_str(), t.log.c_str());
  }
  EXPECT_EQ(result.entry.config.params.at("MODE"), 0);
  EXPECT_GT(result.entry.metrics.time_ns, 0);
  EXPECT_GT(result.entry.metrics.gbps, 0);
}

struct Case {
  const char* name;
  DType dtype;
  Shape shape;
};

TEST_F(GpuTuneTest, ShippedTemplatesTuneEndToEnd) {
  Init(testing::ShippedTemplatesDir());
  if (IsSkipped()) return;
  const Case cases[] = {
      {"rmsnorm", DType::kBF16, {{"tokens", 16}, {"hidden", 4096}}},
      {"rmsnorm", DType::kF32, {{"tokens", 3}, {"hidden", 1000}}},
      {"rmsnorm", DType::kF16, {{"tokens", 257}, {"hidden", 8192}}},
      {"elementwise", DType::kBF16, {{"n", 1 << 20}}},
      {"elementwise", DType::kF32, {{"n", 1001}}},
      {"elementwise", DType::kF16, {{"n", 7}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.name, " ", DTypeName(c.dtype), " ", ShapeString(c.shape)));
    TuneRequest r;
    r.template_name = c.name;
    r.dtype = c.dtype;
    r.shape = c.shape;
    r.timing.set_time_cap_ms(100);
    ASSERT_OK_AND_ASSIGN(TuneResult result, RunTuning(r, Env()));
    int64_t not_ok = 0;
    for (const store::Trial& t : result.trials) {
      // Every shipped candidate is correct: anything else is a template bug.
      if (t.outcome != Outcome::kOk) {
        ++not_ok;
        ADD_FAILURE() << ConfigString(t.config) << ": " << OutcomeName(t.outcome) << " " << t.log;
      }
    }
    std::printf("%s %s %s: %zu candidates, winner %s, %.2f us, %.0f GB/s (%.0f%% of ceiling)\n",
                c.name, std::string(DTypeName(c.dtype)).c_str(), ShapeString(c.shape).c_str(),
                result.trials.size(), ConfigString(result.entry.config).c_str(),
                result.entry.metrics.time_ns / 1000, result.entry.metrics.gbps,
                100 * result.entry.metrics.ceiling_fraction);
    EXPECT_EQ(not_ok, 0);
    ASSERT_OK_AND_ASSIGN(store::Lookup hit, store_->LookupEntry(result.entry.key, result.entry.source_hash,
                                                                result.entry.nvrtc_version));
    EXPECT_EQ(hit.entry.cubin_sha256, result.entry.cubin_sha256);
  }
}

}  // namespace
}  // namespace ktune
