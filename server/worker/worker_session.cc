#include "server/worker/worker_session.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/base/dtype.h"
#include "server/base/outcome.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/gpu/timing_plan.h"
#include "server/worker/device_buffers.h"
#include "server/worker/device_info.h"
#include "server/worker/driver.h"
#include "server/worker/host_buffers.h"
#include "server/worker/launch_gate.h"
#include "server/worker/output_check.h"
#include "server/worker/tensor_map.h"

namespace ktune {
namespace {

// The L2 flush: a kernel that reads 2x the L2's size and writes nothing (its one store is
// behind a condition that never holds). A memset flush leaves ~L2-size of dirty lines that
// the timed kernel then pays to write back; on the H200 that cost ~6 us per sample, 16 % of
// a 37 us rmsnorm. Hand-written PTX so the worker needs no compiler; the driver JITs it once.
constexpr char kReadFlushPtx[] = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry ktune_read_flush(
    .param .u64 p_buf,
    .param .u64 p_vecs,
    .param .u64 p_sink)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_vecs];
    ld.param.u64 %rd3, [p_sink];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd6, %r4, %r2;
    mov.u32 %r5, 0;
LOOP:
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];
    xor.b32 %r5, %r5, %r6;
    xor.b32 %r5, %r5, %r7;
    xor.b32 %r5, %r5, %r8;
    xor.b32 %r5, %r5, %r9;
    add.u64 %rd4, %rd4, %rd6;
    bra LOOP;
DONE:
    setp.ne.u32 %p2, %r5, -1640531527;
    @%p2 bra END;
    st.global.u32 [%rd3], %r5;
END:
    ret;
}
)";

using Clock = std::chrono::steady_clock;

constexpr int64_t kDefaultCeilingBytes = int64_t{1} << 30;
constexpr int kDefaultCeilingRepeats = 20;
// Dynamic shared memory a kernel gets without opting in.
constexpr uint32_t kDefaultDynamicSmem = 48 * 1024;
// Timed samples of at most this many launches are enqueued behind the launch gate.
constexpr int64_t kMaxGatedLaunches = 256;

// Quartiles by linear interpolation between order statistics (numpy's default).
struct Quartiles {
  double q1 = 0, median = 0, q3 = 0;
};

Quartiles ComputeQuartiles(std::vector<double> v) {
  Quartiles q;
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) {
    const double pos = p * static_cast<double>(v.size() - 1);
    const size_t i = static_cast<size_t>(pos);
    const double frac = pos - static_cast<double>(i);
    return i + 1 < v.size() ? v[i] + frac * (v[i + 1] - v[i]) : v[i];
  };
  q.q1 = at(0.25);
  q.median = at(0.5);
  q.q3 = at(0.75);
  return q;
}

// Bytes actually allocated for a buffer: whole 32-bit words, so cuMemsetD32 can poison it.
size_t AllocBytes(size_t bytes) { return (bytes + 3) / 4 * 4; }

// One argument's value as the kernel receives it; its address goes into kernelParams. A
// tensor-map argument has none here: Prepare encodes one per launch (PreparedLaunch).
struct ArgValue {
  CUdeviceptr ptr = 0;
  int32_t i32 = 0;
  int64_t i64 = 0;
  float f32 = 0;
  enum class Kind { kPtr, kI32, kI64, kF32 } kind = Kind::kPtr;

  void* address() {
    switch (kind) {
      case Kind::kPtr:
        return &ptr;
      case Kind::kI32:
        return &i32;
      case Kind::kI64:
        return &i64;
      case Kind::kF32:
        return &f32;
    }
    return nullptr;
  }
};

struct ProblemBuffer {
  int arg_index = 0;
  std::string name;
  DType dtype = DType::kF32;
  v1::Buffer::Role role = v1::Buffer::ROLE_UNSPECIFIED;
  size_t bytes = 0;        // count * element size
  bool zero_fill = false;  // SCRATCH filled with zeros (no pristine copy needed)
  DeviceMemory memory;     // what the kernels get
  DeviceMemory pristine;   // the generated contents, restored before every run
  std::string expected;    // OUTPUT / INOUT: the reference's result
  DeviceMemory reference;  // OUTPUT / INOUT: the same on the GPU, for the check there
  std::string got;         // OUTPUT / INOUT: the candidate's, for the check on the host

  bool checked() const { return role == v1::Buffer::OUTPUT || role == v1::Buffer::INOUT; }
};

struct Problem {
  std::vector<ProblemBuffer> buffers;
  // One per Problem.args entry (BuildKernelArgs); never resized after setup, since launches
  // hold the addresses of its elements.
  std::vector<ArgValue> values;
  // Tensor-map args by index, the reference's numbers (a binary may carry its own).
  std::map<int, v1::BoundTensorMap> tensor_maps;
  double atol = 0;
  double rtol = 0;
};

// A launch ready for cuLaunchKernel, with what the metrics need.
struct PreparedLaunch {
  std::string name;
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<void*> params;
  std::vector<std::unique_ptr<CUtensorMap>> tensor_maps;  // what tensor-map params point at

  int64_t threads() const { return int64_t{block[0]} * block[1] * block[2]; }
  int64_t blocks() const { return int64_t{grid[0]} * grid[1] * grid[2]; }
};

absl::Status ValidateDims(const google::protobuf::RepeatedField<uint32_t>& dims,
                          absl::string_view what, unsigned out[3]) {
  if (dims.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", dims.size(), " values"));
  }
  for (int i = 0; i < 3; ++i) {
    out[i] = i < dims.size() ? dims.Get(i) : 1u;
    if (out[i] == 0) return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] is 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBinary(const v1::KernelBinary& binary, int num_args, absl::string_view what) {
  if (binary.cubin().empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty cubin"));
  if (binary.launches().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no launches"));
  }
  for (int i = 0; i < binary.launches_size(); ++i) {
    const v1::LaunchBinary& l = binary.launches(i);
    const std::string at = absl::StrCat(what, ".launches[", i, "]");
    if (l.lowered_name().empty()) return absl::InvalidArgumentError(at + ": no lowered_name");
    unsigned dims[3];
    KTUNE_RETURN_IF_ERROR(ValidateDims(l.grid(), at + ".grid", dims));
    KTUNE_RETURN_IF_ERROR(ValidateDims(l.block(), at + ".block", dims));
    for (int a : l.args()) {
      if (a < 0 || a >= num_args) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".args: index ", a, " outside the problem's ", num_args, " args"));
      }
    }
  }
  return absl::OkStatus();
}

