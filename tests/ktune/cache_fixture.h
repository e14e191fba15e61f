// Store files for the `ktune cache` tests, built through the store API with fixed times and
// figures, so the command's output is the same on every run (golden files).
//
// Plain helpers; each call builds a fresh file.
#ifndef KTUNE_TESTS_CLI_CACHE_FIXTURE_H_
#define KTUNE_TESTS_CLI_CACHE_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/launch_spec.h"
#include "server/base/outcome.h"
#include "server/base/sha256.h"
#include "server/store/store.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"
#include "server/tuning/gpu_problem.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/fake_cubin.h"
#include "tests/testing/status_matchers.h"

namespace ktune::cache_testing {

inline constexpr char kH200[] = "NVIDIA H200|sm_90|132sm|6144bit";
inline constexpr char kA100[] = "NVIDIA A100-SXM4-80GB|sm_80|108sm|5120bit";
inline constexpr int64_t kBaseMs = 1700000000000;  // 2023-11-14 22:13:20 UTC

struct Cost {
  double bytes;
  double flops;
};

// The launches the fixture's template (tests/ktune/testdata/templates) binds for `key` and
// `config` on an H200-class target, each kernel named by its name expression (the fake
// cubins carry the names unmangled).
inline std::vector<LaunchSpec> BoundLaunches(const store::EntryKey& key, const Config& config) {
  static const TemplateRegistry* registry = [] {
    absl::StatusOr<std::unique_ptr<TemplateRegistry>> r =
        LoadTemplateRegistry(KTUNE_SOURCE_DIR "/tests/ktune/testdata/templates");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->release() : nullptr;
  }();
  std::vector<LaunchSpec> out;
  if (registry == nullptr) return out;
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl = registry->Get(key.template_id);
  absl::StatusOr<Shape> shape = ParseShape(key.shape);
  const std::optional<DType> dtype = ParseDType(key.dtype);
  if (!tmpl.ok() || !shape.ok() || !dtype) {
    ADD_FAILURE() << "cannot bind " << key.template_id << " " << key.dtype << " " << key.shape;
    return out;
  }
  absl::StatusOr<BindResult> bound = Bind(*tmpl, *dtype, *shape, config, TargetInfo());
  if (!bound.ok() || !bound->instance) {
    ADD_FAILURE() << "config does not bind for " << key.shape;
    return out;
  }
  for (const BoundLaunch& b : bound->instance->launches) {
    out.push_back(LaunchSpecFor(b, b.name_expression));
  }
  return out;
}

// A trial whose figures follow from a time and the cost model, as the tuner's would.
inline store::Trial TimedTrial(int64_t block, int64_t vec, double time_ns, const Cost& cost,
                               double copy_gbps, int64_t i) {
  store::Trial t;
  t.config.params = {{"BLOCK", block}, {"VEC", vec}};
  t.config.knobs.target = "sm_90a";
  t.candidate_hash = absl::StrCat("cand-", block, "-", vec);
  t.outcome = Outcome::kOk;
  t.compile_ms = 100 + i;
  t.metrics.time_ns = time_ns;
  t.metrics.spread_ns = time_ns * (0.01 + 0.002 * (i % 5));
  t.metrics.repeats = 40 + i;
  t.metrics.registers = 24 + 8 * vec;
  t.metrics.occupancy = block >= 512 ? 1.0 : 0.5 + block / 1024.0;
  t.metrics.waves = 4096.0 / (132 * (2048.0 / block));
  t.metrics.last_wave = 0.25;
  t.metrics.gbps = cost.bytes / time_ns;
  t.metrics.gflops = cost.flops / time_ns;
  t.metrics.ceiling_fraction = copy_gbps > 0 ? t.metrics.gbps / copy_gbps : 0;
  t.metrics.batch = 1;
  t.metrics.l2_flushed = true;
  t.created_unix_ms = kBaseMs + 1000 * i;
  return t;
}

inline store::Trial FailedTrial(int64_t block, int64_t vec, Outcome outcome, const std::string& log,
                                int64_t i) {
  store::Trial t;
  t.config.params = {{"BLOCK", block}, {"VEC", vec}};
  t.config.knobs.target = "sm_90a";
  t.candidate_hash = absl::StrCat("cand-", block, "-", vec);
  t.outcome = outcome;
  t.compile_ms = 90 + i;
  t.log = log;
  t.created_unix_ms = kBaseMs + 1000 * i;
  return t;
}

// One tuned key: a job with `trials`, the fastest ok trial committed as the winner.
inline int64_t AddTuned(store::Store& s, const store::EntryKey& key, std::vector<store::Trial> trials,
                        const std::string& nvrtc = "13.0", const std::string& source = "src-aaaa",
                        int64_t created_ms = kBaseMs + 3600000) {
  store::Job job;
  job.key = key;
  job.source_hash = source;
  job.nvrtc_version = nvrtc;
  job.strategy = "exhaustive";
  job.stop_reason = "space exhausted";
  job.state = store::JobState::kRunning;
  job.total = static_cast<int64_t>(trials.size());
  job.created_unix_ms = created_ms - 60000;
  job.updated_unix_ms = created_ms;
  absl::StatusOr<int64_t> job_id = s.CreateJob(job);
  EXPECT_TRUE(job_id.ok()) << job_id.status();
  const store::Trial* best = nullptr;
  int64_t ok = 0;
  for (store::Trial& t : trials) {
    t.job_id = *job_id;
    if (t.outcome == Outcome::kOk) {
      ++ok;
      if (best == nullptr || t.metrics.time_ns < best->metrics.time_ns) best = &t;
    }
  }
  EXPECT_NE(best, nullptr);
  store::Entry e;
  e.key = key;
  e.source_hash = source;
  e.nvrtc_version = nvrtc;
  e.config = best->config;
  // The launches the template binds for the key and config, as `ktune cache import`
  // insists, in a cubin of 2048 bytes holding their kernels.
  e.launches = BoundLaunches(key, best->config);
  std::vector<std::string> kernels;
  for (const LaunchSpec& l : e.launches) kernels.push_back(l.lowered_name);
  const int64_t seed = static_cast<int64_t>(best->metrics.time_ns);
  const size_t frame = testing::MakeFakeCubin(kernels, seed, 0).size();
  e.cubin = testing::MakeFakeCubin(kernels, seed, 2048 - frame);
  e.cubin_sha256 = Sha256Hex(e.cubin);
  e.metrics = best->metrics;
  e.job_id = *job_id;
  e.trials_total = static_cast<int64_t>(trials.size());
  e.trials_ok = ok;
  e.tuning_seconds = 3.5 * trials.size();
  e.created_unix_ms = created_ms;
  e.default_time_ns = 1.5 * best->metrics.time_ns;  // the default config, slower than the winner
  absl::StatusOr<int64_t> id = s.CommitWinner(e, trials);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : 0;
}

// rmsnorm trials over BLOCK x VEC, the time a smooth function of both so charts show shape.
inline std::vector<store::Trial> RmsnormTrials(const Cost& cost, double copy_gbps, double scale) {
  std::vector<store::Trial> out;
  int64_t i = 0;
  for (int64_t block : {128, 256, 512, 1024}) {
    for (int64_t vec : {2, 4, 8}) {
      const double t = scale * (1.0 + 0.15 * (vec == 2) + 0.04 * (vec == 8) +
                                0.1 * (block == 128) + 0.06 * (block == 1024) + 0.01 * i);
      out.push_back(TimedTrial(block, vec, t, cost, copy_gbps, i++));
    }
  }
  out.push_back(FailedTrial(1024, 16, Outcome::kCompileFailed,
                            "error: static assertion failed: VEC * sizeof(T) <= 16\nmore", i++));
  out.push_back(FailedTrial(64, 8, Outcome::kWrongResult, "max error 0.5 at index 17 (atol 0.01)", i++));
  out.push_back(FailedTrial(2048, 8, Outcome::kResourceLimit, "block of 2048 threads > 1024", i++));
  return out;
}

// The main fixture: three entries on the H200 (one stale by NVRTC version), one on an A100
// whose template source has since changed (stale), both device rows, the copy ceilings.
inline void BuildMainStore(const std::string& path) {
  absl::StatusOr<std::unique_ptr<store::Store>> opened = store::OpenSqliteStore(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store::Store& s = **opened;
  store::Device h200 = store::testing::MakeDevice(kH200);
  h200.copy_gbps = 4123.5;
  ASSERT_OK(s.PutDevice(h200));
  store::Device a100 = store::testing::MakeDevice(kA100);
  a100.name = "NVIDIA A100-SXM4-80GB";
  a100.cc_major = 8;
  a100.sm_count = 108;
  a100.memory_bus_bits = 5120;
  a100.copy_gbps = 1720.25;
  ASSERT_OK(s.PutDevice(a100));
  ASSERT_OK(s.PutTemplate("rmsnorm", "src-aaaa"));
  ASSERT_OK(s.PutTemplate("elementwise", "src-new"));

  // f16 tokens=4096 hidden=8192: (2*T*H + H) * 2 bytes, 4*T*H flops.
  const Cost big{(2.0 * 4096 * 8192 + 8192) * 2, 4.0 * 4096 * 8192};
  AddTuned(s, {kH200, "rmsnorm", "f16", "hidden=8192,tokens=4096"}, RmsnormTrials(big, 4123.5, 36000));
  const Cost small{(2.0 * 16 * 4096 + 4096) * 2, 4.0 * 16 * 4096};
  AddTuned(s, {kH200, "rmsnorm", "f16", "hidden=4096,tokens=16"}, RmsnormTrials(small, 4123.5, 3100));
  const Cost bf{(2.0 * 1024 * 4096 + 4096) * 2, 4.0 * 1024 * 4096};
  AddTuned(s, {kH200, "rmsnorm", "bf16", "hidden=4096,tokens=1024"}, RmsnormTrials(bf, 4123.5, 5200),
           /*nvrtc=*/"12.8");
  const Cost ew{3.0 * 1048576 * 4, 3.0 * 1048576};
  std::vector<store::Trial> ew_trials;
  int64_t i = 0;
  for (int64_t block : {128, 256, 512}) {
    for (int64_t vec : {1, 4}) {
      // Trial i is timed at index i + 1: the golden files were made when both came from
      // one `i++` argument, whose order GCC evaluated last-first; now written out.
      ew_trials.push_back(
          TimedTrial(block, vec, 9000 * (1 + 0.2 * (vec == 1) + 0.03 * (i + 1)), ew, 1720.25, i));
      ++i;
      ew_trials.back().config.knobs.target = "sm_80";  // the A100 has no sm_90a
    }
  }
  AddTuned(s, {kA100, "elementwise", "f32", "n=1048576"}, ew_trials, "13.0", "src-aaaa");
}

// A second store for diff: the main one less the bf16 entry, with another winner for the
// small rmsnorm key and one key the main store lacks.
inline void BuildOtherStore(const std::string& path) {
  absl::StatusOr<std::unique_ptr<store::Store>> opened = store::OpenSqliteStore(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store::Store& s = **opened;
  store::Device h200 = store::testing::MakeDevice(kH200);
  ASSERT_OK(s.PutDevice(h200));
  const Cost big{(2.0 * 4096 * 8192 + 8192) * 2, 4.0 * 4096 * 8192};
  AddTuned(s, {kH200, "rmsnorm", "f16", "hidden=8192,tokens=4096"}, RmsnormTrials(big, 4123.5, 36000));
  const Cost small{(2.0 * 16 * 4096 + 4096) * 2, 4.0 * 16 * 4096};
  std::vector<store::Trial> trials = RmsnormTrials(small, 4123.5, 3100);
  trials[7].metrics.time_ns = 2900;  // BLOCK=512 VEC=4 wins here (BLOCK=256 VEC=4 in the main one)
  AddTuned(s, {kH200, "rmsnorm", "f16", "hidden=4096,tokens=16"}, trials);
  const Cost wide{(2.0 * 16 * 16384 + 16384) * 2, 4.0 * 16 * 16384};
  AddTuned(s, {kH200, "rmsnorm", "f16", "hidden=16384,tokens=16"}, RmsnormTrials(wide, 4123.5, 9000));
}

}  // namespace ktune::cache_testing

#endif  // KTUNE_TESTS_CLI_CACHE_FIXTURE_H_
