// The vocabulary shared by every module: a candidate's config (template params plus global
// knobs), a trial's outcome and metrics, and one kernel launch of an artifact.
//
// Plain value types; thread-compatible.
#ifndef KTUNE_SERVER_BASE_CANDIDATE_H_
#define KTUNE_SERVER_BASE_CANDIDATE_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace ktune {

// The global knobs of DESIGN.md, applied to every template.
struct Knobs {
  // --maxrregcount; 0 means no limit.
  int64_t maxrregcount = 0;
  // Second argument of __launch_bounds__(KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS).
  int64_t min_blocks = 1;
  // --use_fast_math.
  bool fast_math = false;
  // "sm_90" or "sm_90a": always a real architecture, so NVRTC emits a cubin.
  std::string target = "sm_90";

  friend bool operator==(const Knobs& a, const Knobs& b) {
    return a.maxrregcount == b.maxrregcount && a.min_blocks == b.min_blocks &&
           a.fast_math == b.fast_math && a.target == b.target;
  }
  friend bool operator<(const Knobs& a, const Knobs& b);
};

// One point of a template's search space. Params are ordered by name, so equal configs
// print and hash the same.
struct Config {
  std::map<std::string, int64_t> params;
  Knobs knobs;

  friend bool operator==(const Config& a, const Config& b) {
    return a.params == b.params && a.knobs == b.knobs;
  }
  friend bool operator<(const Config& a, const Config& b);
};

// "BLOCK=256,VEC=4 maxrreg=0 minb=1 fastmath=0 sm_90a": stable, for logs, keys and goldens.
std::string ConfigString(const Config& config);

// JSON object {"params":{...},"knobs":{...}}; the inverse fails with a message on any
// missing or mistyped field.
std::string ConfigToJson(const Config& config);
std::optional<Config> ConfigFromJson(absl::string_view json, std::string* error);

// What happened to one candidate. A failing candidate is a result, not an error.
enum class Outcome {
  kOk,
  kCompileFailed,
  kResourceLimit,  // compiled, but the launch needs more registers/shared memory/threads
  kLaunchFailed,
  kWrongResult,
  kTimedOut,
  kCrashed,
};
// "ok", "compile_failed", "resource_limit", "launch_failed", "wrong_result", "timed_out",
// "crashed".
absl::string_view OutcomeName(Outcome o);
std::optional<Outcome> ParseOutcome(absl::string_view name);

// Everything measured or derived for one trial. Zero where not measured (e.g. a trial that
// failed to compile has only compile-side figures).
struct TrialMetrics {
  double time_ns = 0;         // median kernel time of one run, nanoseconds
  double spread_ns = 0;       // interquartile range of the timed runs, nanoseconds
  int64_t repeats = 0;        // timed runs behind the median
  int64_t registers = 0;      // per thread, from ptxas
  int64_t spill_bytes = 0;    // spill stores + loads, from ptxas
  int64_t static_smem = 0;    // bytes per block
  int64_t dynamic_smem = 0;   // bytes per block
  double occupancy = 0;       // theoretical, active warps / max warps per SM, 0..1
  double waves = 0;           // blocks / (SMs x blocks per SM)
  double last_wave = 0;       // fraction of the last wave's SM slots that are busy, 0..1
  double gbps = 0;            // achieved, from the cost model
  double gflops = 0;          // achieved, from the cost model
  double ceiling_fraction = 0;  // gbps / measured copy bandwidth
  // How it was measured, kept with the result so two timings can be compared fairly.
  // Runs per timed sample (1, or more for kernels too short for the event timer).
  int64_t batch = 0;
  bool l2_flushed = false;  // L2 flushed before every timed sample
};

// One kernel launch of an artifact: enough to call cuLaunchKernel.
struct LaunchSpec {
  std::string lowered_name;  // mangled name in the cubin
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::array<uint32_t, 3> block = {1, 1, 1};
  uint32_t shared_bytes = 0;  // dynamic shared memory
  std::vector<std::string> args;  // manifest arg names, in order

  friend bool operator==(const LaunchSpec& a, const LaunchSpec& b) {
    return a.lowered_name == b.lowered_name && a.grid == b.grid && a.block == b.block &&
           a.shared_bytes == b.shared_bytes && a.args == b.args;
  }
};

std::string LaunchesToJson(const std::vector<LaunchSpec>& launches);
std::optional<std::vector<LaunchSpec>> LaunchesFromJson(absl::string_view json,
                                                        std::string* error);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_CANDIDATE_H_