// "problem.args[2] (weight)": where an argument's error is.
std::string ArgWhere(int i, const v1::ArgSpec& a) {
  return absl::StrCat("problem.args[", i, "] (", a.name(), ")");
}

// The value a scalar argument passes to the kernels. kInvalidArgument for an i32 out of
// range or a type other than i32, i64, f32.
absl::StatusOr<ArgValue> ScalarArg(const v1::ArgSpec& a, absl::string_view at) {
  ArgValue v;
  if (a.scalar_type() == "i32") {
    if (a.int_value() < INT32_MIN || a.int_value() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", a.int_value(), " is no i32"));
    }
    v.kind = ArgValue::Kind::kI32;
    v.i32 = static_cast<int32_t>(a.int_value());
  } else if (a.scalar_type() == "i64") {
    v.kind = ArgValue::Kind::kI64;
    v.i64 = a.int_value();
  } else if (a.scalar_type() == "f32") {
    v.kind = ArgValue::Kind::kF32;
    v.f32 = static_cast<float>(a.number());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": scalar_type '", a.scalar_type(), "' is not i32, i64 or f32"));
  }
  return v;
}

// Buffer argument `i` checked and sized, without memory yet.
absl::StatusOr<ProblemBuffer> PlanBuffer(const v1::ArgSpec& a, int i, absl::string_view at) {
  std::optional<DType> dtype = ParseDType(a.dtype());
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": unknown dtype '", a.dtype(), "'"));
  }
  if (a.count() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": count ", a.count(), " < 1"));
  }
  if (a.role() == v1::Buffer::ROLE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": role is unspecified"));
  }
  ProblemBuffer b;
  b.arg_index = i;
  b.name = a.name().empty() ? absl::StrCat("arg", i) : a.name();
  b.dtype = *dtype;
  b.role = a.role();
  b.bytes = static_cast<size_t>(a.count()) * static_cast<size_t>(DTypeSize(*dtype));
  // SCRATCH without a fill is zeroed (accumulators); inputs need data (checked on upload).
  b.zero_fill = b.role == v1::Buffer::SCRATCH && (a.fill().kind() == v1::Fill::ZERO ||
                                                  a.fill().kind() == v1::Fill::ZERO_ONCE ||
                                                  a.fill().kind() == v1::Fill::KIND_UNSPECIFIED);
  return b;
}

// SetProblem's first phase: every argument checked and every buffer sized before any is
// allocated. The buffers come back in argument order, without memory; the argument values
// are built once the buffers exist (BuildKernelArgs).
absl::StatusOr<std::unique_ptr<Problem>> PlanProblem(const v1::Problem& spec) {
  auto problem = std::make_unique<Problem>();
  problem->atol = spec.atol();
  problem->rtol = spec.rtol();
  for (int i = 0; i < spec.args_size(); ++i) {
    const v1::ArgSpec& a = spec.args(i);
    const std::string at = ArgWhere(i, a);
    if (!a.is_buffer() && a.scalar_type() == "tensor_map") {
      // Built per launch in Prepare, over the buffer it names (a binary may carry its own
      // numbers: the box follows the tile params).
      const int b = a.tensor_map().buffer_arg();
      if (b < 0 || b >= spec.args_size() || !spec.args(b).is_buffer()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": tensor_map.buffer_arg ", b, " is not a buffer arg"));
      }
      problem->tensor_maps[i] = a.tensor_map();
      continue;
    }
    if (!a.is_buffer()) {
      KTUNE_RETURN_IF_ERROR(ScalarArg(a, at).status());
      continue;
    }
    KTUNE_ASSIGN_OR_RETURN(ProblemBuffer b, PlanBuffer(a, i, at));
    problem->buffers.push_back(std::move(b));
  }
  return problem;
}

// GPU memory the problem takes: every buffer, plus a pristine copy of each one whose
// contents are generated and the reference's result of each one that is checked.
size_t DeviceBytes(const Problem& problem) {
  size_t bytes = 0;
  for (const ProblemBuffer& b : problem.buffers) {
    bytes += AllocBytes(b.bytes);
    if (b.role != v1::Buffer::OUTPUT && !b.zero_fill) bytes += AllocBytes(b.bytes);
    if (b.checked()) bytes += AllocBytes(b.bytes);
  }
  return bytes;
}

double MsSince(Clock::time_point began) {
  return std::chrono::duration<double, std::milli>(Clock::now() - began).count();
}

// Whether sampling may stop: the samples' IQR is below `target` x median. Below about 1 us
// per sample the spread is event resolution and launch jitter, not the kernel (seen on the
// H200: a ~0.6 us floor), so a short kernel stops there instead of always running
// max_repeats.
bool SpreadIsSmall(const std::vector<double>& samples, int64_t batch, double target) {
  const double floor_ms = 1e-3 / static_cast<double>(batch);
  const Quartiles q = ComputeQuartiles(samples);
  return q.median > 0 && (q.q3 - q.q1) < std::max(target * q.median, floor_ms);
}

// Whether a phase of Measure ended the measurement with the candidate's outcome.
bool Finished(const v1::Measurement& m) { return !m.outcome().empty(); }

// `loaded`'s value, or none after saying on stderr what the worker does without it.
template <typename T>
std::optional<T> LoadedOrNone(absl::StatusOr<T> loaded, const char* without) {
  if (loaded.ok()) return *std::move(loaded);
  std::fprintf(stderr, "ktune-worker: %s: %s\n", without,
               std::string(loaded.status().message()).c_str());
  return std::nullopt;
}

class CudaWorkerSession final : public WorkerSession {
 public:
  explicit CudaWorkerSession(int ordinal) : fixed_ordinal_(ordinal) {}

  ~CudaWorkerSession() override {
    // Members go in reverse order (problem, buffers, events, stream, then the context);
    // once poisoned they drop their handles without calling the driver.
  }

  v1::Response Handle(const v1::Request& request) override;

  bool poisoned() const override {
    return forced_poison_ || (driver_ != nullptr && driver_->poisoned());
  }

  void KeepOutputs(bool keep) override { keep_outputs_ = keep; }

  std::vector<WorkerOutput> LastOutputs() const override {
    std::vector<WorkerOutput> out;
    if (problem_ == nullptr) return out;
    for (const ProblemBuffer& b : problem_->buffers) {
      if (b.checked()) {
        out.push_back({b.name, std::string(DTypeName(b.dtype)),
                       outputs_current_ ? b.got : std::string()});
      }
    }
    return out;
  }

