// Fakes at the compiler and GPU seams, so the tuning loop runs in CI without NVRTC time or a
// GPU. FakeCompiler "compiles" a request into a cubin that is its own text; FakeGpu decides
// each candidate's fate from its kernel's name through a script.
//
// FakeCompiler is thread-safe (the compile pool calls it from many threads); FakeGpu is
// not (like a real Gpu: one caller).
#ifndef KTUNE_TESTS_TESTING_FAKES_H_
#define KTUNE_TESTS_TESTING_FAKES_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "server/compile/cache_key.h"
#include "server/compile/compiler.h"
#include "server/gpu/gpu.h"
#include "server/gpu/timing_plan.h"

namespace ktune::testing {

class FakeCompiler : public Compiler {
 public:
  // Returns true for name expressions that must fail to compile.
  std::function<bool(const std::string&)> fails = [](const std::string&) { return false; };

  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    ++calls;
    CompileResult r;
    r.key = CompileCacheKey(request, Identity());
    r.compile_ms = 1;
    if (fails(request.name_expressions.front())) {
      r.ok = false;
      r.log = absl::StrCat(request.source_name, "(1): error: planted compile failure");
      return r;
    }
    r.ok = true;
    r.cubin = absl::StrCat("FAKECUBIN|", absl::StrJoin(request.name_expressions, ";"), "|",
                           absl::StrJoin(request.options, " "));
    for (const std::string& n : request.name_expressions) {
      CompiledKernel k;
      k.name_expression = n;
      k.lowered_name = n;  // the fake GPU reads the params back from it
      k.resources.registers = 32;
      r.kernels.push_back(k);
    }
    if (remember) {
      absl::MutexLock lock(&mu_);
      compiled_.insert(r.key);
    }
    return r;
  }
  // When set, the keys of the programs compiled so far are what Cached reports, as a cubin
  // cache would.
  bool remember = false;

  bool Cached(const std::string& key) override {
    absl::MutexLock lock(&mu_);
    return compiled_.contains(key);
  }
  std::string Identity() const override { return "fake-compiler-1"; }
  std::string Version() const override { return "13.0"; }

  std::atomic<int> calls{0};

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> compiled_ ABSL_GUARDED_BY(mu_);
};

// The integers in a name expression, in order: "tiny<float, 128, 4>" -> {128, 4}.
inline std::vector<int64_t> NameInts(const std::string& name) {
  std::vector<int64_t> out;
  const size_t open = name.find('<');
  if (open == std::string::npos) return out;
  for (absl::string_view part : absl::StrSplit(name.substr(open + 1), absl::ByAnyChar(",> "))) {
    int64_t v;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

inline v1::Measurement OkMeasurement(double time_ns) {
  v1::Measurement m;
  m.set_outcome("ok");
  m.set_time_ns(time_ns);
  m.set_spread_ns(time_ns / 100);
  m.set_repeats(10);
  m.set_batch(1);
  m.set_occupancy(0.5);
  m.set_waves(1.0);
  return m;
}

inline v1::Measurement FailedMeasurement(const std::string& outcome, const std::string& detail) {
  v1::Measurement m;
  m.set_outcome(outcome);
  m.set_detail(detail);
  return m;
}

class FakeGpu : public Gpu {
 public:
  // Decides a candidate's measurement from its first launch's name (the fake compiler
  // makes that the name expression, e.g. "tiny<float, 128, 4>").
  std::function<v1::Measurement(const std::string&)> script = [](const std::string&) {
    return OkMeasurement(1000);
  };
  absl::Status info_status = absl::OkStatus();
  double copy_gbps = 4000;
  absl::Status ceiling_status = absl::OkStatus();

  absl::StatusOr<v1::DeviceInfo> Info() override {
    if (!info_status.ok()) return info_status;
    v1::DeviceInfo d;
    d.set_name("Fake GPU");
    d.set_cc_major(9);
    d.set_cc_minor(0);
    d.set_sm_count(132);
    d.set_l2_bytes(60 << 20);
    d.set_memory_bus_bits(6144);
    d.set_memory_clock_khz(2619000);
    d.set_total_memory_bytes(int64_t{141} << 30);
    d.set_max_threads_per_sm(2048);
    d.set_max_threads_per_block(1024);
    d.set_max_shared_per_block_optin(232448);
    d.set_registers_per_sm(65536);
    d.set_uuid("GPU-fake");
    d.set_driver_version("13.0");
    return d;
  }
  // Unlike ProcessGpu, measures at every call, with what these say: a test can count the
  // calls and change the answer between jobs.
  absl::StatusOr<v1::Ceiling> MeasureCeiling() override {
    ++ceiling_calls;
    if (!ceiling_status.ok()) return ceiling_status;
    v1::Ceiling c;
    c.set_copy_gbps(copy_gbps);
    return c;
  }
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override {
    this->problem = problem;
    ++problems;
    v1::ProblemReady r;
    r.set_reference_time_ns(1000);
    r.set_output_digest("digest");
    return r;
  }
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    ++measures;
    measured.push_back(candidate.launches(0).lowered_name());
    timings.push_back(timing);  // before the script, which may read it
    v1::Measurement m = script(candidate.launches(0).lowered_name());
    // Runs per sample as the worker chooses them: the requested batch, or the candidate's own.
    if (m.outcome() == "ok") m.set_batch(SampleBatch(ResolveTiming(timing), m.time_ns() / 1e6));
    return m;
  }
  // Counted apart, and measured (and counted) as Measure is.
  absl::StatusOr<v1::Measurement> Retime(const v1::KernelBinary& candidate,
                                         const v1::TimingOptions& timing) override {
    ++retimes;
    return Measure(candidate, timing);
  }

  v1::Problem problem;
  int problems = 0;
  int measures = 0;  // Measure and Retime calls
  int retimes = 0;   // Retime calls
  int ceiling_calls = 0;
  std::vector<std::string> measured;
  std::vector<v1::TimingOptions> timings;  // of each Measure call, in order
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FAKES_H_