 private:
  absl::StatusOr<v1::DeviceInfo> Hello(const v1::Hello& hello);
  absl::StatusOr<v1::Ceiling> Ceiling(const v1::MeasureCeiling& request);
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& spec);
  absl::StatusOr<v1::Measurement> Measure(const v1::MeasureCandidate& request);

  absl::Status RequireHello() const {
    if (context_.context() == nullptr) {
      return absl::FailedPreconditionError("no GPU yet: send Hello first");
    }
    return absl::OkStatus();
  }

  // Function lookup and launch limits for every launch of `binary`. kNotFound for a missing
  // kernel, kResourceExhausted for a block or shared memory over the kernel's limits.
  absl::StatusOr<std::vector<PreparedLaunch>> Prepare(const Module& module,
                                                      const v1::KernelBinary& binary);
  // Puts INOUT and SCRATCH back as generated (zeroing accumulators). With `poison`, before
  // a check, also INPUT (a faulty kernel may have written its inputs) and fills the outputs
  // with the poison pattern. Enqueued on stream_.
  absl::Status RestoreBuffers(bool poison);
  // Enqueues `repeats` runs (each: every launch in order) on stream_.
  absl::Status Launch(const std::vector<PreparedLaunch>& launches, int64_t repeats);
  // Restores INOUT/SCRATCH, flushes L2 when asked, and times `repeats` back-to-back runs
  // between two events. Milliseconds for all of them.
  absl::StatusOr<double> TimeRuns(const std::vector<PreparedLaunch>& launches, int64_t repeats,
                                  bool flush_l2);
  absl::Status Download();
  absl::Status EnsureFlushBuffer();
  // Loads the worker's own kernels once, at the first problem: the output check
  // (output_check.h), the fills and digests (device_buffers.h) and the launch gate
  // (launch_gate.h). One the driver cannot JIT is left out, saying so on stderr, and the
  // worker does without it: checks, fills and digests on the host, batches ungated.
  void LoadOwnKernels();

  // SetProblem's phases after PlanProblem, in order.
  // kResourceExhausted when the problem's buffers do not fit the free GPU memory.
  absl::Status CheckFreeMemory(size_t device_bytes);
  // Allocates every buffer and uploads the generated contents as its pristine copy.
  absl::Status UploadBuffers(const v1::Problem& spec, Problem& problem);
  // The kernel argument list: one value per Problem.args entry, whose address a launch
  // passes in kernelParams (Prepare picks those its LaunchBinary.args names). A buffer
  // passes its device pointer, a scalar its value; REQUIRES: the buffers are allocated, so
  // an argument built over a buffer (a CUtensorMap) belongs here too.
  absl::StatusOr<std::vector<ArgValue>> BuildKernelArgs(
      const v1::Problem& spec, const std::vector<ProblemBuffer>& buffers) const;
  // Runs the reference once on the problem_ just set and keeps its outputs as expected.
  absl::StatusOr<v1::ProblemReady> RunReference(const v1::KernelBinary& reference);

  // Measure's phases, in order. Each sets the candidate's outcome through Fail when the
  // candidate fails (Finished(m) after it); a Status error is the worker's own.
  //
  // Sets m's outcome and detail from a failed step: a sticky error (or any error once the
  // context is suspect) is a crash; running out of registers/shared memory/threads is a
  // resource limit; the rest is `otherwise`.
  void Fail(const absl::Status& s, Outcome otherwise, absl::string_view step,
            v1::Measurement* m) const;
  // Registers, local and shared memory, occupancy and waves of the first launch.
  void ReadResources(const PreparedLaunch& first, v1::Measurement* m) const;
  void SetOccupancy(const PreparedLaunch& first, int blocks_per_sm, v1::Measurement* m) const;
  // One run on fresh inputs and poisoned outputs, compared with the reference.
  absl::Status CheckCandidate(const std::vector<PreparedLaunch>& launches, v1::Measurement* m);
  // The candidate's outputs against the reference's, on the GPU where the check kernel
  // loaded, else read back and compared on the host: one Comparison per checked buffer,
  // in order.
  absl::StatusOr<std::vector<Comparison>> CompareOutputs();
  void CompareWithReference(const std::vector<Comparison>& comparisons, v1::Measurement* m) const;
  // Warm-up, then samples until the spread, the repeat limit or the time cap stops them.
  absl::Status TimeCandidate(const std::vector<PreparedLaunch>& launches, const TimingPlan& plan,
                             v1::Measurement* m);
  // Times plan.warmup single runs (fewer past half the cap); the batch size they imply.
  absl::StatusOr<int64_t> WarmUp(const std::vector<PreparedLaunch>& launches,
                                 const TimingPlan& plan, Clock::time_point began);
  // Per-run times of the timed samples, in ms.
  absl::StatusOr<std::vector<double>> Sample(const std::vector<PreparedLaunch>& launches,
                                             const TimingPlan& plan, int64_t batch,
                                             Clock::time_point began);

  const int fixed_ordinal_;
  Driver* driver_ = nullptr;
  bool forced_poison_ = false;
  // Declared first so it is released last.
  PrimaryContext context_;
  v1::DeviceInfo info_;
  Stream stream_;
  Event start_;
  Event stop_;
  DeviceMemory flush_;  // 2x L2, read (or, without the kernel, written) before every sample
  uint32_t flush_value_ = 0;
  Module flush_module_;            // kReadFlushPtx, JIT-compiled by the driver at first use
  CUfunction flush_fn_ = nullptr;  // null: flush by cuMemsetD32 instead
  DeviceMemory flush_sink_;
  bool own_kernels_loaded_ = false;  // LoadOwnKernels ran; the three below as it left them
  std::optional<OutputCheck> check_;  // none: the host checks
  std::optional<DeviceBuffers> device_buffers_;  // none: the host fills and digests
  std::optional<LaunchGate> gate_;  // none: batches run ungated
  bool keep_outputs_ = false;         // KeepOutputs: read outputs back after a GPU check too
  std::unique_ptr<Problem> problem_;
  // Whether the buffers' `got` bytes are the last checked run's (the reference's after
  // SetProblem, the candidate's after Measure's check when read back): false from the start
  // of a Measure until its Download, so LastOutputs() never shows an earlier run's results.
  bool outputs_current_ = false;
};

v1::Response CudaWorkerSession::Handle(const v1::Request& request) {
  v1::Response response;
  absl::Status status;
  if (poisoned()) {
    status =
        absl::InternalError("the CUDA context is poisoned by an earlier error; restart the worker");
  } else {
    switch (request.kind_case()) {
      case v1::Request::kHello: {
        absl::StatusOr<v1::DeviceInfo> r = Hello(request.hello());
        if (r.ok()) *response.mutable_device() = *std::move(r);
        status = r.status();
        break;
      }
      case v1::Request::kCeiling: {
        absl::StatusOr<v1::Ceiling> r = Ceiling(request.ceiling());
        if (r.ok()) *response.mutable_ceiling() = *std::move(r);
        status = r.status();
        break;
      }
      case v1::Request::kSetProblem: {
        absl::StatusOr<v1::ProblemReady> r = SetProblem(request.set_problem());
        if (r.ok()) *response.mutable_problem_ready() = *std::move(r);
        status = r.status();
        break;
      }
      case v1::Request::kMeasure: {
        absl::StatusOr<v1::Measurement> r = Measure(request.measure());
        if (r.ok()) *response.mutable_measurement() = *std::move(r);
        status = r.status();
        break;
      }
      case v1::Request::KIND_NOT_SET:
        status = absl::InvalidArgumentError(
            "empty request: none of hello, ceiling, "
            "set_problem, measure is set");
        break;
    }
  }
  if (!status.ok()) {
    v1::WorkerError* e = response.mutable_error();
    e->set_code(static_cast<int32_t>(status.code()));
    e->set_message(std::string(status.message()));
    e->set_poisoned(poisoned());
  }
  return response;
}

// ---- Hello ---------------------------------------------------------------------------

absl::StatusOr<v1::DeviceInfo> CudaWorkerSession::Hello(const v1::Hello& hello) {
  if (fixed_ordinal_ >= 0 && hello.ordinal() != fixed_ordinal_) {
    return absl::InvalidArgumentError(absl::StrCat("hello.ordinal is ", hello.ordinal(),
                                                   " but this worker serves GPU ", fixed_ordinal_,
                                                   " (--ordinal)"));
  }
  if (context_.context() != nullptr) {
    if (hello.ordinal() != context_.ordinal()) {
      return absl::InvalidArgumentError(absl::StrCat("this worker already serves GPU ",
                                                     context_.ordinal(), "; start another for GPU ",
                                                     hello.ordinal()));
    }
    return info_;
  }
  KTUNE_ASSIGN_OR_RETURN(Driver * driver, Driver::Get());
  driver_ = driver;
  KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo info, QueryDeviceInfo(driver_, hello.ordinal()));
  KTUNE_ASSIGN_OR_RETURN(PrimaryContext context, PrimaryContext::Retain(driver_, hello.ordinal()));
  KTUNE_ASSIGN_OR_RETURN(Stream stream, Stream::Create(driver_));
  KTUNE_ASSIGN_OR_RETURN(Event start, Event::Create(driver_));
  KTUNE_ASSIGN_OR_RETURN(Event stop, Event::Create(driver_));
  context_ = std::move(context);
  stream_ = std::move(stream);
  start_ = std::move(start);
  stop_ = std::move(stop);
  info_ = std::move(info);
  return info_;
}

// ---- MeasureCeiling ------------------------------------------------------------------

absl::StatusOr<v1::Ceiling> CudaWorkerSession::Ceiling(const v1::MeasureCeiling& request) {
  KTUNE_RETURN_IF_ERROR(RequireHello());
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"bytes", request.bytes()},
                                     {"repeats", request.repeats()}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ceiling.", field, " must be >= 0 (0 = default), got ", value));
    }
  }
  size_t free_bytes = 0, total_bytes = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemGetInfo, &free_bytes, &total_bytes));
  int64_t bytes = request.bytes() > 0 ? request.bytes() : kDefaultCeilingBytes;
  bytes = std::min<int64_t>(bytes, static_cast<int64_t>(free_bytes / 4));
  bytes = bytes / 256 * 256;
  if (bytes < (int64_t{1} << 20)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too little free GPU memory for a copy ceiling: ", free_bytes, " bytes free"));
  }
  const int repeats = request.repeats() > 0 ? request.repeats() : kDefaultCeilingRepeats;

  KTUNE_ASSIGN_OR_RETURN(DeviceMemory src, DeviceMemory::Allocate(driver_, bytes));
  KTUNE_ASSIGN_OR_RETURN(DeviceMemory dst, DeviceMemory::Allocate(driver_, bytes));
  // Touch both so the first timed copy does not pay for mapping pages.
  KTUNE_RETURN_IF_ERROR(
      KTUNE_CU(driver_, MemsetD32Async, src.ptr(), 0x3F800000u, bytes / 4, stream_.get()));
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, dst.ptr(), 0u, bytes / 4, stream_.get()));
  for (int i = 0; i < 2; ++i) {  // warm-up
    KTUNE_RETURN_IF_ERROR(
        KTUNE_CU(driver_, MemcpyDtoDAsync, dst.ptr(), src.ptr(), bytes, stream_.get()));
  }
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, StreamSynchronize, stream_.get()));
  std::vector<double> gbps;
  for (int i = 0; i < repeats; ++i) {
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventRecord, start_.get(), stream_.get()));
    KTUNE_RETURN_IF_ERROR(
        KTUNE_CU(driver_, MemcpyDtoDAsync, dst.ptr(), src.ptr(), bytes, stream_.get()));
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventRecord, stop_.get(), stream_.get()));
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventSynchronize, stop_.get()));
    float ms = 0;
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventElapsedTime, &ms, start_.get(), stop_.get()));
    if (ms > 0) gbps.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  if (gbps.empty()) return absl::InternalError("every timed copy took 0 ms");
  const Quartiles q = ComputeQuartiles(gbps);
  v1::Ceiling ceiling;
  ceiling.set_copy_gbps(q.median);
  ceiling.set_spread_gbps(q.q3 - q.q1);
  return ceiling;
}

// ---- Shared run machinery -----------------------------------------------------------

absl::StatusOr<std::vector<PreparedLaunch>> CudaWorkerSession::Prepare(
    const Module& module, const v1::KernelBinary& binary) {
  std::vector<PreparedLaunch> out;
  for (int i = 0; i < binary.launches_size(); ++i) {
    const v1::LaunchBinary& l = binary.launches(i);
    PreparedLaunch p;
    p.name = l.lowered_name();
    KTUNE_RETURN_IF_ERROR(ValidateDims(l.grid(), "grid", p.grid));
    KTUNE_RETURN_IF_ERROR(ValidateDims(l.block(), "block", p.block));
    p.shared_bytes = l.shared_bytes();
    const std::string at = absl::StrCat("launch ", i, " (", p.name, ")");
    absl::StatusOr<CUfunction> f = module.Function(p.name);
    if (!f.ok()) return Annotate(f.status(), at);
    p.function = *f;

    int max_threads = 0, registers = 0, static_smem = 0;
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, FuncGetAttribute, &max_threads,
                                   CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, p.function));
    KTUNE_RETURN_IF_ERROR(
        KTUNE_CU(driver_, FuncGetAttribute, &registers, CU_FUNC_ATTRIBUTE_NUM_REGS, p.function));
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, FuncGetAttribute, &static_smem,
                                   CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, p.function));
    if (p.threads() > max_threads) {
      return absl::ResourceExhaustedError(
          absl::StrCat(at, ": a block of ", p.threads(), " threads is over the kernel's limit of ",
                       max_threads, " (", registers, " registers per thread)"));
    }
    const int64_t optin = info_.max_shared_per_block_optin();
    if (optin > 0 && static_smem + int64_t{p.shared_bytes} > optin) {
      return absl::ResourceExhaustedError(
          absl::StrCat(at, ": ", static_smem, " bytes of static + ", p.shared_bytes,
                       " of dynamic shared memory are over the device's ", optin, " per block"));
    }
    if (p.shared_bytes > kDefaultDynamicSmem) {
      absl::Status s = KTUNE_CU(driver_, FuncSetAttribute, p.function,
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(p.shared_bytes));
      if (!s.ok()) {
        if (IsStickyCudaError(CudaResultOf(s))) return s;
        return absl::ResourceExhaustedError(
            absl::StrCat(at, ": cannot opt into ", p.shared_bytes,
                         " bytes of dynamic shared memory: ", s.message()));
      }
    }
    for (int a : l.args()) {
      auto tm = problem_->tensor_maps.find(a);
      if (tm == problem_->tensor_maps.end()) {
        p.params.push_back(problem_->values[static_cast<size_t>(a)].address());
        continue;
      }
      const v1::BoundTensorMap& map = TensorMapFor(binary, a, tm->second);
      const ProblemBuffer* buffer = nullptr;
      for (const ProblemBuffer& b : problem_->buffers) {
        if (b.arg_index == map.buffer_arg()) buffer = &b;
      }
      if (buffer == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": tensor map arg ", a, " names arg ", map.buffer_arg(), ", not a buffer"));
      }
      absl::StatusOr<std::unique_ptr<CUtensorMap>> encoded =
          EncodeTensorMap(driver_, map, buffer->memory.ptr(), buffer->bytes);
      if (!encoded.ok()) return Annotate(encoded.status(), absl::StrCat(at, ": tensor map arg ", a));
      p.params.push_back(encoded->get());
      p.tensor_maps.push_back(*std::move(encoded));
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::Status CudaWorkerSession::RestoreBuffers(bool poison) {
  for (ProblemBuffer& b : problem_->buffers) {
    const size_t words = AllocBytes(b.bytes) / 4;
    switch (b.role) {
      case v1::Buffer::INPUT:
        if (!poison) break;  // timing runs leave inputs alone; checks restore them
        [[fallthrough]];
      case v1::Buffer::INOUT:
      case v1::Buffer::SCRATCH:
        if (b.zero_fill) {
          KTUNE_RETURN_IF_ERROR(
              KTUNE_CU(driver_, MemsetD32Async, b.memory.ptr(), 0u, words, stream_.get()));
        } else {
          KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoDAsync, b.memory.ptr(), b.pristine.ptr(),
                                         b.bytes, stream_.get()));
        }
        break;
      case v1::Buffer::OUTPUT:
        if (poison) {
          KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, b.memory.ptr(),
                                         PoisonWord(b.dtype), words, stream_.get()));
        }
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaWorkerSession::Launch(const std::vector<PreparedLaunch>& launches,
                                       int64_t repeats) {
  for (int64_t r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < launches.size(); ++i) {
      const PreparedLaunch& l = launches[i];
      absl::Status s = KTUNE_CU(driver_, LaunchKernel, l.function, l.grid[0], l.grid[1], l.grid[2],
                                l.block[0], l.block[1], l.block[2], l.shared_bytes, stream_.get(),
                                const_cast<void**>(l.params.data()), nullptr);
      if (!s.ok()) return Annotate(s, absl::StrCat("launch ", i, " (", l.name, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaWorkerSession::TimeRuns(const std::vector<PreparedLaunch>& launches,
                                                   int64_t repeats, bool flush_l2) {
  KTUNE_RETURN_IF_ERROR(RestoreBuffers(/*poison=*/false));
  if (flush_l2 && flush_fn_ != nullptr) {
    // Reading twice the L2's size evicts (and writes back) whatever the last run left there,
    // before the start event, and leaves only clean lines behind.
    CUdeviceptr buf = flush_.ptr();
    unsigned long long vecs = flush_.bytes() / 16;
    CUdeviceptr sink = flush_sink_.ptr();
    void* params[] = {&buf, &vecs, &sink};
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, LaunchKernel, flush_fn_,
                                   static_cast<unsigned>(std::max(1, info_.sm_count()) * 4), 1, 1,
                                   256, 1, 1, 0, stream_.get(), params, nullptr));
  } else if (flush_l2) {
    // Writing twice the L2's size evicts whatever the last run left there.
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, flush_.ptr(), ++flush_value_,
                                   flush_.bytes() / 4, stream_.get()));
  }
  // The gate holds the stream until the batch and its events are enqueued, so the events
  // time the GPU running the launches back to back, not the host enqueueing them.
  // (A batch too long for the driver's queue would fill it behind the gate and wait for the
  // gate's timeout; one that long needs no gate.)
  const bool gated =
      gate_ && repeats * static_cast<int64_t>(launches.size()) <= kMaxGatedLaunches;
  if (gated) KTUNE_RETURN_IF_ERROR(gate_->Close(stream_.get()));
  absl::Status enqueued = KTUNE_CU(driver_, EventRecord, start_.get(), stream_.get());
  if (enqueued.ok()) enqueued = Launch(launches, repeats);
  if (enqueued.ok()) enqueued = KTUNE_CU(driver_, EventRecord, stop_.get(), stream_.get());
  if (gated) gate_->Open();  // whatever failed: the stream must not wait for the timeout
  KTUNE_RETURN_IF_ERROR(enqueued);
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventSynchronize, stop_.get()));
  float ms = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, EventElapsedTime, &ms, start_.get(), stop_.get()));
  return static_cast<double>(ms);
}

absl::Status CudaWorkerSession::Download() {
  for (ProblemBuffer& b : problem_->buffers) {
    if (!b.checked()) continue;
    b.got.resize(b.bytes);
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoH, b.got.data(), b.memory.ptr(), b.bytes));
  }
  outputs_current_ = true;
  return absl::OkStatus();
}

absl::Status CudaWorkerSession::EnsureFlushBuffer() {
  if (flush_) return absl::OkStatus();
  const int64_t bytes = std::max<int64_t>(2 * info_.l2_bytes(), int64_t{8} << 20) / 4 * 4;
  KTUNE_ASSIGN_OR_RETURN(flush_, DeviceMemory::Allocate(driver_, static_cast<size_t>(bytes)));
  KTUNE_RETURN_IF_ERROR(
      KTUNE_CU(driver_, MemsetD32Async, flush_.ptr(), 0u, flush_.bytes() / 4, stream_.get()));
  KTUNE_ASSIGN_OR_RETURN(flush_sink_, DeviceMemory::Allocate(driver_, 16));
  absl::StatusOr<Module> module = Module::Load(driver_, kReadFlushPtx);
  absl::StatusOr<CUfunction> fn =
      module.ok() ? module->Function("ktune_read_flush") : absl::StatusOr<CUfunction>(module.status());
  if (fn.ok()) {
    flush_module_ = *std::move(module);
    flush_fn_ = *fn;
  } else {
    // A driver that cannot JIT the PTX still gets a flush: the memset one.
    std::fprintf(stderr, "ktune-worker: read flush unavailable, flushing with memset: %s\n",
                 std::string(fn.status().message()).c_str());
  }
  return absl::OkStatus();
}

// ---- SetProblem ----------------------------------------------------------------------

absl::StatusOr<v1::ProblemReady> CudaWorkerSession::SetProblem(const v1::Problem& spec) {
  KTUNE_RETURN_IF_ERROR(RequireHello());
  problem_.reset();  // frees the old problem's buffers before allocating the new ones
  if (!(spec.atol() >= 0) || !(spec.rtol() >= 0)) {
    return absl::InvalidArgumentError("problem.atol and problem.rtol must be >= 0");
  }
  KTUNE_RETURN_IF_ERROR(ValidateBinary(spec.reference(), spec.args_size(), "problem.reference"));
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Problem> problem, PlanProblem(spec));
  LoadOwnKernels();
  KTUNE_RETURN_IF_ERROR(EnsureFlushBuffer());
  KTUNE_RETURN_IF_ERROR(CheckFreeMemory(DeviceBytes(*problem)));
  KTUNE_RETURN_IF_ERROR(UploadBuffers(spec, *problem));
  KTUNE_ASSIGN_OR_RETURN(problem->values, BuildKernelArgs(spec, problem->buffers));
  problem_ = std::move(problem);
  outputs_current_ = false;

  // From here on a failure leaves no problem behind.
  absl::StatusOr<v1::ProblemReady> ready = RunReference(spec.reference());
  if (!ready.ok()) {
    problem_.reset();
    return Annotate(ready.status(), "reference");
  }
  return ready;
}

absl::Status CudaWorkerSession::CheckFreeMemory(size_t device_bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemGetInfo, &free_bytes, &total_bytes));
  if (device_bytes > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the problem needs ", device_bytes,
                     " bytes of GPU memory (buffers and their pristine "
                     "copies), ",
                     free_bytes, " are free"));
  }
  return absl::OkStatus();
}

absl::Status CudaWorkerSession::UploadBuffers(const v1::Problem& spec, Problem& problem) {
  for (ProblemBuffer& b : problem.buffers) {
    const v1::ArgSpec& a = spec.args(b.arg_index);
    const std::string at = absl::StrCat("problem.args[", b.arg_index, "] (", b.name, ")");
    KTUNE_ASSIGN_OR_RETURN(b.memory, DeviceMemory::Allocate(driver_, AllocBytes(b.bytes)));
    if (b.role == v1::Buffer::OUTPUT || b.zero_fill) continue;
    if (absl::Status valid = ValidateFill(a.fill()); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", valid.message()));
    }
    KTUNE_ASSIGN_OR_RETURN(b.pristine, DeviceMemory::Allocate(driver_, AllocBytes(b.bytes)));
    const uint64_t seed = BufferSeed(spec.seed(), b.arg_index);
    if (device_buffers_ && DeviceBuffers::CanFill(a.fill())) {
      // The same bytes as the host's, generated where they are needed.
      KTUNE_RETURN_IF_ERROR(
          device_buffers_->Fill(b.dtype, b.pristine.ptr(), a.count(), a.fill(), seed, stream_.get()));
      continue;
    }
    absl::StatusOr<std::string> data = GenerateFill(b.dtype, a.count(), a.fill(), seed);
    if (!data.ok())
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", data.status().message()));
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyHtoD, b.pristine.ptr(), data->data(), b.bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ArgValue>> CudaWorkerSession::BuildKernelArgs(
    const v1::Problem& spec, const std::vector<ProblemBuffer>& buffers) const {
  std::vector<ArgValue> values(static_cast<size_t>(spec.args_size()));
  for (const ProblemBuffer& b : buffers) {
    ArgValue& v = values[static_cast<size_t>(b.arg_index)];
    v.kind = ArgValue::Kind::kPtr;
    v.ptr = b.memory.ptr();
  }
  for (int i = 0; i < spec.args_size(); ++i) {
    const v1::ArgSpec& a = spec.args(i);
    if (a.is_buffer() || a.scalar_type() == "tensor_map") continue;  // tensor maps: Prepare
    KTUNE_ASSIGN_OR_RETURN(values[static_cast<size_t>(i)], ScalarArg(a, ArgWhere(i, a)));
  }
  return values;
}

absl::StatusOr<v1::ProblemReady> CudaWorkerSession::RunReference(
    const v1::KernelBinary& reference) {
  KTUNE_ASSIGN_OR_RETURN(Module module, Module::Load(driver_, reference.cubin()));
  KTUNE_ASSIGN_OR_RETURN(std::vector<PreparedLaunch> launches, Prepare(module, reference));
  KTUNE_RETURN_IF_ERROR(RestoreBuffers(/*poison=*/true));
  KTUNE_RETURN_IF_ERROR(Launch(launches, 1));
  if (absl::Status s = KTUNE_CU(driver_, CtxSynchronize); !s.ok()) {
    if (!poisoned()) forced_poison_ = true;  // an asynchronous error: trust nothing more
    return absl::InternalError(absl::StrCat("the reference failed: ", s.message()));
  }
  // The outputs come back only where the host needs them: to check candidates against, to
  // show (KeepOutputs), or to digest where the GPU cannot.
  if (!check_ || keep_outputs_ || !device_buffers_) KTUNE_RETURN_IF_ERROR(Download());
  Sha256Builder digest;
  for (ProblemBuffer& b : problem_->buffers) {
    if (!b.checked()) continue;
    if (device_buffers_) {
      KTUNE_ASSIGN_OR_RETURN(std::string d,
                             device_buffers_->Digest(b.memory.ptr(), b.bytes, stream_.get()));
      digest.AddField(d);
    } else {
      digest.AddField(OutputDigest(b.got));
    }
    if (check_) {
      // Candidates are checked against this copy on the GPU: the host keeps no expected
      // bytes, and the read-back ones only for LastOutputs.
      KTUNE_ASSIGN_OR_RETURN(b.reference, DeviceMemory::Allocate(driver_, AllocBytes(b.bytes)));
      KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoDAsync, b.reference.ptr(), b.memory.ptr(),
                                     b.bytes, stream_.get()));
      if (!keep_outputs_) std::string().swap(b.got);
    } else {
      b.expected = b.got;
    }
  }
  if (check_ && !keep_outputs_) outputs_current_ = false;
  KTUNE_ASSIGN_OR_RETURN(double ms, TimeRuns(launches, 1, /*flush_l2=*/true));
  v1::ProblemReady ready;
  ready.set_reference_time_ns(ms * 1e6);
  ready.set_output_digest(digest.Finish());
  return ready;
}

// ---- MeasureCandidate ----------------------------------------------------------------

absl::StatusOr<v1::Measurement> CudaWorkerSession::Measure(const v1::MeasureCandidate& request) {
  KTUNE_RETURN_IF_ERROR(RequireHello());
  if (problem_ == nullptr) {
    return absl::FailedPreconditionError("no problem set: send a Problem before measuring");
  }
  const v1::KernelBinary& candidate = request.candidate();
  KTUNE_RETURN_IF_ERROR(
      ValidateBinary(candidate, static_cast<int>(problem_->values.size()), "measure.candidate"));

  // Not cleared (Download would zero-fill them again on every candidate before copying).
  outputs_current_ = false;

  // Each phase either goes on, ends the measurement with the candidate's outcome (Fail), or
  // returns an error of the worker's own.
  v1::Measurement m;
  absl::StatusOr<Module> module = Module::Load(driver_, candidate.cubin());
  if (!module.ok()) {
    Fail(module.status(), Outcome::kLaunchFailed, "loading the cubin", &m);
    return m;
  }
  absl::StatusOr<std::vector<PreparedLaunch>> launches = Prepare(*module, candidate);
  if (!launches.ok()) {
    Fail(launches.status(), Outcome::kLaunchFailed, "preparing", &m);
    return m;
  }
  ReadResources(launches->front(), &m);
  if (Finished(m)) return m;
  if (!request.skip_check()) {
    KTUNE_RETURN_IF_ERROR(CheckCandidate(*launches, &m));
    if (Finished(m)) return m;
  }
  KTUNE_RETURN_IF_ERROR(TimeCandidate(*launches, ResolveTiming(request.timing()), &m));
  return m;
}

void CudaWorkerSession::Fail(const absl::Status& s, Outcome otherwise, absl::string_view step,
                             v1::Measurement* m) const {
  Outcome o = otherwise;
  if (poisoned() || IsStickyCudaError(CudaResultOf(s))) {
    o = Outcome::kCrashed;
  } else if (s.code() == absl::StatusCode::kResourceExhausted) {
    o = Outcome::kResourceLimit;
  }
  m->set_outcome(std::string(OutcomeName(o)));
  m->set_detail(absl::StrCat(step, ": ", s.message()));
  m->set_time_ns(0);
  m->set_spread_ns(0);
  m->set_repeats(0);
  m->set_batch(0);
}

void CudaWorkerSession::ReadResources(const PreparedLaunch& first, v1::Measurement* m) const {
  int registers = 0, local = 0, static_smem = 0, blocks_per_sm = 0;
  absl::Status s =
      KTUNE_CU(driver_, FuncGetAttribute, &registers, CU_FUNC_ATTRIBUTE_NUM_REGS, first.function);
  if (s.ok()) {
    s = KTUNE_CU(driver_, FuncGetAttribute, &local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                 first.function);
  }
  if (s.ok()) {
    s = KTUNE_CU(driver_, FuncGetAttribute, &static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 first.function);
  }
  if (s.ok()) {
    s = KTUNE_CU(driver_, OccupancyMaxActiveBlocksPerMultiprocessor, &blocks_per_sm,
                 first.function, static_cast<int>(first.threads()), first.shared_bytes);
  }
  if (!s.ok()) return Fail(s, Outcome::kLaunchFailed, "querying the kernel", m);
  m->set_registers(registers);
  m->set_local_bytes(local);
  m->set_static_smem(static_smem);
  m->set_blocks_per_sm(blocks_per_sm);
  if (blocks_per_sm <= 0) {
    return Fail(absl::ResourceExhaustedError(absl::StrCat(
                    "no block of ", first.threads(), " threads with ", registers,
                    " registers per thread and ", static_smem + first.shared_bytes,
                    " bytes of shared memory fits on a multiprocessor")),
                Outcome::kResourceLimit, "occupancy", m);
  }
  SetOccupancy(first, blocks_per_sm, m);
}

void CudaWorkerSession::SetOccupancy(const PreparedLaunch& first, int blocks_per_sm,
                                     v1::Measurement* m) const {
  const int64_t warps_per_block = (first.threads() + 31) / 32;
  const int64_t max_warps = std::max(1, info_.max_threads_per_sm() / 32);
  m->set_occupancy(std::min(1.0, static_cast<double>(blocks_per_sm * warps_per_block) /
                                     static_cast<double>(max_warps)));
  const double per_wave = static_cast<double>(info_.sm_count()) * blocks_per_sm;
  if (per_wave > 0) {
    const double waves = static_cast<double>(first.blocks()) / per_wave;
    m->set_waves(waves);
    const double frac = waves - std::floor(waves);
    m->set_last_wave(frac == 0 ? 1.0 : frac);
  }
}

absl::Status CudaWorkerSession::CheckCandidate(const std::vector<PreparedLaunch>& launches,
                                               v1::Measurement* m) {
  // Fresh inputs, poisoned outputs, one run, compare with the reference.
  if (absl::Status s = RestoreBuffers(/*poison=*/true); !s.ok()) {
    if (!poisoned()) return s;  // the worker's own copies failed: not the candidate's doing
    Fail(s, Outcome::kCrashed, "restoring inputs", m);
    return absl::OkStatus();
  }
  absl::Status launched = Launch(launches, 1);
  // Drain the stream whatever happened: an earlier launch may have faulted.
  absl::Status synced = KTUNE_CU(driver_, CtxSynchronize);
  if (!synced.ok()) {
    forced_poison_ = true;  // an asynchronous error from the candidate's kernels
    Fail(synced, Outcome::kCrashed, "running the candidate", m);
    return absl::OkStatus();
  }
  if (!launched.ok()) {
    Fail(launched, Outcome::kLaunchFailed, "launching", m);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Comparison>> comparisons = CompareOutputs();
  if (!comparisons.ok()) {
    if (!poisoned()) return comparisons.status();
    Fail(comparisons.status(), Outcome::kCrashed, "reading outputs", m);
    return absl::OkStatus();
  }
  CompareWithReference(*comparisons, m);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Comparison>> CudaWorkerSession::CompareOutputs() {
  std::vector<Comparison> out;
  if (!check_) {  // (with it, every problem's reference keeps its outputs on the GPU)
    KTUNE_RETURN_IF_ERROR(Download());
    for (const ProblemBuffer& b : problem_->buffers) {
      if (b.checked()) {
        out.push_back(CompareBuffers(b.dtype, b.got, b.expected, problem_->atol, problem_->rtol));
      }
    }
    return out;
  }
  if (keep_outputs_) KTUNE_RETURN_IF_ERROR(Download());
  for (const ProblemBuffer& b : problem_->buffers) {
    if (!b.checked()) continue;
    KTUNE_ASSIGN_OR_RETURN(Comparison c,
                           check_->Compare(b.dtype, b.memory.ptr(), b.reference.ptr(),
                                           b.bytes / static_cast<size_t>(DTypeSize(b.dtype)),
                                           problem_->atol, problem_->rtol, stream_.get()));
    out.push_back(c);
  }
  return out;
}

void CudaWorkerSession::LoadOwnKernels() {
  if (own_kernels_loaded_) return;
  own_kernels_loaded_ = true;
  check_ = LoadedOrNone(OutputCheck::Load(driver_, info_.sm_count()),
                        "the GPU output check is unavailable, checking on the host");
  device_buffers_ = LoadedOrNone(DeviceBuffers::Load(driver_, info_.sm_count()),
                                 "GPU fills and digests are unavailable, making them on the host");
  gate_ = LoadedOrNone(LaunchGate::Load(driver_),
                       "the launch gate is unavailable, timing batches as the host enqueues them");
}

void CudaWorkerSession::CompareWithReference(const std::vector<Comparison>& comparisons,
                                             v1::Measurement* m) const {
  int64_t mismatches = 0;
  double max_abs = 0;
  std::string first_mismatch;
  size_t k = 0;
  for (const ProblemBuffer& b : problem_->buffers) {
    if (!b.checked()) continue;
    const Comparison& c = comparisons[k++];
    mismatches += c.mismatches;
    max_abs = std::max(max_abs, c.max_abs_error);
    if (c.mismatches > 0 && first_mismatch.empty()) {
      first_mismatch = DescribeMismatch(b.name, c, problem_->atol, problem_->rtol);
    }
  }
  m->set_max_abs_error(max_abs);
  m->set_mismatches(mismatches);
  if (mismatches > 0) {
    m->set_outcome(std::string(OutcomeName(Outcome::kWrongResult)));
    m->set_detail(first_mismatch);
  }
}

absl::Status CudaWorkerSession::TimeCandidate(const std::vector<PreparedLaunch>& launches,
                                              const TimingPlan& plan, v1::Measurement* m) {
  if (plan.flush_l2) KTUNE_RETURN_IF_ERROR(EnsureFlushBuffer());
  const Clock::time_point began = Clock::now();
  absl::StatusOr<int64_t> batch = WarmUp(launches, plan, began);
  if (!batch.ok()) {
    Fail(batch.status(), Outcome::kLaunchFailed, "warm-up", m);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> samples = Sample(launches, plan, *batch, began);
  if (!samples.ok()) {
    Fail(samples.status(), Outcome::kLaunchFailed, "timing", m);
    return absl::OkStatus();
  }
  if (absl::Status s = KTUNE_CU(driver_, CtxSynchronize); !s.ok()) {
    forced_poison_ = true;
    Fail(s, Outcome::kCrashed, "after timing", m);
    return absl::OkStatus();
  }
  if (poisoned()) {
    Fail(absl::InternalError("the context was poisoned while timing"), Outcome::kCrashed,
         "timing", m);
    return absl::OkStatus();
  }
  const Quartiles q = ComputeQuartiles(*samples);
  m->set_outcome(std::string(OutcomeName(Outcome::kOk)));
  m->set_time_ns(q.median * 1e6);
  m->set_spread_ns((q.q3 - q.q1) * 1e6);
  m->set_repeats(static_cast<int64_t>(samples->size()));
  m->set_batch(*batch);
  m->set_l2_flushed(plan.flush_l2);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaWorkerSession::WarmUp(const std::vector<PreparedLaunch>& launches,
                                                  const TimingPlan& plan,
                                                  Clock::time_point began) {
  // Warm-up runs, timed one by one, tell how long one run takes.
  std::vector<double> warm;
  for (int64_t i = 0; i < plan.warmup; ++i) {
    KTUNE_ASSIGN_OR_RETURN(double ms, TimeRuns(launches, 1, plan.flush_l2));
    warm.push_back(ms);
    if (MsSince(began) > plan.time_cap_ms / 2) break;  // a slow kernel: keep time for samples
  }
  return SampleBatch(plan, ComputeQuartiles(warm).median);
}

absl::StatusOr<std::vector<double>> CudaWorkerSession::Sample(
    const std::vector<PreparedLaunch>& launches, const TimingPlan& plan, int64_t batch,
    Clock::time_point began) {
  std::vector<double> samples;  // ms per run
  while (true) {
    KTUNE_ASSIGN_OR_RETURN(double ms, TimeRuns(launches, batch, plan.flush_l2));
    samples.push_back(ms / static_cast<double>(batch));
    const int64_t n = static_cast<int64_t>(samples.size());
    if (n >= plan.max_repeats || MsSince(began) >= plan.time_cap_ms) break;
    if (n >= plan.min_repeats && SpreadIsSmall(samples, batch, plan.target_rel_spread)) break;
  }
  return samples;
}

}  // namespace

std::unique_ptr<WorkerSession> NewWorkerSession(int ordinal) {
  return std::make_unique<CudaWorkerSession>(ordinal);
}

}  // namespace ktune
